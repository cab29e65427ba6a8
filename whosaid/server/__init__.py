"""Self-hosted HTTP server: the core behind Inference-Endpoints-compatible, OpenAI-compatible and
operations routes (FastAPI + Uvicorn). Start it with `python -m whosaid serve`."""

from whosaid.server.app import create_app
from whosaid.server.settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]
