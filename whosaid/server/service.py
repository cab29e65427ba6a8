"""The one code path from an HTTP request into the Engine, shared by every inference route."""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Optional, Sequence

from whosaid.audio.loading import AudioInput
from whosaid.config import InferenceConfig
from whosaid.engine import Engine, JobListener
from whosaid.results import Transcript
from whosaid.runtime.cancellation import StopSignal, TimeBudget
from whosaid.server.jobs import JobLimiter
from whosaid.server.metrics import Metrics
from whosaid.server.state import EngineState


class TranscriptionService:
    def __init__(
        self,
        state: EngineState,
        limiter: JobLimiter,
        metrics: Metrics,
        time_budget: TimeBudget,
    ) -> None:
        self.state = state
        self.limiter = limiter
        self.metrics = metrics
        self.time_budget = time_budget

    def engine(self) -> Engine:
        return self.state.require_engine()

    async def transcribe(
        self,
        inputs: AudioInput,
        parameters: Optional[dict[str, Any]],
        *,
        extra_warnings: Sequence[str] = (),
        is_disconnected: Optional[Callable[[], Awaitable[bool]]] = None,
        listener: Optional[JobListener] = None,
    ) -> Transcript:
        """What Engine.run does, split so that cheap checks happen before a request takes a
        place in the queue and the expensive ones (Engine.run_job: decoding, inference) in a
        worker thread. `listener` hears, from that thread, when the audio is accepted and each
        piece of text."""
        engine = self.engine()
        config, warnings = engine.parse_parameters(parameters)
        all_warnings = [*warnings, *extra_warnings]
        return await self.limiter.run(
            lambda stop: self._job(engine, inputs, config, all_warnings, stop, listener),
            is_disconnected=is_disconnected,
        )

    def _job(
        self,
        engine: Engine,
        inputs: AudioInput,
        config: InferenceConfig,
        warnings: Sequence[str],
        stop: StopSignal,
        listener: Optional[JobListener],
    ) -> Transcript:
        started = time.perf_counter()
        transcript = engine.run_job(
            inputs, config, warnings=warnings, stop=stop, budget=self.time_budget, listener=listener
        )
        self.metrics.observe_transcript(transcript, time.perf_counter() - started)
        return transcript
