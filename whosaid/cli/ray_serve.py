"""`whosaid serve --ray`: the server's FastAPI app (routes, API key, limits, /health, /ready,
/metrics) as a Ray Serve deployment whose replicas Ray autoscales: each replica loads its own
engine, and counts as started only once its models are loaded, so a replica added under load
takes requests only when it can answer them (a replica whose models fail to load fails its
start, and `serve status` says why).

The autoscaling settings are Ray Serve's own keys, from a YAML file shaped as a deployment of a
Serve config file (`autoscaling_config`, `ray_actor_options`, `max_ongoing_requests`) and flags
over it. `build_app` is the application builder for Ray's own CLI:
`serve run whosaid.cli.ray_serve:build_app min_replicas=1 max_replicas=4 num_gpus=1`.

Ray is imported only here, when this command runs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from whosaid.config import ModelSettings
    from whosaid.server.settings import ServerSettings

APP_NAME = "whosaid"
#: How often a starting replica looks whether its models are loaded.
LOAD_POLL_S = 0.2
DEPLOYMENT_NAME = "whosaid"
#: Keys of a YAML file: a deployment of a Serve config file, less what this module decides.
YAML_KEYS = ("autoscaling_config", "ray_actor_options", "max_ongoing_requests")


@dataclass(frozen=True)
class DeploymentOptions:
    """The deployment's scaling, in Ray Serve's own terms."""

    autoscaling_config: dict[str, Any] = field(
        default_factory=lambda: {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 2}
    )
    ray_actor_options: dict[str, Any] = field(default_factory=lambda: {"num_cpus": 1, "num_gpus": 0})
    max_ongoing_requests: Optional[int] = None

    @classmethod
    def build(
        cls,
        config_file: Optional[Path] = None,
        *,
        min_replicas: Optional[int] = None,
        max_replicas: Optional[int] = None,
        initial_replicas: Optional[int] = None,
        target_ongoing_requests: Optional[float] = None,
        num_cpus: Optional[float] = None,
        num_gpus: Optional[float] = None,
        max_ongoing_requests: Optional[int] = None,
    ) -> "DeploymentOptions":
        """The defaults, then `config_file`'s keys, then the values given. Raises ValueError
        saying what to fix; Ray checks the autoscaling keys themselves when the app is built."""
        defaults = cls()
        autoscaling, actor = dict(defaults.autoscaling_config), dict(defaults.ray_actor_options)
        ongoing = None
        if config_file is not None:
            loaded = _read_yaml(config_file)
            autoscaling.update(loaded.get("autoscaling_config") or {})
            actor.update(loaded.get("ray_actor_options") or {})
            ongoing = loaded.get("max_ongoing_requests")
        given = {
            "min_replicas": min_replicas,
            "max_replicas": max_replicas,
            "initial_replicas": initial_replicas,
            "target_ongoing_requests": target_ongoing_requests,
        }
        autoscaling.update({key: value for key, value in given.items() if value is not None})
        resources = {"num_cpus": num_cpus, "num_gpus": num_gpus}
        actor.update({key: value for key, value in resources.items() if value is not None})
        if max_ongoing_requests is not None:
            ongoing = max_ongoing_requests
        if autoscaling.get("min_replicas", 1) > autoscaling.get("max_replicas", 1):
            raise ValueError(
                f"min_replicas ({autoscaling['min_replicas']}) is above max_replicas ({autoscaling['max_replicas']})"
            )
        return cls(autoscaling_config=autoscaling, ray_actor_options=actor, max_ongoing_requests=ongoing)

    def deployment_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "name": DEPLOYMENT_NAME,
            "autoscaling_config": self.autoscaling_config,
            "ray_actor_options": self.ray_actor_options,
        }
        if self.max_ongoing_requests is not None:
            options["max_ongoing_requests"] = self.max_ongoing_requests
        return options


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"--ray-config {path}: {error}") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, dict) or set(loaded) - set(YAML_KEYS):
        keys = ", ".join(YAML_KEYS)
        raise ValueError(f"--ray-config {path}: a mapping with the keys {keys} (Ray Serve's deployment options)")
    return loaded


class WhosaidReplica:
    """One replica: its engine, loaded in the constructor, and the server's app around it."""

    async def __init__(self, model_settings: "ModelSettings", server_settings: "ServerSettings") -> None:
        from whosaid.errors import ModelLoadError
        from whosaid.server.app import create_app

        self._app = create_app(model_settings, server_settings)
        # The app's own loader (its lifespan finds it started), so /ready reports the load as on
        # the plain server; the replica starts only once it is done.
        state = self._app.state.service.state
        state.start_loading()
        while not state.ready:
            problem = state.not_ready_error()
            if problem.code == "model_load_error":
                raise ModelLoadError(problem.message)
            await asyncio.sleep(LOAD_POLL_S)

    def __serve_build_asgi_app__(self) -> Any:
        return self._app


def application(model_settings: "ModelSettings", server_settings: "ServerSettings", options: DeploymentOptions) -> Any:
    """The Ray Serve application: bind it with `serve.run`."""
    from ray import serve

    deployment = serve.deployment(serve.ingress()(WhosaidReplica)).options(**options.deployment_options())
    return deployment.bind(model_settings, server_settings)


def build_app(args: dict[str, str]) -> Any:
    """The application builder of `serve run whosaid.cli.ray_serve:build_app key=value ...`: the
    keys are this module's flags without dashes (config=FILE, min_replicas, max_replicas,
    initial_replicas, target_ongoing_requests, num_cpus, num_gpus, max_ongoing_requests) and the
    model flags (asr_model, diarization_model, ...); models and server settings otherwise come
    from the environment, as for `whosaid serve`."""
    from whosaid.cli.model_options import resolve_model_settings
    from whosaid.server.settings import ServerSettings

    numbers = {
        "min_replicas": int, "max_replicas": int, "initial_replicas": int, "target_ongoing_requests": float,
        "num_cpus": float, "num_gpus": float, "max_ongoing_requests": int,
    }
    model_keys = ("asr_model", "assistant_model", "diarization_model", "device", "dtype")
    unknown = set(args) - set(numbers) - set(model_keys) - {"config"}
    if unknown:
        raise ValueError(f"unknown arguments {', '.join(sorted(unknown))}; known: config, {', '.join(numbers)}, "
                         f"{', '.join(model_keys)}")
    config = Path(args["config"]) if "config" in args else None
    options = DeploymentOptions.build(config, **{key: kind(args[key]) for key, kind in numbers.items() if key in args})
    model_settings = resolve_model_settings(**{key: args.get(key) for key in model_keys})
    return application(model_settings, ServerSettings(), options)


def run(
    model_settings: "ModelSettings",
    server_settings: "ServerSettings",
    options: DeploymentOptions,
    *,
    address: Optional[str] = None,
) -> None:
    """Serves on server_settings' host and port until interrupted (Ctrl-C, SIGTERM)."""
    import signal
    import threading

    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(address=address)
    serve.start(http_options={"host": server_settings.host, "port": server_settings.port})
    serve.run(application(model_settings, server_settings, options), name=APP_NAME, route_prefix="/")
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass
    finally:
        serve.delete(APP_NAME)
