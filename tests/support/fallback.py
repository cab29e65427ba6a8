"""Fallback options that switch Whisper's checks off or on for a test.

Random-weight models are never confident, so with the real thresholds every window they decode
falls back to beam search. Tests of the greedy paths turn the checks off; tests of the fallback
force it on every window."""

from __future__ import annotations

from whosaid.engine import Engine
from whosaid.recognition.greedy import FallbackOptions

NEVER_FALL_BACK = FallbackOptions(logprob_threshold=float("-inf"), compression_ratio_threshold=float("inf"))
# ... and never call a window silence, which needs a low log-probability too.
ALWAYS_FALL_BACK = FallbackOptions(logprob_threshold=float("inf"), no_speech_threshold=float("inf"))


def with_fallback(engine: Engine, fallback: FallbackOptions) -> Engine:
    """The same loaded models, deciding fallback by `fallback`."""
    return Engine(engine.recognizer.with_fallback(fallback), engine.diarizer)
