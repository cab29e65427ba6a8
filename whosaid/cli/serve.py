"""`whosaid serve`: run the HTTP server (FastAPI app under Uvicorn).

Models come from --asr-model/... flags, else ASR_MODEL/..., else the embedded default; server
limits and the API key from the environment (see whosaid/server/settings.py). Heavy imports stay
inside `run`: the CLI imports this module just to build its parser.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from whosaid.cli.model_options import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="interface to listen on (default: $HOST, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help="TCP port (default: $PORT, else 8000)")
    parser.add_argument(
        "--log-level", default="info", choices=("critical", "error", "warning", "info", "debug")
    )
    ray = parser.add_argument_group(
        "Ray Serve (--ray: replicas of this server, autoscaled; default 1 replica of 1 CPU)"
    )
    ray.add_argument("--ray", action="store_true", help="serve on Ray Serve instead of one Uvicorn process")
    ray.add_argument("--address", help="--ray: join this cluster ('auto', ray://HEAD:10001); default: a local one")
    ray.add_argument(
        "--ray-config",
        type=Path,
        metavar="YAML",
        help="--ray: Ray Serve deployment options (autoscaling_config, ray_actor_options, max_ongoing_requests); "
        "the flags below override its keys",
    )
    ray.add_argument("--min-replicas", type=int, help="--ray: fewest replicas")
    ray.add_argument("--max-replicas", type=int, help="--ray: most replicas")
    ray.add_argument("--initial-replicas", type=int, help="--ray: replicas at start")
    ray.add_argument("--target-ongoing-requests", type=float, help="--ray: requests per replica Ray scales for")
    ray.add_argument("--max-ongoing-requests", type=int, help="--ray: requests a replica takes at once")
    ray.add_argument("--num-cpus", type=float, help="--ray: CPUs per replica")
    ray.add_argument("--num-gpus", type=float, help="--ray: GPUs per replica")
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from whosaid.cli.model_options import model_settings_from_args
    from whosaid.errors import ModelLoadError
    from whosaid.server.app import create_app
    from whosaid.server.settings import ServerSettings
    from whosaid.server.shutdown import serve

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {name: value for name, value in (("host", args.host), ("port", args.port)) if value is not None}
    server_settings = ServerSettings(**overrides)
    try:
        # Resolved before listening, so that a missing model fails the command, not only /ready.
        model_settings = model_settings_from_args(args)
    except ModelLoadError as error:
        print(f"whosaid serve: {error}", file=sys.stderr)
        return 1
    if args.ray:
        return _run_on_ray(args, model_settings, server_settings)
    ray_only = [flag for flag in _RAY_FLAGS if getattr(args, flag.lstrip("-").replace("-", "_")) is not None]
    if ray_only:
        print(f"whosaid serve: {', '.join(ray_only)} need --ray", file=sys.stderr)
        return 2
    app = create_app(model_settings, server_settings)
    # One worker process: the models are loaded once per process, and the job limiter only
    # bounds the work of its own process.
    serve(
        app,
        host=server_settings.host,
        port=server_settings.port,
        log_level=args.log_level,
        grace_s=server_settings.shutdown_grace_s,
    )
    return 0


_RAY_FLAGS = (
    "--address", "--ray-config", "--min-replicas", "--max-replicas", "--initial-replicas",
    "--target-ongoing-requests", "--max-ongoing-requests", "--num-cpus", "--num-gpus",
)


def _run_on_ray(args: argparse.Namespace, model_settings, server_settings) -> int:
    from whosaid.cli import ray_serve

    try:
        options = ray_serve.DeploymentOptions.build(
            args.ray_config,
            min_replicas=args.min_replicas,
            max_replicas=args.max_replicas,
            initial_replicas=args.initial_replicas,
            target_ongoing_requests=args.target_ongoing_requests,
            num_cpus=args.num_cpus,
            num_gpus=args.num_gpus,
            max_ongoing_requests=args.max_ongoing_requests,
        )
    except ValueError as error:
        print(f"whosaid serve: {error}", file=sys.stderr)
        return 2
    ray_serve.run(model_settings, server_settings, options, address=args.address)
    return 0
