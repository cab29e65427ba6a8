"""Optional bearer-token authentication (API_KEY).

/health and /ready stay open: load balancers and orchestrators probe them without credentials,
and they reveal nothing but liveness. So does the web page (/ui and its static files): a browser
cannot send a bearer token when it opens a page; the page holds no data and asks for the key,
which every call it makes then carries. Everything else needs the key, /metrics (traffic volumes;
Prometheus sends it with `authorization: {credentials: <API_KEY>}`) and the API description
(/docs, /redoc, /openapi.json) included.

The check is an ASGI middleware, so it runs on the headers before a byte of the body is read:
a keyless client cannot make the server parse a form of a thousand fields or buffer an upload.
The route dependency below repeats it, which documents the scheme in the OpenAPI description.
"""

from __future__ import annotations

import hmac
from typing import Optional

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from whosaid.server.errors import ApiError, error_response

#: Routes answered without the key.
OPEN_PATHS = frozenset({"/health", "/ready", "/ui"})
#: Path prefixes answered without the key: the web page's static files.
OPEN_PREFIXES = ("/ui/",)

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


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, api_key: Optional[str]) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # OPTIONS: CORS preflights carry no credentials by design.
        if (
            self.api_key is None
            or scope["type"] != "http"
            or scope["path"] in OPEN_PATHS
            or scope["path"].startswith(OPEN_PREFIXES)
            or scope["method"] == "OPTIONS"
        ):
            await self.app(scope, receive, send)
            return
        authorization = next(
            (value.decode("latin-1") for name, value in scope["headers"] if name == b"authorization"), None
        )
        if key_matches(authorization, self.api_key):
            await self.app(scope, receive, send)
            return
        error = unauthorized(missing=authorization is None)
        response = error_response(error.status_code, error.code, error.message, headers=error.headers)
        await response(scope, receive, send)


async def require_api_key(
    request: Request, credentials: Optional[HTTPAuthorizationCredentials] = Security(_bearer)
) -> None:
    api_key = request.app.state.settings.api_key
    if api_key is None:
        return
    if not key_matches(request.headers.get("authorization"), api_key.get_secret_value()):
        raise unauthorized(missing=credentials is None)
