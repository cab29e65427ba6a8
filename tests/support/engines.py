"""Loaded models shared by several test files, and the helpers their requests use.

`tiny_engine` runs a tiny random-weight Whisper (quick, no meaningful text); `tiny_en_engine`
runs whisper-tiny.en's real weights (real sentences, end-of-text at different steps, timestamps
that mean something); `builtin_diarizer` is the built-in diarizer's real models. All go through
the real loading code."""

from __future__ import annotations

import pytest

from whosaid.audio.loading import Audio, audio_from_array
from whosaid.config import InferenceConfig

RATE = 16_000


def config(**parameters) -> InferenceConfig:
    """A request's inference settings, as the handler and the server parse them."""
    return InferenceConfig.from_parameters(parameters)[0]


def cut(audio: Audio, start_s: float, end_s: float) -> Audio:
    return audio_from_array(audio.samples[int(start_s * RATE) : int(end_s * RATE)], RATE)


@pytest.fixture(scope="session")
def tiny_engine(tiny_whisper, make_engine):
    return make_engine(tiny_whisper("speed-main", seed=5))


@pytest.fixture(scope="session")
def tiny_en_engine(converted_model, make_engine):
    return make_engine(converted_model("whisper-tiny.en"))


@pytest.fixture(scope="session")
def builtin_diarizer():
    from whosaid.config import ModelSettings
    from whosaid.speakers.builtin import BuiltinDiarizer
    from whosaid.speakers.diarizer import load_diarizer

    loaded = load_diarizer(ModelSettings(asr_model="unused", diarization_model="builtin", device="cpu"))
    assert isinstance(loaded, BuiltinDiarizer)
    return loaded
