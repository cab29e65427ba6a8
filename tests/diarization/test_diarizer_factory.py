"""DIARIZATION_MODEL -> diarizer: an unset name is a load error naming the variable, not an
assertion; a name that is no pipeline is a load error with the hint to fix it; DIARIZATION_STEP_S
reaches the built-in diarizer."""

from __future__ import annotations

import pytest

from whosaid.config import ModelSettings
from whosaid.errors import ModelLoadError
from whosaid.speakers.diarizer import load_diarizer
from whosaid.speakers.pyannote import PyannoteDiarizer


def test_no_diarization_model_is_a_load_error() -> None:
    settings = ModelSettings(asr_model="unused", diarization_model=None, device="cpu")
    with pytest.raises(ModelLoadError, match="set DIARIZATION_MODEL"):
        load_diarizer(settings)
    with pytest.raises(ModelLoadError, match="set DIARIZATION_MODEL"):
        PyannoteDiarizer.from_settings(settings)


def test_a_missing_local_pipeline_is_a_load_error_with_the_hint(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = tmp_path / "no-pipeline-here"
    settings = ModelSettings(asr_model="unused", diarization_model=str(missing), device="cpu")
    with pytest.raises(ModelLoadError, match="cannot load the diarization pipeline .*config.yaml"):
        load_diarizer(settings)


@pytest.mark.slow  # loads and runs the real built-in diarizer
def test_diarization_step_reaches_the_built_in_diarizer(monkeypatch: pytest.MonkeyPatch, sample_audio) -> None:
    from whosaid.speaker_hints import SpeakerHints
    from whosaid.speakers.builtin import BuiltinDiarizer

    monkeypatch.setenv("DIARIZATION_STEP_S", "5")
    diarizer = load_diarizer(ModelSettings(asr_model="unused", diarization_model="builtin", device="cpu"))
    assert isinstance(diarizer, BuiltinDiarizer)
    assert diarizer.options.segmentation_step_s == 5.0
    segmentation = diarizer.segment(sample_audio)
    assert segmentation.sliding_window.step == 5.0
    assert segmentation.data.shape[0] == 5  # 30 s: chunks at 0, 5, 10, 15 and 20 s
    turns = diarizer.diarize(sample_audio, SpeakerHints()).turns
    assert {turn.speaker for turn in turns} == {"SPEAKER_00", "SPEAKER_01"}


@pytest.mark.parametrize("step", ["0.1", "12", "fast"])
def test_a_diarization_step_out_of_range_is_refused(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    from pydantic import ValidationError

    monkeypatch.setenv("DIARIZATION_STEP_S", step)
    with pytest.raises(ValidationError, match="diarization_step_s"):
        ModelSettings(asr_model="unused")
