"""The request-size limit (MAX_UPLOAD_MB), enforced while the body streams in.

A declared Content-Length over the limit is refused before a byte of the body is read; a body
without one (chunked) is counted as it arrives and refused as soon as it crosses the limit, so
no request can make the server buffer more than the limit. On a WebSocket the same limit
bounds each message: a larger one closes the socket with 1009 (message too big).
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from whosaid.server.errors import error_response


class RequestTooLarge(HTTPException):
    """An HTTPException, because FastAPI re-raises those from body parsing (other exceptions
    become a generic 400) and the error handlers then answer it as JSON."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(status_code=413, detail=_message(limit_bytes))


class BodySizeLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self.app(scope, self._websocket_receive(receive, send), send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            response = error_response(413, "payload_too_large", _message(self.max_body_bytes))
            await response(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise RequestTooLarge(self.max_body_bytes)
            return message

        await self.app(scope, counting_receive, send)


    def _websocket_receive(self, receive: Receive, send: Send) -> Receive:
        limit_bytes = self.max_body_bytes

        async def limited_receive() -> Message:
            message = await receive()
            if message["type"] == "websocket.receive":
                size = len(message.get("bytes") or b"") + len((message.get("text") or "").encode())
                if size > limit_bytes:
                    reason = f"a message is larger than the server's limit of {limit_bytes / 1024 / 1024:g} MiB"
                    await send({"type": "websocket.close", "code": 1009, "reason": reason})
                    return {"type": "websocket.disconnect", "code": 1009, "reason": reason}
            return message

        return limited_receive


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # h11 rejects malformed lengths before we get here
    return None


def _message(limit_bytes: int) -> str:
    return (
        f"the request body is larger than the server's limit of {limit_bytes / 1024 / 1024:g} MiB "
        "(MAX_UPLOAD_MB); send a shorter or more compressed recording"
    )
