"""Settings of the HTTP server, read from environment variables (API_KEY, MAX_UPLOAD_MB, ...).

Which models to load is `whosaid.config.ModelSettings`' business (ASR_MODEL, ...), and so is
the longest audio (MAX_AUDIO_DURATION_S), which every edge enforces alike; these only govern the
HTTP edge: who may call it, how large a body it accepts and how much work it takes on.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from whosaid.runtime.cancellation import DEFAULT_BUDGET_BASE_S, DEFAULT_BUDGET_PER_AUDIO_S, TimeBudget

BYTES_PER_MB = 1024 * 1024


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    api_key: Optional[SecretStr] = Field(
        default=None,
        description="When set, every route except /health and /ready needs "
        "`Authorization: Bearer <API_KEY>`. Unset: no authentication.",
    )
    max_upload_mb: float = Field(
        default=25.0,
        gt=0,
        description="Largest request body in MiB (multipart or base64 overhead included); larger "
        "requests get 413. 25 MiB is OpenAI's own limit for audio uploads.",
    )
    max_concurrent_jobs: int = Field(
        default=1,
        ge=1,
        description="Inference jobs run at once. The loaded models are shared by all jobs and the "
        "core does not promise they are safe to call in parallel: keep 1 unless you have tested more.",
    )
    max_queue: int = Field(
        default=8,
        ge=0,
        description="Requests that may wait for a job slot; beyond that they get 429 with Retry-After.",
    )
    job_time_budget_base_s: float = Field(
        default=DEFAULT_BUDGET_BASE_S,
        gt=0,
        description="Seconds any job may run (decoding, recognition, diarization) before it is "
        "stopped with 504; the budget grows with the audio by JOB_TIME_BUDGET_PER_AUDIO_S.",
    )
    job_time_budget_per_audio_s: float = Field(
        default=DEFAULT_BUDGET_PER_AUDIO_S,
        ge=0,
        description="Seconds of budget added per second of audio.",
    )
    shutdown_grace_s: float = Field(
        default=8.0,
        gt=0,
        description="On SIGTERM: seconds to answer every admitted request before exiting. Queued "
        "requests get 503 at once; running jobs finish or are stopped (503) before the end. Keep it "
        "below the platform's own grace period (Docker 10 s, Kubernetes 30 s by default).",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins allowed to call the API from a browser, comma-separated ('*' for any). "
        "Empty: CORS is off and browsers block cross-origin calls.",
    )
    realtime_max_sessions: int = Field(
        default=4,
        ge=0,
        description="Live transcription sessions (/v1/realtime) open at once; a further one is "
        "refused with 429. They share the job slots with file requests.",
    )
    realtime_max_session_s: float = Field(
        default=3600.0,
        gt=0,
        description="Longest live session in seconds (OpenAI's limit is 60 minutes); it then ends "
        "with a session_expired error event.",
    )
    realtime_idle_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="A live session whose client sends nothing for this long ends with an "
        "idle_timeout error event.",
    )
    host: str = Field(default="127.0.0.1", description="Interface to listen on (0.0.0.0: all).")
    port: int = Field(default=8000, ge=0, le=65535, description="TCP port to listen on.")

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, value: Any) -> Any:
        # API_KEY="" in a compose file or shell means "no key", not "the empty key".
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [origin.strip() for origin in value.split(",") if origin.strip()]
        return value

    @property
    def time_budget(self) -> TimeBudget:
        return TimeBudget(base_s=self.job_time_budget_base_s, per_audio_s=self.job_time_budget_per_audio_s)

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * BYTES_PER_MB)
