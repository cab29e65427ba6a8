"""Graceful shutdown in bounded time.

Uvicorn alone, on SIGTERM, stops accepting and then waits for running requests however long
they take; a container platform then kills the process mid-request after its own grace period,
and clients get no answer. Here the signal also drains the job limiter: queued requests get 503
at once, running jobs finish or are stopped at their next window batch (503) within
SHUTDOWN_GRACE_S, which Uvicorn also uses as its own limit.
"""

from __future__ import annotations

from types import FrameType
from typing import Optional

import uvicorn

from whosaid.server.jobs import JobLimiter


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, limiter: JobLimiter, grace_s: float) -> None:
        super().__init__(config)
        self.limiter = limiter
        self.grace_s = grace_s

    def handle_exit(self, sig: int, frame: Optional[FrameType]) -> None:
        self.limiter.request_drain(self.grace_s)
        super().handle_exit(sig, frame)


def serve(app: object, host: str, port: int, log_level: str, grace_s: float) -> None:
    limiter = app.state.service.limiter  # type: ignore[attr-defined]
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=grace_s,  # type: ignore[arg-type] - any number of seconds works
    )
    DrainingServer(config, limiter, grace_s).run()
