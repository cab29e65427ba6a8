"""GET /v1/realtime?intent=transcription: live transcription with speakers over a WebSocket, in
OpenAI's Realtime protocol (whosaid.server.realtime), so the openai SDK's
`client.realtime.connect(extra_query={"intent": "transcription"})` works with `base_url` pointing
here.

Refused before the socket opens, with the usual JSON error as the handshake's answer: a missing
or wrong key (401; the ApiKeyMiddleware checks it first, in the header, the
`openai-insecure-api-key.<key>` subprotocol or the `api_key` query parameter), another intent
(400), models not loaded (503), REALTIME_MAX_SESSIONS sessions already open (429).
"""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, WebSocket

from whosaid.server.auth import KEY_SUBPROTOCOL_PREFIX, refuse, require_websocket_key
from whosaid.server.errors import ApiError
from whosaid.server.realtime import RealtimeSession
from whosaid.server.service import TranscriptionService

router = APIRouter(tags=["Live transcription"])
#: The subprotocol OpenAI's browser clients offer beside the key.
REALTIME_SUBPROTOCOL = "realtime"


class SessionCount:
    """The live sessions open now, against REALTIME_MAX_SESSIONS (on the event loop only)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0


@router.websocket("/v1/realtime")
async def realtime(websocket: WebSocket, intent: Optional[str] = None) -> None:
    app = websocket.app
    settings = app.state.settings
    service: TranscriptionService = app.state.service
    sessions: SessionCount = app.state.realtime_sessions
    error = require_websocket_key(websocket) or _refusal(intent, service, sessions)
    if error is not None:
        await refuse(websocket.scope, websocket.receive, websocket.send, error)
        return
    sessions.open += 1
    try:
        session = RealtimeSession(
            websocket,
            service,
            max_session_s=settings.realtime_max_session_s,
            idle_timeout_s=settings.realtime_idle_timeout_s,
        )
        await session.run(_subprotocol(websocket.scope.get("subprotocols", ())))
    finally:
        sessions.open -= 1


def _refusal(intent: Optional[str], service: TranscriptionService, sessions: SessionCount) -> Optional[ApiError]:
    if intent != "transcription":
        return ApiError(
            400,
            "invalid_intent",
            f"this server runs transcription sessions only, and the URL asks for intent={intent!r}: "
            "connect to /v1/realtime?intent=transcription",
            param="intent",
        )
    try:
        service.engine()
    except ApiError as error:
        return error
    if sessions.open >= sessions.limit:
        return ApiError(
            429,
            "too_many_sessions",
            f"the server already runs {sessions.open} live sessions, its limit (REALTIME_MAX_SESSIONS); retry later",
            headers={"Retry-After": "10"},
        )
    return None


def _subprotocol(offered: tuple[str, ...] | list[str]) -> Optional[str]:
    """The subprotocol to accept: browsers drop a socket that offered some and got none back."""
    if REALTIME_SUBPROTOCOL in offered:
        return REALTIME_SUBPROTOCOL
    others = [protocol for protocol in offered if not protocol.startswith(KEY_SUBPROTOCOL_PREFIX)]
    return others[0] if others else None
