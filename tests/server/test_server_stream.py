"""`stream=true` on /v1/audio/transcriptions, read by the real openai SDK from a real server
(whisper-tiny.en's real weights, the built-in diarizer): text deltas arrive while the job still
runs, join into the done event's text, which is the non-streaming answer's (up to float rounding
where the two decode different batches); diarized_json adds the same speaker segments the
non-streaming call returns; a client that leaves stops its job."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import requests
from openai import APIError, BadRequestError, OpenAI, UnprocessableEntityError

from benchmarks.common.wer import word_error_rate
from tests.support.audio_files import encode
from tests.support.server import cpu_server, threaded_server, tiny_en_with_builtin_diarizer, wait_until
from whosaid.audio.loading import load_audio_file
from whosaid.audio.vad import SpeechWindow, VoiceActivityDetector
from whosaid.recognition.recognizer import window_batches
from whosaid.server.app import create_app
from whosaid.server.settings import ServerSettings

pytestmark = pytest.mark.slow

#: One window of at most 10 s at a time: the sample's 23 s of speech make three window batches.
SMALL_WINDOWS = {"batch_size": 1, "chunk_length_s": 10, "language": "en"}
API_KEY = "stream-key"


def metric(url: str, name: str) -> float:
    response = requests.get(f"{url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=5)
    response.raise_for_status()
    for line in response.text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def server(converted_model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with cpu_server(tmp_path_factory, "server-stream", tiny_en_with_builtin_diarizer(converted_model, API_KEY)) as url:
        yield url


@pytest.fixture(scope="module")
def client(server: str) -> OpenAI:
    return OpenAI(base_url=f"{server}/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def sample(sample_wav: Path) -> bytes:
    """pyannote's 30 s two-speaker sample."""
    return sample_wav.read_bytes()


def test_deltas_arrive_while_the_job_runs_and_join_into_the_non_streaming_text(
    server: str, client: OpenAI, sample: bytes
) -> None:
    arrivals: list[tuple[float, object]] = []
    running_at_first_delta = None
    stream = client.audio.transcriptions.create(
        model="whisper-1", file=("sample.wav", sample), stream=True, extra_body=SMALL_WINDOWS
    )
    for event in stream:
        arrivals.append((time.monotonic(), event))
        if running_at_first_delta is None:
            running_at_first_delta = metric(server, "whosaid_jobs_running")
    answer = client.audio.transcriptions.create(
        model="whisper-1", file=("sample.wav", sample), extra_body=SMALL_WINDOWS
    )

    kinds = [event.type for _, event in arrivals]
    deltas = [event.delta for _, event in arrivals if event.type == "transcript.text.delta"]
    done = arrivals[-1][1]
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"}
    assert len(deltas) >= 2, kinds
    # The first text came while the job was still decoding the rest of the recording.
    assert running_at_first_delta == 1
    assert arrivals[-1][0] - arrivals[0][0] > 0.3
    assert "".join(deltas) == done.text == answer.text
    assert "know you were there" in done.text  # real weights, real words
    assert [language.code for language in done.languages] == ["en"]


def test_a_long_recording_streams_a_delta_per_window_the_first_one_alone(server: str, client: OpenAI) -> None:
    """Five AMI snippets end to end (2.5 minutes, five windows), the default batch size: the
    first window is decoded on its own, so its text is the first delta, sent while the rest is
    still being decoded; every window then has a delta of its own, and they join into the
    done event's text. The non-streamed answer decodes the five windows in one batch (nobody
    waits for its first words): the same words but where float rounding moves one (none here
    on the machines measured), and its segments, which carry times, show what the first delta covers."""
    names = ("trn00", "trn03", "trn05", "trn06", "trn09")  # the snippets with the most speech
    snippets = [load_audio_file(Path(__file__).parents[1] / "data" / "ami" / f"ami_{name}.wav") for name in names]
    samples = np.concatenate([snippet.samples for snippet in snippets])
    windows = VoiceActivityDetector.load().windows(samples, 30.0)
    assert len(windows) == 5 and samples.size / 16_000 >= 120
    meeting = ("meeting.flac", encode(samples, 16_000, "flac"))
    running_at_first_delta = None
    events = []
    for event in client.audio.transcriptions.create(
        model="whisper-1", file=meeting, stream=True, extra_body={"language": "en"}
    ):
        if running_at_first_delta is None:
            running_at_first_delta = metric(server, "whosaid_jobs_running")
        events.append(event)
    answer = client.audio.transcriptions.create(
        model="whisper-1", file=meeting, response_format="verbose_json", extra_body={"language": "en"}
    )

    deltas = [event.delta for event in events if event.type == "transcript.text.delta"]
    assert events[-1].type == "transcript.text.done" and "".join(deltas) == events[-1].text
    assert word_error_rate(answer.text, events[-1].text) <= 0.05
    assert running_at_first_delta == 1
    # One delta per window: every window of these meetings holds words.
    assert len(deltas) == len(windows)
    first_window = "".join(segment.text for segment in answer.segments if segment.start < windows[0].end_s)
    assert word_error_rate(first_window, deltas[0]) <= 0.1


def test_the_first_window_is_decoded_alone_then_full_batches() -> None:
    windows = [SpeechWindow(30.0 * n, 30.0 * n + 29.0) for n in range(6)]
    assert [len(batch) for batch in window_batches(windows, 24)] == [1, 5]
    assert [len(batch) for batch in window_batches(windows, 2)] == [1, 2, 2, 1]
    assert [batch[0] for batch in window_batches(windows, 4)] == [windows[0], windows[1], windows[5]]
    assert window_batches([], 24) == []
    # Nobody waiting for the first text (no stream, progress or prompt): full batches.
    assert [len(batch) for batch in window_batches(windows, 24, first_alone=False)] == [6]
    assert [len(batch) for batch in window_batches(windows, 4, first_alone=False)] == [4, 2]
    assert window_batches([], 4, first_alone=False) == []


def test_diarized_stream_sends_the_speaker_segments_of_the_non_streaming_answer(
    client: OpenAI, sample: bytes
) -> None:
    events = list(
        client.audio.transcriptions.create(
            model="whisper-1",
            file=("sample.wav", sample),
            stream=True,
            response_format="diarized_json",
            extra_body={"language": "en"},
        )
    )
    answer = client.audio.transcriptions.create(
        model="whisper-1", file=("sample.wav", sample), response_format="diarized_json", extra_body={"language": "en"}
    )
    segments = [event for event in events if event.type == "transcript.text.segment"]
    kinds = [event.type for event in events]
    # Speakers need the whole recording: every segment comes after the last delta.
    last_delta = max(i for i, kind in enumerate(kinds) if kind == "transcript.text.delta")
    assert kinds.index("transcript.text.segment") > last_delta
    assert kinds[-1] == "transcript.text.done" and events[-1].text == answer.text
    assert [(s.id, s.start, s.end, s.speaker, s.text) for s in segments] == [
        (s.id, s.start, s.end, s.speaker, s.text) for s in answer.segments
    ]
    assert len({segment.speaker for segment in segments}) == 2


def test_errors_before_the_stream_are_plain_http_errors(client: OpenAI, sample: bytes) -> None:
    with pytest.raises(BadRequestError) as not_audio:
        client.audio.transcriptions.create(model="whisper-1", file=("x.wav", b"not audio at all"), stream=True)
    assert not_audio.value.status_code == 400 and not_audio.value.code == "invalid_audio"
    with pytest.raises(UnprocessableEntityError) as srt:
        client.audio.transcriptions.create(
            model="whisper-1", file=("sample.wav", sample), stream=True, response_format="srt"
        )
    assert srt.value.code == "invalid_parameters" and "send stream=false" in srt.value.message


def test_a_client_that_leaves_stops_its_streamed_job(server: str, client: OpenAI, sample_audio) -> None:
    two_minutes = encode(np.tile(sample_audio.samples, 4), 16_000, "flac")
    finished_before = metric(server, 'whosaid_transcriptions_total{decoding="batched"}')
    stream = client.audio.transcriptions.create(
        model="whisper-1", file=("long.flac", two_minutes), stream=True, extra_body=SMALL_WINDOWS
    )
    first = next(iter(stream))
    assert first.type == "transcript.text.delta"
    stream.close()
    left = time.monotonic()
    wait_until(lambda: metric(server, "whosaid_jobs_running") == 0, 20, "the job to stop")
    stopped_after_s = time.monotonic() - left
    # Stopped, not finished: no transcription was counted, and the slot serves the next request.
    assert metric(server, 'whosaid_transcriptions_total{decoding="batched"}') == finished_before
    assert stopped_after_s < 10
    short = encode(sample_audio.samples[7 * 16_000 : 10 * 16_000], 16_000, "wav")
    assert client.audio.transcriptions.create(model="whisper-1", file=("s.wav", short)).text


def test_a_failure_after_the_stream_began_is_an_error_event(tiny_whisper, make_engine, sample_audio) -> None:
    """In this process, with a tiny random-weight Whisper and a time budget of 0.2 s: two
    minutes in 5 s windows cannot finish in it, so the job stops after its audio was accepted."""
    engine = make_engine(tiny_whisper("stream-budget", seed=5))
    settings = ServerSettings(api_key=None, job_time_budget_base_s=0.2, job_time_budget_per_audio_s=0)
    two_minutes = encode(np.tile(sample_audio.samples, 4), 16_000, "flac")
    with threaded_server(create_app(lambda: engine, settings)) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
        stream = client.audio.transcriptions.create(
            model="whisper-1",
            file=("long.flac", two_minutes),
            stream=True,
            extra_body={**SMALL_WINDOWS, "chunk_length_s": 5},
        )
        received = []
        with pytest.raises(APIError) as stopped:
            for event in stream:
                received.append(event)
        assert stopped.value.body["code"] == "time_budget_exceeded"
        assert "time budget of 0 s for 120.0 s of audio" in stopped.value.message
        assert all(event.type == "transcript.text.delta" for event in received)
        # The server keeps serving.
        assert requests.get(f"{url}/health", timeout=5).status_code == 200
