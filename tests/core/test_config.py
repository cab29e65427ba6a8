"""Request parameters: every rule of InferenceConfig, with the message a user sees."""

from __future__ import annotations

import pytest

from whosaid.config import InferenceConfig, ModelSettings
from whosaid.errors import InvalidParametersError
from whosaid.speaker_hints import SpeakerHints


def parse(parameters, **context):
    return InferenceConfig.from_parameters(parameters, **context)


def test_defaults_match_the_original_handler() -> None:
    config, warnings = parse(None)
    assert (config.task, config.batch_size, config.chunk_length_s, config.sampling_rate) == (
        "transcribe",
        24,
        30.0,
        16000,
    )
    assert config.assisted == "auto" and config.language is None and warnings == []
    assert config.speaker_hints() == SpeakerHints()


def test_unknown_parameters_are_ignored_and_reported() -> None:
    config, warnings = parse({"batch_size": 8, "beam_size": 5, "foo": "bar"})
    assert config.batch_size == 8
    assert warnings == ["unknown parameter 'beam_size' was ignored", "unknown parameter 'foo' was ignored"]


def test_query_string_values_are_parsed() -> None:
    config, _ = parse({"batch_size": "4", "assisted": "false", "num_speakers": "2", "language": " EN "})
    assert (config.batch_size, config.assisted, config.num_speakers, config.language) == (4, False, 2, "en")


@pytest.mark.parametrize(
    "parameters, message",
    [
        ({"batch_size": "abc"}, "parameter 'batch_size': Input should be a valid integer"),
        ({"batch_size": 0}, "parameter 'batch_size': Input should be greater than or equal to 1"),
        ({"batch_size": [1]}, "parameter 'batch_size': Input should be a valid integer"),
        ({"task": "summarise"}, "parameter 'task': Input should be 'transcribe' or 'translate'"),
        ({"chunk_length_s": 45}, "parameter 'chunk_length_s': Input should be less than or equal to 30"),
        ({"chunk_length_s": 0.001}, "parameter 'chunk_length_s': Input should be greater than or equal to 5"),
        ({"max_speakers": 10**6}, "parameter 'max_speakers': Input should be less than or equal to 100"),
        ({"assisted": "maybe"}, "assisted must be true, false or 'auto'"),
        ({"assisted": 3}, "assisted must be true, false or 'auto'"),
        ({"num_speakers": 0}, "parameter 'num_speakers': Input should be greater than or equal to 1"),
        ({"min_speakers": -1}, "parameter 'min_speakers': Input should be greater than or equal to 1"),
        ({"max_speakers": "two"}, "parameter 'max_speakers': Input should be a valid integer"),
        ({"min_speakers": 3, "max_speakers": 2}, "min_speakers (3) is greater than max_speakers (2)"),
        ({"num_speakers": 2, "max_speakers": 3}, "send either num_speakers or min_speakers/max_speakers"),
        ({"sampling_rate": 10}, "parameter 'sampling_rate': Input should be greater than or equal to 1000"),
    ],
)
def test_invalid_parameters_say_what_is_wrong(parameters, message) -> None:
    with pytest.raises(InvalidParametersError) as raised:
        parse(parameters)
    assert message in str(raised.value)


def test_parameters_must_be_an_object() -> None:
    with pytest.raises(InvalidParametersError, match="parameters must be a JSON object, not list"):
        parse([1, 2])


def test_assisted_needs_batch_size_one_and_says_so() -> None:
    with pytest.raises(InvalidParametersError) as raised:
        parse({"assisted": True, "batch_size": 24}, has_assistant=True)
    assert "assisted=true needs batch_size=1" in str(raised.value)
    assert "got batch_size=24" in str(raised.value)


def test_assisted_without_explicit_batch_size_runs_at_one() -> None:
    config, _ = parse({"assisted": True}, has_assistant=True)
    assert config.batch_size == 24 and config.effective_batch_size == 1


def test_assisted_needs_an_assistant_model() -> None:
    with pytest.raises(InvalidParametersError, match="assisted=true needs an assistant model: set ASSISTANT_MODEL"):
        parse({"assisted": True, "batch_size": 1}, has_assistant=False)
    # 'auto' and false never need one
    assert parse({"assisted": "auto"}, has_assistant=False)[0].assisted == "auto"


def test_speaker_parameters_need_a_diarizer() -> None:
    with pytest.raises(InvalidParametersError, match="max_speakers, min_speakers need a diarization model"):
        parse({"min_speakers": 1, "max_speakers": 2}, has_diarizer=False)
    config, _ = parse({"min_speakers": 1, "max_speakers": 2}, has_diarizer=True)
    assert config.speaker_hints() == SpeakerHints(min_speakers=1, max_speakers=2)


def test_model_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASR_MODEL", "openai/whisper-large-v3")
    monkeypatch.setenv("ASSISTANT_MODEL", "")
    monkeypatch.setenv("DIARIZATION_MODEL", "pyannote/speaker-diarization-3.1")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    settings = ModelSettings()
    assert settings.asr_model == "openai/whisper-large-v3"
    assert settings.assistant_model is None
    assert settings.diarization_model == "pyannote/speaker-diarization-3.1"
    assert settings.token() == "hf_secret_value"
    assert "hf_secret_value" not in repr(settings) and "hf_secret_value" not in str(settings.model_dump())


def test_model_settings_resolve_cpu_defaults() -> None:
    settings = ModelSettings(asr_model="x", device="cpu")
    import torch

    assert settings.resolved_dtype() == torch.float32
    assert settings.resolved_attn_implementation() == "sdpa"
    with pytest.raises(ValueError, match="device must be auto, cpu, cuda, cuda:N or mps"):
        ModelSettings(asr_model="x", device="tpu")
