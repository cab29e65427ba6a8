"""Fallback options that switch Whisper's checks off or on for a test.

Random-weight models are never confident, so with the real thresholds every window they decode
falls back to beam search. Tests of the greedy paths turn the checks off; tests of the fallback
force it on every window."""

from __future__ import annotations

from typing import Any

from whosaid.engine import Engine
from whosaid.recognition.greedy import FallbackOptions
from whosaid.recognition.recognizer import SpeechRecognizer

NEVER_FALL_BACK = FallbackOptions(logprob_threshold=float("-inf"), compression_ratio_threshold=float("inf"))
# ... and never call a window silence, which needs a low log-probability too.
ALWAYS_FALL_BACK = FallbackOptions(logprob_threshold=float("inf"), no_speech_threshold=float("inf"))


def with_fallback(engine: Engine, fallback: FallbackOptions) -> Engine:
    """The same loaded models, deciding fallback by `fallback`."""
    return Engine(recognizer_with(engine.recognizer, fallback=fallback), engine.diarizer)


def recognizer_with(recognizer: SpeechRecognizer, **changes: Any) -> SpeechRecognizer:
    """A SpeechRecognizer on `recognizer`'s loaded models (nothing is loaded again), with its
    options but `changes` (fallback, language_switch_pause_s, assisted_max_duration_s,
    window_pause_s)."""
    options = {
        "fallback": recognizer.fallback,
        "language_switch_pause_s": recognizer.language_switch_pause_s,
        "assisted_max_duration_s": recognizer.assisted_max_duration_s,
        "window_pause_s": recognizer.window_pause_s,
    }
    return SpeechRecognizer(
        recognizer.model, recognizer.processor, recognizer.assistant, recognizer.vad, **{**options, **changes}
    )
