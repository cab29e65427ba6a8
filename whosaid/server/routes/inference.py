"""POST / : the Hugging Face Inference Endpoints contract, as the endpoint handler serves it.

Two request shapes: JSON `{"inputs": <base64 audio>, "parameters": {...}}` (the blog's
`requests.post(url, json=...)`, and huggingface_hub's InferenceClient when given `extra_body`),
or the audio file itself as the body (InferenceClient without parameters sends raw bytes and no
Content-Type) with parameters in the query string.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from whosaid.server.auth import require_api_key
from whosaid.server.dependencies import get_service
from whosaid.server.errors import ERROR_RESPONSES, ApiError, ErrorResponse
from whosaid.server.json_body import parse_json_body
from whosaid.server.schemas import InferenceRequest, TranscriptResponse
from whosaid.server.service import TranscriptionService

router = APIRouter(tags=["Inference Endpoints"])

# Content types of an audio file sent as the body. Containers such as webm and mp4 are often
# labelled video/* by clients even when they hold only audio.
RAW_AUDIO_TYPES = ("audio/", "video/", "application/octet-stream")

_BINARY = {"schema": {"type": "string", "format": "binary"}}
_REQUEST_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/InferenceRequest"}},
        "audio/*": _BINARY,
        "application/octet-stream": _BINARY,
    },
}


@router.post(
    "/",
    response_model=TranscriptResponse,
    responses={**ERROR_RESPONSES, 415: {"model": ErrorResponse, "description": "neither JSON nor audio"}},
    dependencies=[Depends(require_api_key)],
    openapi_extra={"requestBody": _REQUEST_BODY},
    summary="Transcribe (and diarize) audio: the Inference Endpoints contract",
)
async def infer(request: Request, service: TranscriptionService = Depends(get_service)) -> JSONResponse:
    inputs, parameters = await _read_request(request)
    transcript = await service.transcribe(inputs, parameters, is_disconnected=request.is_disconnected)
    # The handler's answer: the JSON of TranscriptResponse, the response model, as the core fills it.
    return JSONResponse(transcript.to_dict())


async def _read_request(request: Request) -> tuple[Any, dict[str, Any]]:
    """(inputs, parameters) from either request shape. Query parameters apply to both; in a JSON
    body, `parameters` wins over a query parameter of the same name."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    query: dict[str, Any] = dict(request.query_params)
    if _is_json(media_type) or (not media_type and body.lstrip()[:1] == b"{"):
        payload = parse_json_body(body)
        try:
            envelope = InferenceRequest.model_validate(payload)
        except ValidationError as error:
            # Located in the body, as FastAPI's own validation errors are.
            details = [{**detail, "loc": ("body", *detail["loc"])} for detail in error.errors(include_url=False)]
            raise RequestValidationError(details) from error
        parameters = envelope.parameters
        if isinstance(parameters, dict):
            return envelope.inputs, {**query, **parameters}
        # Not an object: the core rejects it with its own message.
        return envelope.inputs, parameters if parameters is not None else query
    if not media_type or media_type.startswith(RAW_AUDIO_TYPES):
        return body, query
    raise ApiError(
        415,
        "unsupported_media_type",
        f"cannot read a {media_type} body: send JSON {{\"inputs\": <base64 audio>, \"parameters\": "
        "{...}} or the audio file itself (Content-Type audio/* or application/octet-stream)",
    )


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")
