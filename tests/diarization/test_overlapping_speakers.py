"""Two speakers at once, end to end. A stand-in diarizer answers real speech (espeak-ng voices,
transcribed by whisper-base) with overlapping turns and their exclusive view, as an
overlap-aware diarizer does. Through a real server on loopback and the real remote client:
RTTM and POST /'s `turns` hold the overlapping turns exactly; diarized_json, its streamed
segments and verbose_json give every word once, in order, to the speaker the exclusive view says.
tests/diarization/test_speaker_timelines.py has how pyannote's output becomes a Diarization."""

from __future__ import annotations

import base64
import itertools
import json
from pathlib import Path
from typing import Iterator, Sequence

import pytest
import requests

from benchmarks.common.wer import normalise_text
from tests.support.conversation import MEETING_SCRIPT, Conversation, build_conversation, espeak_available
from tests.support.server import threaded_server
from whosaid.audio.loading import Audio
from whosaid.cli.main import main
from whosaid.engine import Engine
from whosaid.formats import DiarizedTranscription, VerboseTranscription
from whosaid.results import Diarization, SpeakerTurn, Word
from whosaid.server.app import create_app
from whosaid.server.settings import ServerSettings
from whosaid.speaker_hints import SpeakerHints
from whosaid.speakers.attribution import assign_speakers

PARAMETERS = {"language": "en"}


class OverlappingTurns:
    """A Diarizer-compatible component with a fixed answer: overlapping turns and their
    exclusive view."""

    def __init__(self, diarization: Diarization) -> None:
        self.diarization = diarization

    def diarize(self, audio: Audio, hints: SpeakerHints) -> Diarization:
        return self.diarization


@pytest.fixture(scope="module")
def conversation() -> Conversation:
    if not espeak_available():
        pytest.skip("espeak-ng is not installed (make system-deps)")
    # Alice's opening, Bob's "Morning.", Carol's "Hi Alice.", Alice, Bob's long answer, "Great."
    return build_conversation(MEETING_SCRIPT[:6])


@pytest.fixture(scope="module")
def diarization(conversation: Conversation) -> Diarization:
    """The exclusive view is the reference; the overlapping turns add what an overlap-aware
    diarizer also hears: Alice still talking through Bob's "Morning.", Bob talking on into
    Alice's "Great."."""
    lines = conversation.lines
    exclusive = tuple(SpeakerTurn(line.start_s, line.end_s, line.speaker) for line in lines)
    overlapping = (
        SpeakerTurn(lines[0].start_s, lines[1].end_s, "alice"),
        *exclusive[1:4],
        SpeakerTurn(lines[4].start_s, lines[5].end_s - 0.1, "bob"),
        exclusive[5],
    )
    turns = tuple(sorted(overlapping, key=lambda turn: (turn.start_s, turn.end_s, turn.speaker)))
    return Diarization(turns=turns, exclusive_turns=exclusive)


@pytest.fixture(scope="module")
def engine(converted_model, make_engine, diarization: Diarization) -> Engine:
    recognizer = make_engine(converted_model("whisper-base")).recognizer
    return Engine(recognizer, OverlappingTurns(diarization))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def server(engine: Engine) -> Iterator[str]:
    with threaded_server(create_app(lambda: engine, ServerSettings(api_key=None))) as url:
        yield url


@pytest.fixture(scope="module")
def wav_path(conversation: Conversation, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("overlap") / "meeting.wav"
    path.write_bytes(conversation.wav_bytes())
    return path


@pytest.fixture(scope="module")
def transcript(engine: Engine, wav_path: Path):
    """What every edge renders: the same file through the same engine, in this process."""
    return engine.run(wav_path.read_bytes(), PARAMETERS)


def words_of(transcript) -> list[Word]:
    return [word for chunk in transcript.chunks for word in chunk.words]


def speakers_during(segments: Sequence, start_s: float, end_s: float) -> set[str]:
    """The speakers given to the words whose middle lies in [start_s, end_s]."""
    return {
        segment.speaker
        for segment in segments
        for piece in segment.chunks
        for word in piece.words
        if start_s <= (word.start_s + word.end_s) / 2 <= end_s
    }


def rttm_line(turn: SpeakerTurn, uri: str) -> str:
    return f"SPEAKER {uri} 1 {turn.start_s:.3f} {turn.end_s - turn.start_s:.3f} <NA> <NA> {turn.speaker} <NA> <NA>"


def remote(wav_path: Path, url: str, output_format: str, output_dir: Path) -> str:
    """`whosaid transcribe FILE --url URL -f FORMAT -o DIR`: the real remote client."""
    arguments = ["transcribe", str(wav_path), "--url", url, "-f", output_format, "-o", str(output_dir)]
    assert main([*arguments, "--language", "en", "--no-progress"]) == 0
    (written,) = [path for path in output_dir.iterdir() if path.is_file()]
    return written.read_text()


@pytest.mark.slow
def transcribe(server: str, wav_path: Path, *, stream: bool = False, **form: str) -> requests.Response:
    """The OpenAI route with the meeting; `stream` asks for server-sent events."""
    data = {**PARAMETERS, **form, **({"stream": "true"} if stream else {})}
    files = {"file": ("meeting.wav", wav_path.read_bytes())}
    return requests.post(f"{server}/v1/audio/transcriptions", files=files, data=data, timeout=300, stream=stream)


def test_the_exclusive_view_decides_the_words(transcript, conversation: Conversation, diarization: Diarization) -> None:
    assert transcript.turns == diarization.turns
    segments = transcript.speakers
    for line in conversation.lines:
        assert speakers_during(segments, line.start_s, line.end_s) <= {line.speaker}, line
    morning = conversation.lines[1]
    assert speakers_during(segments, morning.start_s, morning.end_s) == {"bob"}
    # The overlapping turns alone would have given Bob's "Morning." to Alice, who talks through it.
    on_overlapping_turns = assign_speakers(transcript.chunks, diarization.turns)
    assert speakers_during(on_overlapping_turns, morning.start_s, morning.end_s) == {"alice"}
    assert [w for segment in segments for piece in segment.chunks for w in piece.words] == words_of(transcript)


@pytest.mark.slow
def test_rttm_holds_the_overlapping_turns_exactly(
    server: str, wav_path: Path, diarization: Diarization, tmp_path: Path
) -> None:
    rttm = remote(wav_path, server, "rttm", tmp_path)
    assert rttm.splitlines() == [rttm_line(turn, "meeting") for turn in diarization.turns]
    # The two overlaps are there: a line starts before the previous one ends.
    starts_and_ends = [(turn.start_s, turn.end_s) for turn in diarization.turns]
    overlaps = [b[0] < a[1] for a, b in itertools.pairwise(starts_and_ends)]
    assert sum(overlaps) == 2


@pytest.mark.slow
def test_diarized_json_has_every_word_once_in_order(server: str, wav_path: Path, transcript, tmp_path: Path) -> None:
    answer = DiarizedTranscription.model_validate_json(remote(wav_path, server, "diarized_json", tmp_path))
    assert [(s.speaker, s.text) for s in answer.segments] == [(s.speaker, s.text) for s in transcript.speakers]
    assert {s.speaker for s in answer.segments} == {"alice", "bob", "carol"}
    assert all(a.speaker != b.speaker for a, b in itertools.pairwise(answer.segments))
    assert normalise_text(" ".join(s.text for s in answer.segments)) == normalise_text(answer.text)
    starts = [s.start for s in answer.segments]
    assert starts == sorted(starts)
    assert all(a.end <= b.start for a, b in itertools.pairwise(answer.segments))


@pytest.mark.slow
def test_verbose_json_words_and_segments_stay_exclusive(server: str, wav_path: Path, transcript) -> None:
    response = transcribe(server, wav_path, response_format="verbose_json", **{"timestamp_granularities[]": "word"})
    response.raise_for_status()
    answer = VerboseTranscription.model_validate(response.json())
    assert [w.word for w in answer.words or []] == [w.text.strip() for w in words_of(transcript)]
    assert "".join(s.text for s in answer.segments).strip() == answer.text
    assert [s.speaker for s in answer.segments] == [
        segment.speaker for segment in transcript.speakers for _ in segment.chunks
    ]


@pytest.mark.slow
def test_streamed_segments_are_the_diarized_json_segments(server: str, wav_path: Path, transcript) -> None:
    with transcribe(server, wav_path, stream=True, response_format="diarized_json") as response:
        response.raise_for_status()
        lines = [line for line in response.iter_lines(decode_unicode=True) if line and line.startswith("data: ")]
    events = [json.loads(line[len("data: ") :]) for line in lines]
    segments = [(e["speaker"], e["text"]) for e in events if e["type"] == "transcript.text.segment"]
    assert segments == [(s.speaker, s.text) for s in transcript.speakers]
    assert events[-1]["type"] == "transcript.text.done"


@pytest.mark.slow
def test_the_inference_endpoints_response_lists_the_turns(
    server: str, wav_path: Path, transcript, diarization: Diarization
) -> None:
    payload = {"inputs": base64.b64encode(wav_path.read_bytes()).decode("ascii"), "parameters": PARAMETERS}
    response = requests.post(f"{server}/", json=payload, timeout=300)
    response.raise_for_status()
    body = response.json()
    assert body["turns"] == [
        {"speaker": turn.speaker, "start": round(turn.start_s, 3), "end": round(turn.end_s, 3)}
        for turn in diarization.turns
    ]
    assert [s["speaker"] for s in body["speakers"]] == [s.speaker for s in transcript.speakers]

