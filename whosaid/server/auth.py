"""Optional bearer-token authentication (API_KEY).

/health and /ready stay open: load balancers and orchestrators probe them without credentials,
and they reveal nothing but liveness. /metrics needs the key like the API does, because it shows
traffic volumes; Prometheus sends it with `authorization: {credentials: <API_KEY>}`.
"""

from __future__ import annotations

import hmac
from typing import Optional

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from whosaid.server.errors import ApiError

# auto_error=False: a missing header must give our JSON 401, not FastAPI's own 403 body.
_bearer = HTTPBearer(auto_error=False, description="the server's API_KEY, when one is set")


async def require_api_key(
    request: Request, credentials: Optional[HTTPAuthorizationCredentials] = Security(_bearer)
) -> None:
    api_key = request.app.state.settings.api_key
    if api_key is None:
        return
    given = credentials.credentials if credentials is not None else ""
    # Constant-time comparison: response timing must not reveal how much of a guess was right.
    if not hmac.compare_digest(given.encode(), api_key.get_secret_value().encode()):
        raise ApiError(
            401,
            "invalid_api_key",
            "missing API key" if credentials is None else "invalid API key",
            headers={"WWW-Authenticate": "Bearer"},
        )
