"""Every error leaves the server as OpenAI-style JSON: `{"error": {"message", "type", "code",
"param"}}`, never a stack trace. The client's mistakes are 4xx (400 undecodable audio or JSON,
401, 413, 415, 422 invalid parameters), ours are 5xx (500 inference failures, 503 models not
loaded or out of device memory); whosaid/server/README.md has the whole table.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from whosaid.errors import (
    AudioTooLongError,
    ClientGoneError,
    InvalidInputError,
    InvalidParametersError,
    JobStoppedError,
    ModelLoadError,
    OutOfMemoryError,
    ShuttingDownError,
    TimeBudgetExceededError,
    WhosaidError,
)

logger = logging.getLogger(__name__)

#: Seconds a client should wait before retrying after running out of device memory.
OUT_OF_MEMORY_RETRY_AFTER_S = 10
#: Seconds before retrying a job refused or stopped by a shutdown (a replacement should be up).
SHUTDOWN_RETRY_AFTER_S = 5


class ErrorDetail(BaseModel):
    message: str = Field(description="what went wrong and, for the client's mistakes, what to fix")
    type: str = Field(
        description="invalid_request_error, authentication_error, rate_limit_error or server_error"
    )
    code: str = Field(description="machine-readable reason, e.g. invalid_audio, queue_full")
    param: Optional[str] = Field(default=None, description="the request field at fault, if one is")


class ErrorResponse(BaseModel):
    error: ErrorDetail


class ApiError(Exception):
    """An HTTP-level failure raised by the server's own code (not the core's)."""

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        *,
        param: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.param = param
        self.headers = dict(headers or {})


#: nginx's status for "client closed request": nobody reads it, the access log and metrics do.
CLIENT_CLOSED_REQUEST = 499


def error_type(status_code: int) -> str:
    if status_code == 401:
        return "authentication_error"
    if status_code == 429:
        return "rate_limit_error"
    return "server_error" if status_code >= 500 else "invalid_request_error"


def error_response(
    status_code: int,
    code: str,
    message: str,
    *,
    param: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> JSONResponse:
    body = ErrorResponse(
        error=ErrorDetail(message=message, type=error_type(status_code), code=code, param=param)
    )
    return JSONResponse(body.model_dump(mode="json"), status_code=status_code, headers=dict(headers or {}))


def core_error_status(error: WhosaidError) -> tuple[int, dict[str, str]]:
    """The core's exceptions as HTTP: the client's mistakes are 4xx, ours are 5xx."""
    if isinstance(error, InvalidParametersError):
        return 422, {}
    if isinstance(error, AudioTooLongError):
        return 413, {}
    if isinstance(error, InvalidInputError):  # InvalidAudioError among them
        return 400, {}
    if isinstance(error, TimeBudgetExceededError):
        return 504, {}
    if isinstance(error, ClientGoneError):
        return CLIENT_CLOSED_REQUEST, {}
    if isinstance(error, ShuttingDownError):
        return 503, {"Retry-After": str(SHUTDOWN_RETRY_AFTER_S)}
    if isinstance(error, OutOfMemoryError):
        return 503, {"Retry-After": str(OUT_OF_MEMORY_RETRY_AFTER_S)}
    if isinstance(error, ModelLoadError):
        return 503, {}
    return 500, {}


# Status codes Starlette raises itself (routing, our body limit) and the codes we report for them.
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(WhosaidError, _core_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)


async def _api_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ApiError)
    return error_response(
        error.status_code, error.code, error.message, param=error.param, headers=error.headers
    )


async def _core_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, WhosaidError)
    status_code, headers = core_error_status(error)
    if isinstance(error, JobStoppedError):
        # Stopped on purpose (budget, client gone, shutdown): the reason is the whole story.
        logger.warning("%s %s stopped: %s", request.method, request.url.path, error)
    elif status_code >= 500:
        # The client sees the core's one-line message; the cause and traceback go to the log.
        logger.error("%s %s failed: %s", request.method, request.url.path, error, exc_info=error)
    return error_response(status_code, error.code, str(error), headers=headers)


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    details = error.errors()
    first = details[0] if details else {}
    # loc is ("body" | "query" | "header", field, ...): the field is what a client can fix.
    location = [str(part) for part in first.get("loc", ())[1:]]
    messages = "; ".join(_describe(detail) for detail in details) or "invalid request"
    return error_response(422, "invalid_request", messages, param=".".join(location) or None)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    code = _HTTP_CODES.get(error.status_code, "http_error")
    return error_response(
        error.status_code, code, str(error.detail), headers=getattr(error, "headers", None)
    )


async def _unexpected_error(request: Request, error: Exception) -> JSONResponse:
    logger.error("%s %s failed unexpectedly", request.method, request.url.path, exc_info=error)
    return error_response(500, "internal_error", "internal server error; see the server log")


def _describe(detail: Mapping[str, Any]) -> str:
    field = ".".join(str(part) for part in detail.get("loc", ())[1:])
    message = str(detail.get("msg", "invalid value"))
    return f"{field}: {message}" if field else message


#: The error bodies every route can answer with, for the OpenAPI document.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in {
        400: "the body is not decodable audio (or not JSON)",
        401: "missing or wrong API key (only when API_KEY is set)",
        413: "request body over MAX_UPLOAD_MB or audio over MAX_AUDIO_DURATION_S",
        422: "invalid parameters",
        429: "every job slot and queue place is taken; retry after Retry-After seconds",
        500: "inference failed",
        503: "models loading, failed to load, out of device memory, or the server is shutting down",
        504: "the job used up its time budget (JOB_TIME_BUDGET_BASE_S + JOB_TIME_BUDGET_PER_AUDIO_S x duration)",
    }.items()
}
