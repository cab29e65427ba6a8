"""The app factory. Routers stay thin: every inference route goes through TranscriptionService
into the Engine; error mapping, limits, auth and metrics are installed here once."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator, Optional, Union

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from whosaid import __version__
from whosaid.config import ModelSettings
from whosaid.engine import Engine
from whosaid.server.auth import ApiKeyMiddleware
from whosaid.server.errors import install_error_handlers
from whosaid.server.jobs import JobLimiter
from whosaid.server.limits import BodySizeLimitMiddleware
from whosaid.server.metrics import Metrics, MetricsMiddleware
from whosaid.server.routes import inference, openai, ops, realtime, ui
from whosaid.server.schemas import InferenceRequest
from whosaid.server.service import TranscriptionService
from whosaid.server.settings import ServerSettings
from whosaid.server.state import EngineFactory, EngineState

DESCRIPTION = """\
What was said, and who said it: Whisper speech recognition with optional speculative decoding
and pyannote speaker diarization.

* `POST /`: the Hugging Face Inference Endpoints contract (JSON with base64 `inputs`, or the raw
  audio file with parameters in the query string).
* `POST /v1/audio/transcriptions`, `/v1/audio/translations`: OpenAI's audio API.
* `GET /health`, `/ready`, `/metrics`: operations.
* `GET /ui`: a web page that transcribes a file and shows who spoke when.
* `GET /v1/realtime?intent=transcription` (WebSocket): live captions with speakers, OpenAI's
  Realtime transcription protocol.

With API_KEY set, every route but /health, /ready and the page's static files (this description included) needs
`Authorization: Bearer <API_KEY>` (a WebSocket may send the key as the subprotocol
`openai-insecure-api-key.<API_KEY>` or the query parameter `api_key` instead).

Errors are `{"error": {"message", "type", "code", "param"}}`.
"""


def create_app(
    engine: Union[EngineFactory, ModelSettings, None] = None,
    server_settings: Optional[ServerSettings] = None,
) -> FastAPI:
    """`engine`: a function that builds the Engine (called once, in a background thread), or the
    ModelSettings to build it from (`whosaid serve` resolves the embedded default); None reads
    them from the environment. `server_settings`: None reads them from the environment."""
    settings = server_settings or ServerSettings()
    state = EngineState(_engine_factory(engine))
    limiter = JobLimiter(settings.max_concurrent_jobs, settings.max_queue)
    metrics = Metrics()
    metrics.track(
        waiting=lambda: limiter.waiting,
        running=lambda: limiter.running,
        ready=lambda: float(state.ready),
        model_info=lambda: _runtime_labels(state),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limiter.bind_loop(asyncio.get_running_loop())
        state.start_loading()
        yield

    # A form's text fields (known-speaker references as data URLs) may be as large as the body
    # MAX_UPLOAD_MB allows, not the multipart parser's default 1 MiB per field.
    form_limits = {"max_part_size": settings.max_upload_bytes}
    app = FastAPI(
        title="whosaid", version=__version__, description=DESCRIPTION, lifespan=lifespan, form_limits=form_limits
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.service = TranscriptionService(state, limiter, metrics, settings.time_budget)
    install_error_handlers(app)
    app.state.realtime_sessions = realtime.SessionCount(settings.realtime_max_sessions)
    for module in (inference, openai, ops, realtime, ui):
        app.include_router(module.router)
    # Added innermost first: metrics see every response, CORS headers go on errors too.
    app.add_middleware(BodySizeLimitMiddleware, max_body_bytes=settings.max_upload_bytes)
    # Outside the body limit: a keyless request is refused on its headers, before its body.
    api_key = settings.api_key.get_secret_value() if settings.api_key else None
    app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    route_paths = frozenset(getattr(route, "path", "") for route in app.routes)
    app.add_middleware(MetricsMiddleware, metrics=metrics, route_paths=route_paths)
    _document_models(app, InferenceRequest)
    return app


def _runtime_labels(state: EngineState) -> Optional[dict[str, str]]:
    return state.engine.runtime.as_labels() if state.engine is not None else None


def _engine_factory(engine: Union[EngineFactory, ModelSettings, None]) -> EngineFactory:
    if isinstance(engine, ModelSettings):
        return lambda: Engine.from_settings(engine)
    if engine is None:
        return Engine.from_settings
    return engine


def _document_models(app: FastAPI, *models: type) -> None:
    """Add models that routes read by hand (POST / parses its body itself, to accept both JSON
    and raw audio) to the OpenAPI components, where the routes' `$ref`s point."""
    build_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = build_openapi()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(model_schema.pop("$defs", {}))
                components[model.__name__] = model_schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
