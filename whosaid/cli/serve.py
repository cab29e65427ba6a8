"""`whosaid serve`: run the HTTP server (FastAPI app under Uvicorn).

Models come from --asr-model/... flags, else ASR_MODEL/..., else the embedded default; server
limits and the API key from the environment (see whosaid/server/settings.py). Heavy imports stay
inside `run`: the CLI imports this module just to build its parser.
"""

from __future__ import annotations

import argparse
import logging
import sys

from whosaid.cli.model_options import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="interface to listen on (default: $HOST, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help="TCP port (default: $PORT, else 8000)")
    parser.add_argument(
        "--log-level", default="info", choices=("critical", "error", "warning", "info", "debug")
    )
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
