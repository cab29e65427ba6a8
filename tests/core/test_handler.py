"""The Inference Endpoints handler end to end: real transformers models, the real pyannote
pipeline code (random weights), requests shaped as the inference toolkit passes them."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.audio_bombs import BOMBS, FOUR_HOURS_PLUS_S, UPLOAD_LIMIT_FLAC_S, flac_bomb
from tests.support.audio_files import channels_wav, encode, resample
from whosaid.audio.loading import load_audio
from whosaid.config import get_model_settings
from whosaid.errors import (
    AudioTooLongError,
    InvalidAudioError,
    InvalidInputError,
    InvalidParametersError,
    ModelLoadError,
    TimeBudgetExceededError,
)


def make_handler(
    monkeypatch: pytest.MonkeyPatch, asr: Path, diarization: Path | None = None, assistant: Path | None = None
):
    from handler import EndpointHandler

    monkeypatch.setenv("ASR_MODEL", str(asr))
    monkeypatch.setenv("DEVICE", "cpu")
    for name, value in (("DIARIZATION_MODEL", diarization), ("ASSISTANT_MODEL", assistant)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, str(value))
    get_model_settings.cache_clear()
    try:
        return EndpointHandler("/repository")
    finally:
        get_model_settings.cache_clear()


@pytest.fixture(scope="module")
def tiny(tiny_whisper) -> Path:
    return tiny_whisper("handler-main", seed=3)


@pytest.fixture(scope="module")
def handler(tiny, random_diarizer_dir):
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield make_handler(monkeypatch, tiny, diarization=random_diarizer_dir)


@pytest.fixture(scope="module")
def sample_bytes(sample_wav: Path) -> bytes:
    return sample_wav.read_bytes()


@pytest.fixture(scope="module")
def short_wav(sample_audio) -> bytes:
    return encode(sample_audio.samples[7 * 16000 : 9 * 16000], 16000, "wav")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_response_has_the_original_handlers_shape_and_every_chunk_once(handler, sample_bytes) -> None:
    response = handler({"inputs": b64(sample_bytes), "parameters": {"batch_size": 2, "language": "en"}})
    assert set(response) >= {"text", "chunks", "speakers", "language", "duration"}
    assert response["language"] == "en" and response["duration"] == 30.0
    assert response["chunks"], "the tiny model always says something"
    for chunk in response["chunks"]:
        start, end = chunk["timestamp"]
        assert 0 <= start <= end <= 30.0 and isinstance(chunk["text"], str)
    for segment in response["speakers"]:
        assert set(segment) == {"speaker", "text", "timestamp"}
        assert re.fullmatch(r"SPEAKER_\d\d", segment["speaker"])
    joined_chunks = re.sub(r"\s+", "", "".join(chunk["text"] for chunk in response["chunks"]))
    joined_speakers = re.sub(r"\s+", "", "".join(segment["text"] for segment in response["speakers"]))
    assert joined_speakers == joined_chunks
    starts = [segment["timestamp"][0] for segment in response["speakers"]]
    assert starts == sorted(starts)


@pytest.mark.slow  # whole diarized transcriptions of the sample, several times
def test_bytes_inputs_as_the_asr_task_hands_them(handler, sample_bytes) -> None:
    from_bytes = handler({"inputs": sample_bytes, "parameters": {"language": "en"}})
    from_base64_bytes = handler({"inputs": base64.b64encode(sample_bytes), "parameters": {"language": "en"}})
    from_text = handler({"inputs": b64(sample_bytes), "parameters": {"language": "en"}})
    assert from_bytes == from_base64_bytes == from_text


@pytest.mark.slow  # whole diarized transcriptions of the sample, several times
def test_speaker_counts_reach_pyannote(handler, sample_audio) -> None:
    engine = handler.engine
    two = engine.run(sample_audio.samples, {"num_speakers": 2})
    assert len({turn.speaker for turn in two.turns}) == 2
    one = engine.run(sample_audio.samples, {"max_speakers": 1})
    assert len({turn.speaker for turn in one.turns}) == 1
    bounded = engine.run(sample_audio.samples, {"min_speakers": 1, "max_speakers": 2})
    assert 1 <= len({turn.speaker for turn in bounded.turns}) <= 2


@pytest.mark.slow  # whole diarized transcriptions of the sample, several times
def test_non_16k_audio_gives_speakers_on_the_audio_time_scale(handler, sample_audio) -> None:
    """The original handler told pyannote 16 kHz whatever the file's rate: a 44.1 kHz file came out with
    speaker times stretched by 2.76. Audio is decoded to 16 kHz once and pyannote gets that."""
    stereo_44k = encode(resample(sample_audio.samples, 16000, 44100), 44100, "wav", channels=2)
    transcript = handler.engine.run(b64(stereo_44k), {})
    assert abs(transcript.duration_s - 30.0) < 0.02
    assert transcript.turns and max(turn.end_s for turn in transcript.turns) > 25.0
    assert all(0.0 <= turn.start_s < turn.end_s <= 30.0 for turn in transcript.turns)
    reference = handler.engine.run(sample_audio.samples, {})
    assert abs(max(t.end_s for t in transcript.turns) - max(t.end_s for t in reference.turns)) < 1.0


def test_silence_is_an_empty_transcript(handler) -> None:
    silence = encode(np.zeros(3 * 16000, dtype=np.float32), 16000, "wav")
    response = handler({"inputs": b64(silence), "parameters": {"num_speakers": 2}})
    assert response["text"] == "" and response["chunks"] == [] and response["speakers"] == []
    assert response["duration"] == 3.0


def test_unknown_parameters_are_listed_as_warnings(handler, sample_audio) -> None:
    audio = encode(sample_audio.samples[: 3 * 16000], 16000, "flac")
    response = handler({"inputs": b64(audio), "parameters": {"beam_size": 4, "language": "en"}})
    assert response["warnings"] == ["unknown parameter 'beam_size' was ignored"]


@pytest.mark.parametrize(
    "data, error, message",
    [
        ({"inputs": b64(b"\x00garbage\xff" * 40)}, InvalidAudioError, "could not decode the audio"),
        ({"inputs": "%%% not base64 %%%"}, InvalidAudioError, "inputs is not valid base64"),
        ({"inputs": ""}, InvalidAudioError, "empty input"),
        ({"audio": "abc"}, InvalidInputError, 'the request body must be {"inputs"'),
        ({"inputs": "UklGRg==", "parameters": {"batch_size": "many"}}, InvalidParametersError, "'batch_size'"),
        ({"inputs": "UklGRg==", "parameters": {"num_speakers": 0}}, InvalidParametersError, "'num_speakers'"),
        (
            {"inputs": "UklGRg==", "parameters": {"num_speakers": 10**9}},
            InvalidParametersError,
            "less than or equal to 100",
        ),
        # 0.001 s windows would make an 8 s file 8000 windows: refused, not decoded for hours.
        (
            {"inputs": "UklGRg==", "parameters": {"chunk_length_s": 0.001}},
            InvalidParametersError,
            "'chunk_length_s': Input should be greater than or equal to 5",
        ),
        (
            {"inputs": "UklGRg==", "parameters": {"min_speakers": 4, "max_speakers": 2}},
            InvalidParametersError,
            "min_speakers (4) is greater than max_speakers (2)",
        ),
        ({"inputs": "UklGRg==", "parameters": "fast"}, InvalidParametersError, "parameters must be a JSON object"),
        (
            {
                "inputs": base64.b64encode(channels_wav(np.full((9, 16_000), 0.01, np.float32))).decode(),
                "parameters": {"multichannel": True},
            },
            InvalidParametersError,
            "multichannel=true takes at most 8 channels, and the audio holds 9",
        ),
        (
            {"inputs": "UklGRg==", "parameters": {"assisted": True, "batch_size": 1}},
            InvalidParametersError,
            "needs an assistant model",
        ),
    ],
)
def test_bad_requests_are_typed_errors_and_the_handler_keeps_serving(handler, short_wav, data, error, message) -> None:
    with pytest.raises(error) as raised:
        handler(data)
    assert message in str(raised.value)
    assert handler({"inputs": b64(short_wav), "parameters": {"language": "en"}})["duration"] == 2.0


def test_a_request_over_its_time_budget_is_stopped_with_a_typed_error(monkeypatch, tiny, short_wav) -> None:
    # The platform has no queue in front of the handler: the budget is all that ends a runaway job.
    monkeypatch.setenv("JOB_TIME_BUDGET_BASE_S", "0.001")
    monkeypatch.setenv("JOB_TIME_BUDGET_PER_AUDIO_S", "0")
    handler = make_handler(monkeypatch, tiny)
    with pytest.raises(TimeBudgetExceededError, match="ran out of its time budget of 0 s for 2.0 s of audio"):
        handler({"inputs": b64(short_wav), "parameters": {"language": "en"}})
    monkeypatch.setenv("JOB_TIME_BUDGET_BASE_S", "600")
    assert make_handler(monkeypatch, tiny)({"inputs": b64(short_wav), "parameters": {"language": "en"}})["chunks"]


def test_truncated_wav_is_refused(handler, sample_bytes) -> None:
    with pytest.raises(InvalidAudioError, match="the WAV file is truncated"):
        handler({"inputs": b64(sample_bytes[: len(sample_bytes) // 3])})


def test_too_many_speakers_for_short_audio_is_the_clients_error(handler, sample_audio) -> None:
    with pytest.raises(InvalidParametersError, match="too few speech regions for that many speakers"):
        handler.engine.run(sample_audio.samples[: 11 * 16000], {"num_speakers": 3})


def test_speaker_parameters_without_diarizer_are_refused(monkeypatch, tiny, sample_bytes, short_wav) -> None:
    handler = make_handler(monkeypatch, tiny)
    with pytest.raises(InvalidParametersError, match="num_speakers need a diarization model: set DIARIZATION_MODEL"):
        handler({"inputs": b64(sample_bytes), "parameters": {"num_speakers": 2}})
    response = handler({"inputs": b64(short_wav), "parameters": {"language": "en"}})
    assert response["speakers"] == [] and response["chunks"]


BOMB_LIMIT_S = 30.0


@pytest.fixture(scope="module")
def limited_handler(tiny):
    # The limit is read when the handler is built; the variable must not outlive that.
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("MAX_AUDIO_DURATION_S", str(BOMB_LIMIT_S))
        return make_handler(monkeypatch, tiny)


@pytest.mark.parametrize("bomb", BOMBS, ids=[bomb.name for bomb in BOMBS])
def test_audio_over_max_audio_duration_s_is_refused_as_the_server_refuses_it(limited_handler, short_wav, bomb) -> None:
    data = bomb.build(45.0)
    with pytest.raises(AudioTooLongError) as refused:
        limited_handler({"inputs": b64(data), "parameters": {"language": "en"}})
    with pytest.raises(AudioTooLongError) as from_the_loader:  # what the server's 413 carries
        load_audio(data, max_duration_s=BOMB_LIMIT_S)
    assert refused.value.code == "audio_too_long" and str(refused.value) == str(from_the_loader.value)
    assert limited_handler({"inputs": b64(short_wav), "parameters": {"language": "en"}})["chunks"]


def test_the_default_limit_refuses_the_four_hour_and_the_25_mib_flac_at_once(handler) -> None:
    for duration_s in (FOUR_HOURS_PLUS_S, UPLOAD_LIMIT_FLAC_S):
        data = flac_bomb(duration_s)
        started = time.perf_counter()
        expected = f"header declares {duration_s:.0f}.*, longer than the limit of 14400 s"
        with pytest.raises(AudioTooLongError, match=expected):
            handler({"inputs": data, "parameters": {"language": "en"}})
        assert time.perf_counter() - started < 1.0


def test_missing_or_wrong_models_fail_at_load_with_what_to_do(monkeypatch, tmp_path, tiny) -> None:
    from handler import EndpointHandler

    monkeypatch.delenv("ASR_MODEL", raising=False)
    get_model_settings.cache_clear()
    with pytest.raises(ModelLoadError, match="ASR_MODEL is not set"):
        EndpointHandler("/repository")
    with pytest.raises(ModelLoadError, match="cannot load the ASR model"):
        make_handler(monkeypatch, tmp_path / "no-such-model")
    with pytest.raises(ModelLoadError, match="accept its conditions on the Hub"):
        make_handler(monkeypatch, tiny, diarization=tmp_path / "no-such-pipeline")


@pytest.mark.slow
def test_word_error_rate_of_converted_base_on_pyannote_sample(monkeypatch, converted_model, sample_wav) -> None:
    from benchmarks.common.wer import word_error_rate

    handler = make_handler(monkeypatch, converted_model("whisper-base"))
    response = handler({"inputs": b64(sample_wav.read_bytes()), "parameters": {"language": "en"}})
    reference = " ".join(line.split(maxsplit=5)[5] for line in sample_wav.with_suffix(".stm").read_text().splitlines())

    error_rate = word_error_rate(reference, response["text"])
    print(f"WER whisper-base on sample.wav: {error_rate:.3f}")
    assert error_rate <= 0.30
