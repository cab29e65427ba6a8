"""`make serve` with no model settings does the whole job offline: the embedded Whisper base and
the built-in diarizer answer who said what, through the OpenAI route's diarized formats."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import requests

from benchmarks.common.scoring import rttm_speakers, rttm_turns
from tests.support.server import cpu_server

pytestmark = pytest.mark.slow

MODEL_VARIABLES = ("ASR_MODEL", "ASSISTANT_MODEL", "DIARIZATION_MODEL", "HF_TOKEN", "API_KEY")


@pytest.fixture(scope="module")
def server(converted_model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    converted_model("whisper-base")  # the embedded default must exist, as `make serve` ensures
    with cpu_server(tmp_path_factory, "server-default", {}, unset=MODEL_VARIABLES) as url:
        yield url


def transcribe(server: str, audio: bytes, **form: str) -> requests.Response:
    return requests.post(
        f"{server}/v1/audio/transcriptions",
        files={"file": ("sample.wav", audio, "audio/wav")},
        data={"model": "whisper-1", **form},
        timeout=300,
    )


def test_the_default_server_says_who_spoke(server: str, sample_wav: Path) -> None:
    audio = sample_wav.read_bytes()
    diarized = transcribe(server, audio, response_format="diarized_json")
    assert diarized.status_code == 200, diarized.text
    segments = diarized.json()["segments"]
    assert {segment["speaker"] for segment in segments} == {"SPEAKER_00", "SPEAKER_01"}
    assert "know you were there" in " ".join(segment["text"] for segment in segments)

    rttm = transcribe(server, audio, response_format="rttm")
    assert rttm.status_code == 200, rttm.text
    lines = rttm.text.splitlines()
    assert lines and all(line.startswith("SPEAKER ") for line in lines)
    assert rttm_speakers(rttm.text) == {"SPEAKER_00", "SPEAKER_01"}


def test_num_speakers_changes_the_answer(server: str, sample_wav: Path) -> None:
    audio = sample_wav.read_bytes()
    one = transcribe(server, audio, response_format="rttm", num_speakers="1")
    three = transcribe(server, audio, response_format="rttm", num_speakers="3")
    assert one.status_code == three.status_code == 200
    assert rttm_speakers(one.text) == {"SPEAKER_00"}
    assert rttm_speakers(three.text) == {"SPEAKER_00", "SPEAKER_01", "SPEAKER_02"}


def test_impossible_speaker_counts_are_422(server: str, sample_wav: Path) -> None:
    response = transcribe(server, sample_wav.read_bytes(), response_format="rttm", num_speakers="60")
    assert response.status_code == 422, response.text
    assert "too few speech regions" in response.json()["error"]["message"]


def test_overlapping_speech_of_a_real_meeting_end_to_end(server: str) -> None:
    # A real AMI meeting snippet where two people talk at once for seconds.
    audio = (Path(__file__).parents[1] / "data" / "ami" / "ami_trn09.wav").read_bytes()
    rttm = transcribe(server, audio, response_format="rttm")
    assert rttm.status_code == 200, rttm.text
    turns = rttm_turns(rttm.text)
    overlap_s = sum(
        max(0.0, min(a[1], b[1]) - max(a[0], b[0])) for i, a in enumerate(turns) for b in turns[i + 1 :] if a[2] != b[2]
    )
    assert overlap_s >= 1.0, turns

    diarized = transcribe(server, audio, response_format="diarized_json")
    assert diarized.status_code == 200, diarized.text
    body = diarized.json()
    segments = body["segments"]
    assert len({segment["speaker"] for segment in segments}) == 2
    # Word attribution takes the exclusive view: every word once, in order, segments never overlap.
    assert " ".join(" ".join(s["text"] for s in segments).split()) == " ".join(body["text"].split())
    assert all(a["end"] <= b["start"] + 1e-3 for a, b in zip(segments, segments[1:], strict=False))
