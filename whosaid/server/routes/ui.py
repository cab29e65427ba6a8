"""GET /ui: the web page (whosaid.ui) that sends a file to /v1/audio/transcriptions and shows
who spoke when. The page and its files are static and hold nothing of the server's: they are
served without the API key, and the page asks for the key before it calls the API, which needs it."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from whosaid.server.errors import ApiError
from whosaid.ui.view import ASSETS, asset, page

router = APIRouter(tags=["Web page"], include_in_schema=False)


@router.get("/ui")
async def ui_page(request: Request) -> HTMLResponse:
    api_key_required = request.app.state.settings.api_key is not None
    return HTMLResponse(page(api_key_required=api_key_required), headers={"Cache-Control": "no-cache"})


@router.get("/ui/{name}")
async def ui_asset(name: str) -> Response:
    if name not in ASSETS:
        raise ApiError(404, "not_found", f"no such file: /ui/{name}")
    return Response(asset(name), media_type=ASSETS[name], headers={"Cache-Control": "no-cache"})
