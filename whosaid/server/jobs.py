"""Inference off the event loop, a bounded number at a time, with a bounded wait queue.

A job runs in a worker thread so that the event loop keeps answering /health and /metrics while
the models work. At most `max_concurrent` jobs run; at most `max_queue` more wait; any request
beyond that is refused at once with 429 rather than piling up until clients time out.
"""

from __future__ import annotations

import math
import time
from typing import Awaitable, Callable, Optional, TypeVar

import anyio
import anyio.to_thread

from whosaid.server.errors import ApiError, ClientDisconnected

T = TypeVar("T")
#: Weight of the newest job in the running average of job durations behind Retry-After.
_DURATION_SMOOTHING = 0.2


class JobLimiter:
    def __init__(self, max_concurrent: int, max_queue: int) -> None:
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue
        self._admitted = 0  # waiting + running; changed only on the event loop, so no lock
        self._running = 0
        self._average_job_s = 1.0
        # Created on first use: anyio primitives belong to the event loop that runs the app.
        self._slots: Optional[anyio.Semaphore] = None
        self._threads: Optional[anyio.CapacityLimiter] = None

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._admitted - self._running

    async def run(
        self,
        job: Callable[[], T],
        *,
        is_disconnected: Optional[Callable[[], Awaitable[bool]]] = None,
    ) -> T:
        """Run `job` in a worker thread once a slot is free. Raises ApiError(429) when the queue
        is full, ClientDisconnected when the client left before its turn came."""
        if self._admitted >= self.max_concurrent + self.max_queue:
            raise ApiError(
                429,
                "queue_full",
                f"the server is busy: {self._running} jobs running and {self.waiting} waiting; "
                "retry later",
                headers={"Retry-After": str(self.retry_after_s())},
            )
        if self._slots is None or self._threads is None:
            self._slots = anyio.Semaphore(self.max_concurrent)
            # Our own thread tokens, so that jobs never starve the default pool (which FastAPI
            # uses for file uploads and sync dependencies), nor it them.
            self._threads = anyio.CapacityLimiter(self.max_concurrent)
        self._admitted += 1
        try:
            async with self._slots:
                if is_disconnected is not None and await is_disconnected():
                    raise ClientDisconnected()
                self._running += 1
                started = time.perf_counter()
                try:
                    # Not abandoned on cancellation: the slot is released only when the thread
                    # has really finished, so the models are never used by more jobs than allowed.
                    return await anyio.to_thread.run_sync(job, limiter=self._threads)
                finally:
                    self._running -= 1
                    self._record(time.perf_counter() - started)
        finally:
            self._admitted -= 1

    def retry_after_s(self) -> int:
        """Seconds until a place is likely to free up: the work ahead divided among the slots."""
        return max(1, math.ceil(self._average_job_s * self._admitted / self.max_concurrent))

    def _record(self, duration_s: float) -> None:
        self._average_job_s += _DURATION_SMOOTHING * (duration_s - self._average_job_s)
