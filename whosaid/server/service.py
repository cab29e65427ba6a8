"""The one code path from an HTTP request into the Engine, shared by every inference route."""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Optional, Protocol, Sequence

from whosaid.audio.loading import AudioInput
from whosaid.config import InferenceConfig
from whosaid.engine import Engine
from whosaid.results import Transcript
from whosaid.runtime.cancellation import StopSignal, TimeBudget
from whosaid.runtime.memory import RELEASE_AFTER_AUDIO_S, memory_released_on_failure, release_memory
from whosaid.server.jobs import JobLimiter
from whosaid.server.metrics import Metrics
from whosaid.server.state import EngineState


class JobListener(Protocol):
    """Progress of one job, called from its worker thread (streamed responses)."""

    def accepted(self, duration_s: float) -> None:
        """The audio decoded and is within the limits: the job will not fail on its input."""

    def text(self, delta: str) -> None:
        """More of the transcript's text, in order."""


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
        place in the queue and the expensive ones (decoding, inference) in a worker thread.
        `listener` hears, from that thread, when the audio is accepted and each piece of text."""
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
        listener: Optional[JobListener] = None,
    ) -> Transcript:
        started = time.perf_counter()
        with memory_released_on_failure():
            transcript = self._decode_and_transcribe(engine, inputs, config, warnings, stop, listener)
        self.metrics.observe_transcript(transcript, time.perf_counter() - started)
        return transcript

    # A function of its own: when it raises, its frame (and the audio it holds) is finished, so
    # memory_released_on_failure in _job can drop it.
    def _decode_and_transcribe(
        self,
        engine: Engine,
        inputs: AudioInput,
        config: InferenceConfig,
        warnings: Sequence[str],
        stop: StopSignal,
        listener: Optional[JobListener],
    ) -> Transcript:
        # Audio over MAX_AUDIO_DURATION_S is refused here (AudioTooLongError, 413), before the
        # job's time budget starts or a stream sends its first byte.
        audio = engine.load_audio(inputs, config)
        # So are references that are not usable (a 4xx naming the speaker), before a stream starts.
        voices = engine.known_voices(config)
        stop.start_budget(self.time_budget, audio.duration_s)
        if listener is not None:
            listener.accepted(audio.duration_s)
        transcript = engine.transcribe(
            audio,
            config,
            warnings=warnings,
            should_stop=stop,
            on_text=listener.text if listener is not None else None,
            voices=voices,
        )
        if audio.duration_s >= RELEASE_AFTER_AUDIO_S:
            del audio
            release_memory()
        return transcript
