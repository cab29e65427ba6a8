"""DIARIZATION_MODEL -> diarizer: an unset name is a load error naming the variable, not an
assertion; a name that is no pipeline is a load error with the hint to fix it."""

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
