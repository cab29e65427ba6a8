"""Bounded jobs: a time budget per request and a stop signal the ASR loop checks between window
batches, so that no request can hold the models (and everyone queued behind it) for hours.

The edges own a `StopSignal` per job: they set its deadline from `TimeBudget` once the audio's
duration is known, and cancel it when the client leaves or the service shuts down. The core
only calls `check()`, which raises a `JobStoppedError` subclass naming the reason.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Optional

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from whosaid.errors import JobStoppedError, TimeBudgetExceededError

#: Defaults of the budget: generous enough for large models on a CPU, tight enough that a runaway
#: job ends within minutes.
DEFAULT_BUDGET_BASE_S = 60.0
DEFAULT_BUDGET_PER_AUDIO_S = 2.0


class TimeBudget(BaseSettings):
    """How long one job may run: `JOB_TIME_BUDGET_BASE_S + JOB_TIME_BUDGET_PER_AUDIO_S x audio
    seconds` (decoding and diarization included). Read from the environment by every edge."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True, env_prefix="JOB_TIME_BUDGET_")

    base_s: float = Field(default=DEFAULT_BUDGET_BASE_S, gt=0, description="seconds any job may take")
    per_audio_s: float = Field(
        default=DEFAULT_BUDGET_PER_AUDIO_S, ge=0, description="more seconds per second of audio"
    )

    def seconds_for(self, audio_duration_s: float) -> float:
        return self.base_s + self.per_audio_s * audio_duration_s


@dataclass
class _Deadline:
    at_monotonic_s: float
    error: JobStoppedError


class StopSignal:
    """Thread-safe: edges cancel or set deadlines from the event loop, the job thread checks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled: Optional[JobStoppedError] = None
        self._deadlines: list[_Deadline] = []

    def cancel(self, error: JobStoppedError) -> None:
        """Stop at the next check; the first reason given wins."""
        with self._lock:
            if self._cancelled is None:
                self._cancelled = error

    def stop_after(self, seconds: float, error: JobStoppedError, *, since_monotonic_s: Optional[float] = None) -> None:
        """Stop at the first check `seconds` from now, or from `since_monotonic_s` (a
        `time.monotonic()` reading); several deadlines: the earliest wins."""
        start_s = time.monotonic() if since_monotonic_s is None else since_monotonic_s
        with self._lock:
            self._deadlines.append(_Deadline(start_s + seconds, error))

    def start_budget(
        self, budget: TimeBudget, audio_duration_s: float, *, started_monotonic_s: Optional[float] = None
    ) -> None:
        """The job's budget for audio of `audio_duration_s`, counted from now or from
        `started_monotonic_s` (when the job began, before its audio was decoded)."""
        seconds = budget.seconds_for(audio_duration_s)
        self.stop_after(
            seconds,
            TimeBudgetExceededError(
                f"the job ran out of its time budget of {seconds:.0f} s for {audio_duration_s:.1f} s "
                "of audio (JOB_TIME_BUDGET_BASE_S + JOB_TIME_BUDGET_PER_AUDIO_S x duration) and was "
                "stopped; retry with the default parameters or a shorter recording"
            ),
            since_monotonic_s=started_monotonic_s,
        )

    @property
    def cancelled(self) -> bool:
        return self.reason() is not None

    def reason(self) -> Optional[JobStoppedError]:
        with self._lock:
            if self._cancelled is not None:
                return self._cancelled
            now = time.monotonic()
            expired = [deadline for deadline in self._deadlines if deadline.at_monotonic_s <= now]
            if expired:
                return min(expired, key=lambda deadline: deadline.at_monotonic_s).error
            return None

    def check(self) -> None:
        """Raise the reason to stop, if there is one."""
        reason = self.reason()
        if reason is not None:
            raise reason
