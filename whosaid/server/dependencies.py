"""FastAPI dependencies: what routes get from the app, overridable in tests."""

from __future__ import annotations

from fastapi import Request

from whosaid.server.service import TranscriptionService


def get_service(request: Request) -> TranscriptionService:
    return request.app.state.service
