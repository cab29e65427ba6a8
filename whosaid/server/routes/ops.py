"""GET /health (alive), /ready (models loaded), /metrics (Prometheus), /v1/voices (the voice
library). None of them waits for a job slot, so they answer while inference runs."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from whosaid.server.auth import require_api_key
from whosaid.server.errors import ErrorResponse
from whosaid.server.schemas import HealthResponse, ReadyResponse, VoiceEntry, VoicesResponse

router = APIRouter(tags=["Operations"])


@router.get("/health", response_model=HealthResponse, summary="Liveness: the process answers")
async def health() -> HealthResponse:
    return HealthResponse()


@router.get(
    "/ready",
    response_model=ReadyResponse,
    responses={
        503: {"model": ErrorResponse, "description": "models loading or failed to load; the message says which"}
    },
    summary="Readiness: the models are loaded",
)
async def ready(request: Request) -> ReadyResponse:
    state = request.app.state.service.state
    runtime = state.require_engine().runtime
    return ReadyResponse(
        load_duration_s=state.load_duration_s,
        device=runtime.device,
        dtype=runtime.dtype,
        attn_implementation=runtime.attn_implementation,
        warnings=[runtime.gpu_unusable] if runtime.gpu_unusable else None,
    )


@router.get(
    "/metrics",
    dependencies=[Depends(require_api_key)],
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text exposition format"}},
    summary="Prometheus metrics",
)
async def metrics(request: Request) -> Response:
    body, content_type = request.app.state.metrics.render()
    return Response(body, media_type=content_type)


@router.get(
    "/v1/voices",
    response_model=VoicesResponse,
    dependencies=[Depends(require_api_key)],
    responses={503: {"model": ErrorResponse, "description": "models loading or failed to load"}},
    summary="The voice library (VOICES_DIR): names that diarized speakers are matched against",
)
async def voices(request: Request) -> VoicesResponse:
    identifier = request.app.state.service.engine().speaker_identifier
    library = identifier.library if identifier is not None else ()
    return VoicesResponse(
        voices=[VoiceEntry(name=voice.name, clips=voice.clips) for voice in library],
        known_speakers=identifier is not None,
    )
