"""Exceptions raised by the core (whosaid.runtime.failures makes any other failure one of them).
The edges (handler, server, CLI) map them to responses; the core itself never imports a web
framework."""

from __future__ import annotations


class WhosaidError(Exception):
    """Base class of every error the core raises on purpose."""

    #: A short machine-readable code, used by the edges in error bodies.
    code = "internal_error"


class InvalidInputError(WhosaidError, ValueError):
    """The request is the client's mistake: bad audio, bad base64, bad parameters.

    Edges answer it with a 4xx status. The message is written for the user and says what to fix.
    """

    code = "invalid_input"


class InvalidAudioError(InvalidInputError):
    """The audio could not be decoded (not audio, empty, truncated, unsupported)."""

    code = "invalid_audio"


class AudioTooLongError(InvalidInputError):
    """The audio lasts longer than MAX_AUDIO_DURATION_S (found from the file's header or while
    decoding, before any model runs). Edges answer 413."""

    code = "audio_too_long"


class InvalidParametersError(InvalidInputError):
    """Request parameters are of the wrong type or contradict each other."""

    code = "invalid_parameters"


class ModelLoadError(WhosaidError):
    """A model could not be loaded (missing, gated without a token, incompatible)."""

    code = "model_load_error"


class AsrModelMissingError(ModelLoadError):
    """No ASR model is named (ASR_MODEL is not set); the CLI then loads its embedded default."""


class InferenceError(WhosaidError):
    """Our own failure while running a model on valid input. Edges answer it with a 5xx."""

    code = "inference_error"


class OutOfMemoryError(InferenceError):
    """The device ran out of memory. Never the client's fault: a 5xx (503), worth a retry."""

    code = "out_of_memory"


class JobStoppedError(WhosaidError):
    """The job was stopped before it finished, between two window batches or, in the lean
    decoding loop, between two tokens (see whosaid.runtime.cancellation.StopSignal). The
    subclass says why; none is the client's input fault."""

    code = "job_stopped"


class TimeBudgetExceededError(JobStoppedError):
    """The job used up its time budget (derived from the audio's duration). Edges answer 504."""

    code = "time_budget_exceeded"


class ClientGoneError(JobStoppedError):
    """The client closed the connection, so nobody would read the result."""

    code = "client_closed_request"


class SupersededError(JobStoppedError):
    """A newer job replaces this one's result: a live draft stopped when its turn
    is committed (its final is due at once)."""

    code = "superseded"


class ShuttingDownError(JobStoppedError):
    """The service is shutting down and its grace period is running out. Edges answer 503."""

    code = "shutting_down"
