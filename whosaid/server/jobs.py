"""Inference off the event loop, a bounded number at a time, with a bounded wait queue.

A job runs in a worker thread so that the event loop keeps answering /health and /metrics while
the models work. At most `max_concurrent` jobs run; at most `max_queue` more wait; any request
beyond that is refused at once with 429 rather than piling up until clients time out.

Each job gets a StopSignal. While it waits or runs, a watcher on the event loop asks every
`WATCH_INTERVAL_S` whether its client is still there: a client that left has its queued job
skipped and its running job stopped at the next window batch, which frees the slot.

Shutdown (`request_drain`): new requests and queued jobs get 503 at once; running jobs may
finish until shortly before the grace period ends, then stop at their next window batch and
answer 503 too, so that every client has an answer before the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from typing import Awaitable, Callable, Optional, TypeVar

import anyio
import anyio.to_thread

from whosaid.errors import ClientGoneError, ShuttingDownError
from whosaid.runtime.cancellation import StopSignal
from whosaid.server.errors import ApiError

logger = logging.getLogger(__name__)
T = TypeVar("T")
#: How often a waiting or running job's client is checked for a disconnect.
WATCH_INTERVAL_S = 0.25
#: Job durations remembered for Retry-After: the slowest of them prices each job ahead.
_RECENT_JOBS = 20
#: Added to Retry-After per job ahead: between two jobs the answer is sent and the next job takes
#: its slot, time no job's own duration counts, so a client told to come back must not come early.
_HANDOFF_S = 0.25
#: Part of the shutdown grace period kept for stopped jobs to reach their next window batch and
#: answer before the server stops waiting for them: a batch of windows must fit in it.
_ANSWER_MARGIN_FRACTION = 0.5


class JobLimiter:
    def __init__(self, max_concurrent: int, max_queue: int) -> None:
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue
        self._admitted = 0  # waiting + running; changed only on the event loop, so no lock
        self._running = 0
        self._recent_job_s: deque[float] = deque(maxlen=_RECENT_JOBS)
        self._started_at: dict[int, float] = {}  # id(stop) -> monotonic start of each running job
        self._stops: dict[int, StopSignal] = {}  # every admitted job's signal, waiting or running
        self._draining = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        # Created on first use: anyio primitives belong to the event loop that runs the app.
        self._slots: Optional[anyio.Semaphore] = None
        self._threads: Optional[anyio.CapacityLimiter] = None

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._admitted - self._running

    @property
    def draining(self) -> bool:
        return self._draining

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop the app runs on, for `request_drain` from a signal handler."""
        self._loop = loop

    def request_drain(self, grace_s: float) -> None:
        """Begin a shutdown that answers every admitted job within `grace_s`. Safe to call from a
        signal handler or another thread."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.begin_drain, grace_s)

    def begin_drain(self, grace_s: float) -> None:
        """On the event loop: refuse new jobs, stop queued ones now and running ones before
        `grace_s` is over."""
        self._draining = True
        logger.warning(
            "shutting down: %d jobs running and %d waiting are answered within %.1f s",
            self._running,
            self.waiting,
            grace_s,
        )
        running_budget_s = grace_s * (1 - _ANSWER_MARGIN_FRACTION)
        for key, stop in list(self._stops.items()):
            if key in self._started_at:
                stop.stop_after(running_budget_s, _shutdown_error())
            else:
                stop.cancel(_shutdown_error())

    async def run(
        self,
        job: Callable[[StopSignal], T],
        *,
        is_disconnected: Optional[Callable[[], Awaitable[bool]]] = None,
    ) -> T:
        """Run `job(stop)` in a worker thread once a slot is free. Raises ApiError(429) when the
        queue is full, ClientGoneError when the client left (before its turn, or during its job
        if the job checks `stop`)."""
        if self._draining:
            raise _shutdown_error()
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
        stop = StopSignal()
        self._admitted += 1
        self._stops[id(stop)] = stop
        outcome: list[T] = []
        failure: list[BaseException] = []
        try:
            async with anyio.create_task_group() as watchers:
                waiting = anyio.CancelScope()
                watchers.start_soon(self._watch, stop, is_disconnected, waiting)
                try:
                    outcome.append(await self._run_in_slot(job, stop, waiting, is_disconnected))
                except Exception as error:  # noqa: BLE001 - re-raised below, outside the task group
                    # Raised out of a task group it would arrive wrapped in an ExceptionGroup.
                    failure.append(error)
                finally:
                    watchers.cancel_scope.cancel()
        finally:
            self._admitted -= 1
            del self._stops[id(stop)]
        if failure:
            raise failure[0]
        return outcome[0]

    async def _run_in_slot(
        self,
        job: Callable[[StopSignal], T],
        stop: StopSignal,
        waiting: anyio.CancelScope,
        is_disconnected: Optional[Callable[[], Awaitable[bool]]],
    ) -> T:
        assert self._slots is not None
        acquired = False
        with waiting:
            await self._slots.acquire()
            acquired = True
        if not acquired:  # the watcher gave up on this request before a slot came
            stop.check()
            raise AssertionError("a waiting job was dropped without a reason")
        try:
            # Asked again now, not at the watcher's next tick: a job nobody waits for never starts.
            if is_disconnected is not None and await is_disconnected():
                stop.cancel(ClientGoneError("the client closed the connection"))
            stop.check()
            self._running += 1
            started = time.monotonic()
            self._started_at[id(stop)] = started
            try:
                # Not abandoned on cancellation: the slot is released only when the thread
                # has really finished, so the models are never used by more jobs than allowed.
                return await anyio.to_thread.run_sync(job, stop, limiter=self._threads)
            finally:
                self._running -= 1
                del self._started_at[id(stop)]
                self._recent_job_s.append(time.monotonic() - started)
        finally:
            self._slots.release()

    async def _watch(
        self,
        stop: StopSignal,
        is_disconnected: Optional[Callable[[], Awaitable[bool]]],
        waiting: anyio.CancelScope,
    ) -> None:
        while True:
            await anyio.sleep(WATCH_INTERVAL_S)
            if is_disconnected is not None and await is_disconnected():
                stop.cancel(ClientGoneError("the client closed the connection"))
            if stop.cancelled:
                waiting.cancel()  # no effect once the job holds its slot
                return

    def retry_after_s(self) -> int:
        """Seconds until the work admitted now is likely done: what the running jobs have left
        plus the waiting ones, each priced at the slowest recent job, divided among the slots."""
        job_s = max(self._recent_job_s, default=1.0)
        now = time.monotonic()
        remaining_s = sum(max(job_s - (now - started), 0.0) for started in self._started_at.values())
        ahead_s = remaining_s + self.waiting * job_s + (len(self._started_at) + self.waiting) * _HANDOFF_S
        return max(1, math.ceil(ahead_s / self.max_concurrent))


def _shutdown_error() -> ShuttingDownError:
    return ShuttingDownError("the server is shutting down and could not finish this job; retry")
