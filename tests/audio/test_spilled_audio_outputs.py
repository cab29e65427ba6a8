"""Audio spilled to a temporary file (whosaid.audio.store) gives the same transcript, words and
speaker turns as the same audio held in memory: real meeting speech through whisper-tiny.en and
the built-in diarizer, and a real two-person conversation through the diarizer, every stage
reading windows, chunks and blocks from the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.audio_files import encode
from tests.support.engines import config
from whosaid.audio import store
from whosaid.audio.loading import Audio, load_audio, load_audio_file
from whosaid.speaker_hints import SpeakerHints

pytestmark = pytest.mark.slow

SHARED_CONVERSATIONS = Path(__file__).resolve().parents[3] / "shared" / "data" / "conversations"
# Two minutes of a real two-person conversation: the diarizer's long-recording step.
CONVERSATION = SHARED_CONVERSATIONS / "verbatim_beltz_schwierig1.wav"
AMI_DIR = Path(__file__).parents[1] / "data" / "ami"


@pytest.fixture(scope="module")
def engine(converted_model, make_engine):
    return make_engine(converted_model("whisper-tiny.en"), diarization="builtin")


def both_ways(data: bytes, monkeypatch) -> tuple[Audio, Audio]:
    """The same file decoded into memory and spilled to a temporary file."""
    in_memory = load_audio(data)
    with monkeypatch.context() as patched:
        patched.setattr(store, "SPILL_AFTER_S", 1.0)
        on_disk = load_audio(data)
    assert in_memory.spilled is None and on_disk.spilled is not None
    assert np.array_equal(on_disk.samples, in_memory.samples)
    return in_memory, on_disk


def test_a_meeting_spilled_gives_the_same_transcript_words_and_turns(engine, monkeypatch) -> None:
    # Four AMI snippets: two minutes of four-person meeting speech, five Whisper windows.
    snippets = [load_audio_file(path).samples for path in sorted(AMI_DIR.glob("ami_*.wav"))[:4]]
    in_memory, on_disk = both_ways(encode(np.concatenate(snippets), 16_000, "flac"), monkeypatch)
    request = config(language="en", return_timestamps="word")
    expected = engine.transcribe(in_memory, request)
    got = engine.transcribe(on_disk, request)
    assert len(expected.text.split()) > 100 and len({turn.speaker for turn in expected.turns}) > 1
    assert got.text == expected.text
    assert got.chunks == expected.chunks
    assert got.turns == expected.turns
    assert got.speakers == expected.speakers


@pytest.mark.skipif(not CONVERSATION.is_file(), reason="the shared real conversations are not on this machine")
def test_a_real_conversation_spilled_gives_the_same_turns(builtin_diarizer, monkeypatch) -> None:
    in_memory, on_disk = both_ways(CONVERSATION.read_bytes(), monkeypatch)
    expected = builtin_diarizer.diarize(in_memory, SpeakerHints())
    assert len({turn.speaker for turn in expected.turns}) > 1
    assert builtin_diarizer.diarize(on_disk, SpeakerHints()) == expected
