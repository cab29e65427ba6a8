"""Optional bearer-token authentication (API_KEY).

/health and /ready stay open: load balancers and orchestrators probe them without credentials,
and they reveal nothing but liveness. So does the web page (/ui and its static files): a browser
cannot send a bearer token when it opens a page; the page holds no data and asks for the key,
which every call it makes then carries. Everything else needs the key, /metrics (traffic volumes;
Prometheus sends it with `authorization: {credentials: <API_KEY>}`) and the API description
(/docs, /redoc, /openapi.json) included.

The check is an ASGI middleware, so it runs on the headers before a byte of the body is read:
a keyless client cannot make the server parse a form of a thousand fields or buffer an upload.
It works on the scope type, HTTP and WebSocket alike, so a WebSocket route is never open by
default: a WebSocket handshake without the key is refused with the same 401 body (the denial
response extension; servers without it close the socket with 1008 before accepting it).
Browsers cannot set headers on a WebSocket, so a WebSocket may also carry the key as the
subprotocol `openai-insecure-api-key.<key>` (OpenAI's browser form) or as the query parameter
`api_key`. The route dependency below repeats the check, which documents the scheme in the
OpenAPI description.
"""

from __future__ import annotations

import hmac
from typing import Optional
from urllib.parse import parse_qsl

from fastapi import Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from whosaid.server.errors import ApiError, error_response

#: Routes answered without the key.
OPEN_PATHS = frozenset({"/health", "/ready", "/ui"})
#: Path prefixes answered without the key: the web page's static files.
OPEN_PREFIXES = ("/ui/",)

#: A WebSocket subprotocol that carries the key (browsers cannot send an Authorization header).
KEY_SUBPROTOCOL_PREFIX = "openai-insecure-api-key."
#: The query parameter that carries the key on a WebSocket.
KEY_QUERY_PARAMETER = "api_key"

# auto_error=False: a missing header must give our JSON 401, not FastAPI's own 403 body.
_bearer = HTTPBearer(auto_error=False, description="the server's API_KEY, when one is set")


def key_matches(authorization: Optional[str], api_key: str) -> bool:
    scheme, _, given = (authorization or "").partition(" ")
    # Constant-time comparison: response timing must not reveal how much of a guess was right.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), api_key.encode())


def unauthorized(missing: bool) -> ApiError:
    return ApiError(
        401,
        "invalid_api_key",
        "missing API key" if missing else "invalid API key",
        headers={"WWW-Authenticate": "Bearer"},
    )


def presented_keys(scope: Scope) -> list[str]:
    """Every form of credentials the connection carries, as `Authorization` header values:
    the header itself, and on a WebSocket the key subprotocol and the `api_key` query parameter."""
    presented = [value.decode("latin-1") for name, value in scope["headers"] if name == b"authorization"]
    if scope["type"] == "websocket":
        presented += [
            f"Bearer {protocol[len(KEY_SUBPROTOCOL_PREFIX):]}"
            for protocol in scope.get("subprotocols", ())
            if protocol.startswith(KEY_SUBPROTOCOL_PREFIX)
        ]
        query = scope.get("query_string", b"").decode("latin-1")
        presented += [f"Bearer {value}" for name, value in parse_qsl(query) if name == KEY_QUERY_PARAMETER]
    return presented


def check_key(scope: Scope, api_key: Optional[str]) -> Optional[ApiError]:
    """None when the connection may go on, else the 401 to answer."""
    if api_key is None:
        return None
    presented = presented_keys(scope)
    if any(key_matches(value, api_key) for value in presented):
        return None
    return unauthorized(missing=not presented)


async def refuse(scope: Scope, receive: Receive, send: Send, error: ApiError) -> None:
    """Answer `error` before the application runs: the JSON error on HTTP; on a WebSocket the
    same response as the handshake's answer where the server supports the denial response
    extension, else a close with 1008 (policy violation) before the socket is accepted."""
    if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008, "reason": error.message})
        return
    response = error_response(error.status_code, error.code, error.message, param=error.param, headers=error.headers)
    await response(scope, receive, send)


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, api_key: Optional[str]) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # OPTIONS: CORS preflights carry no credentials by design.
        if (
            self.api_key is None
            or scope["type"] not in ("http", "websocket")
            or scope["path"] in OPEN_PATHS
            or scope["path"].startswith(OPEN_PREFIXES)
            or scope.get("method") == "OPTIONS"
        ):
            await self.app(scope, receive, send)
            return
        error = check_key(scope, self.api_key)
        if error is None:
            await self.app(scope, receive, send)
            return
        await refuse(scope, receive, send, error)


async def require_api_key(
    connection: HTTPConnection, credentials: Optional[HTTPAuthorizationCredentials] = Security(_bearer)
) -> None:
    api_key = connection.app.state.settings.api_key
    error = check_key(connection.scope, api_key.get_secret_value() if api_key is not None else None)
    if error is not None:
        raise error


def require_websocket_key(connection: HTTPConnection) -> Optional[ApiError]:
    """The check for a WebSocket route (FastAPI's HTTPBearer reads HTTP requests only): None when
    the connection may go on, else the 401 to refuse it with."""
    api_key = connection.app.state.settings.api_key
    return check_key(connection.scope, api_key.get_secret_value() if api_key is not None else None)
