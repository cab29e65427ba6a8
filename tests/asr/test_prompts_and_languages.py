"""Prompts and per-window languages on real speech (whisper-base, espeak-ng voices): a prompted
product name is spelled as prompted; a recording that switches from English to German gives each
half in its own language with multilingual=true, and a given language still forces one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.support.engines import config
from whosaid.audio.loading import Audio, audio_from_array, load_audio_file
from whosaid.config import MAX_PROMPT_CHARS, InferenceConfig
from whosaid.errors import InvalidParametersError

PRODUCT_SENTENCE = "We installed ComfyUI on the new server yesterday."
ENGLISH = (
    "Good morning. Today we talk about the weather in London and the trains to the airport. The meeting starts at ten."
)
GERMAN = (
    "Guten Morgen. Heute sprechen wir über das Wetter in Berlin und die Züge zum Flughafen. "
    "Die Besprechung beginnt um zehn Uhr."
)
PAUSE_S = 1.5


def speak(text: str, voice: str, folder: Path) -> np.ndarray:
    espeak = shutil.which("espeak-ng")
    assert espeak is not None, "espeak-ng is a test dependency (make system-deps)"
    wav = folder / f"{voice}.wav"
    subprocess.run([espeak, "-v", voice, "-s", "150", "-w", str(wav), text], check=True, capture_output=True)
    return load_audio_file(wav).samples


def test_prompt_parameters_are_checked() -> None:
    assert config(initial_prompt="  ComfyUI  ", hotwords="").initial_prompt == "ComfyUI"
    assert config(hotwords="   ").hotwords is None
    assert config(multilingual="true").multilingual is True
    with pytest.raises(InvalidParametersError, match="'initial_prompt': String should have at most 2000 characters"):
        InferenceConfig.from_parameters({"initial_prompt": "x" * (MAX_PROMPT_CHARS + 1)})
    with pytest.raises(InvalidParametersError, match="'hotwords'"):
        InferenceConfig.from_parameters({"hotwords": ["ComfyUI"]})


@pytest.fixture(scope="module")
def base_engine(converted_model, make_engine):
    return make_engine(converted_model("whisper-base"))


@pytest.fixture(scope="module")
def product_clip(tmp_path_factory) -> Audio:
    samples = speak(PRODUCT_SENTENCE, "en-us", tmp_path_factory.mktemp("product"))
    return audio_from_array(samples, 16_000)


@pytest.mark.slow
def test_a_prompted_name_is_spelled_as_prompted(base_engine, product_clip) -> None:
    plain = base_engine.transcribe(product_clip, config(language="en")).text
    assert "ComfyUI" not in plain  # whisper-base misspells it ("ComeFitUi")
    for prompt in ({"initial_prompt": "ComfyUI, Kubernetes."}, {"hotwords": "ComfyUI"}):
        prompted = base_engine.transcribe(product_clip, config(language="en", **prompt)).text
        assert "ComfyUI" in prompted, (prompt, prompted)


@pytest.fixture(scope="module")
def two_languages(tmp_path_factory) -> tuple[Audio, float]:
    """English, a pause, German; returns the audio and where the German starts."""
    folder = tmp_path_factory.mktemp("languages")
    english, german = speak(ENGLISH, "en-us", folder), speak(GERMAN, "de", folder)
    pause = np.zeros(int(PAUSE_S * 16_000), np.float32)
    return audio_from_array(np.concatenate([english, pause, german]), 16_000), len(english) / 16_000 + PAUSE_S


@pytest.mark.slow
def test_each_half_in_its_own_language(base_engine, two_languages) -> None:
    audio, german_start_s = two_languages
    transcript = base_engine.transcribe(audio, config(multilingual=True))
    languages = {chunk.language for chunk in transcript.chunks if chunk.end_s <= german_start_s}
    assert languages == {"en"}, transcript.chunks
    german = [chunk for chunk in transcript.chunks if chunk.start_s >= german_start_s - 0.5]
    assert german and {chunk.language for chunk in german} == {"de"}, transcript.chunks
    german_text = "".join(chunk.text for chunk in german)
    assert "Flughafen" in german_text and "Morgen" in german_text
    assert transcript.language == "en"  # the first window's, as before
    response = transcript.to_dict()
    assert [chunk["language"] for chunk in response["chunks"]] == [chunk.language for chunk in transcript.chunks]


@pytest.mark.slow
def test_a_given_language_forces_one(base_engine, two_languages) -> None:
    audio, _ = two_languages
    forced = base_engine.transcribe(audio, config(multilingual=True, language="en"))
    assert {chunk.language for chunk in forced.chunks} == {"en"}
    once = base_engine.transcribe(audio, config())  # detected once, on the first window
    assert {chunk.language for chunk in once.chunks} == {"en"}
    assert all("language" not in chunk for chunk in once.to_dict()["chunks"])
