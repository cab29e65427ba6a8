"""Self-hosted HTTP server: the core behind Inference-Endpoints-compatible, OpenAI-compatible and
operations routes (FastAPI + Uvicorn). Start it with `python -m whosaid serve`."""
