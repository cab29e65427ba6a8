"""Switch Whisper's fallback checks off or on for a test.

Random-weight models are never confident, so with the real thresholds every window they decode
falls back to beam search. Tests of the greedy paths turn the checks off; tests of the fallback
force it on every window."""

from __future__ import annotations

import pytest


def never_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("whosaid.decoding.LOGPROB_THRESHOLD", float("-inf"))
    monkeypatch.setattr("whosaid.decoding.COMPRESSION_RATIO_THRESHOLD", float("inf"))


def always_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("whosaid.decoding.LOGPROB_THRESHOLD", float("inf"))
    # ... and never call a window silence, which needs a low log-probability too.
    monkeypatch.setattr("whosaid.decoding.NO_SPEECH_THRESHOLD", float("inf"))
