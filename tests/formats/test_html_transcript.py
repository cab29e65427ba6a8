"""The HTML transcript (`-f html`, `response_format=html`): valid HTML (html5lib, strict), every
word once and in order, overlapping speakers kept, text that looks like markup kept as text;
made by the CLI from pyannote's sample with real models, it opens from disk in a real browser
and plays its audio from the relative path it names."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import html5lib
import pytest

from tests.support.browser import chromium
from whosaid.cli.main import main
from whosaid.formats import RESPONSE_FORMATS, render
from whosaid.results import Chunk, SpeakerIdentity, SpeakerSegment, SpeakerTurn, Transcript, Word
from whosaid.ui.view import asset, audio_source, view_data

NAMESPACE = "{http://www.w3.org/1999/xhtml}"


def word(text: str, start_s: float, end_s: float) -> Word:
    return Word(text=text, start_s=start_s, end_s=end_s, probability=0.9)


def chunk(*words: Word) -> Chunk:
    return Chunk(words[0].start_s, words[-1].end_s, "".join(w.text for w in words), words)


def diarized(second_speaker: str = "SPEAKER_01") -> Transcript:
    """Two speakers who talk at once from 1.4 s to 2.2 s; text that looks like markup."""
    first = chunk(word(" Hello", 0.0, 0.5), word(" </script><b>", 0.6, 1.0), word(" there.", 1.1, 2.0))
    second = chunk(word(" Oh", 1.5, 1.8), word(" &amp;", 1.9, 2.0), word(" {{title}}", 2.1, 2.4))
    third = chunk(word(" Right\u2028now.", 3.2, 3.6))
    return Transcript(
        text=(first.text + second.text + third.text).strip(),
        chunks=(first, second, third),
        duration_s=4.0,
        language="en",
        speakers=(
            SpeakerSegment("SPEAKER_00", first.start_s, first.end_s, first.text.strip(), (first,)),
            SpeakerSegment(second_speaker, second.start_s, second.end_s, second.text.strip(), (second,)),
            SpeakerSegment("SPEAKER_00", third.start_s, third.end_s, third.text.strip(), (third,)),
        ),
        turns=(
            SpeakerTurn(0.0, 2.2, "SPEAKER_00"),
            SpeakerTurn(1.4, 2.5, second_speaker),
            SpeakerTurn(3.1, 3.7, "SPEAKER_00"),
        ),
        diarized=True,
        word_timestamps=True,
    )


def parse_strictly(html: str) -> Any:
    parser = html5lib.HTMLParser(strict=True)  # raises at the first parse error
    document = parser.parse(html)
    assert parser.errors == []
    return document


def embedded_view(document: Any) -> dict[str, Any]:
    scripts = [s for s in document.iter(f"{NAMESPACE}script") if s.get("id") == "whosaid-data"]
    assert len(scripts) == 1
    return json.loads(scripts[0].text)


def test_the_html_transcript_is_valid_and_holds_every_word_once_in_order() -> None:
    transcript = diarized()
    html = render(transcript, "html", file_id="call <1> & \"2\"", audio_src=audio_source(b"", "a b#1.wav", "link"))
    document = parse_strictly(html)

    title = document.find(f"{NAMESPACE}head/{NAMESPACE}title")
    assert title.text == 'call <1> & "2"'
    body = document.find(f"{NAMESPACE}body")
    assert body.get("data-audio") == "a%20b%231.wav"
    assert body.get("data-mode") == "file"

    view = embedded_view(document)
    words = [w for segment in view["segments"] for w in segment["words"]]
    expected = [w for c in transcript.chunks for w in c.words]
    assert [w[0] for w in words] == [w.text for w in expected]
    assert [(w[1], w[2]) for w in words] == [(w.start_s, w.end_s) for w in expected]
    assert "".join(w[0] for w in words).strip() == transcript.text
    assert [s["speaker"] for s in view["segments"]] == ["SPEAKER_00", "SPEAKER_01", "SPEAKER_00"]
    # The turns as the diarizer found them, overlap included (the lanes show it).
    assert view["turns"] == [
        {"speaker": "SPEAKER_00", "start": 0.0, "end": 2.2},
        {"speaker": "SPEAKER_01", "start": 1.4, "end": 2.5},
        {"speaker": "SPEAKER_00", "start": 3.1, "end": 3.7},
    ]
    # Markup in the words stays inside the JSON: no element was made of it.
    assert not list(document.iter(f"{NAMESPACE}b"))


def test_speakers_matched_to_known_voices_carry_their_similarity() -> None:
    identities = (
        SpeakerIdentity(speaker="Alice", diarized_as="SPEAKER_01", name="Alice", similarity=0.7132),
        SpeakerIdentity(speaker="SPEAKER_00", diarized_as="SPEAKER_00", name=None, similarity=0.1204),
    )
    transcript = replace(diarized(second_speaker="Alice"), speaker_identities=identities)
    view = embedded_view(parse_strictly(render(transcript, "html")))
    # Only the matched speaker: the viewer shows "Alice · 0.71" in its lane and speaker list.
    assert view["identities"] == [{"speaker": "Alice", "name": "Alice", "similarity": 0.7132}]
    assert [s["speaker"] for s in view["segments"]] == ["SPEAKER_00", "Alice", "SPEAKER_00"]
    assert view_data(diarized())["identities"] == []
    assert "data.identities" in asset("viewer.js")


def test_a_transcript_without_speakers_is_one_segment_per_chunk() -> None:
    transcript = Transcript(
        text="Hello there. Bye.",
        chunks=(Chunk(0.0, 1.0, " Hello there."), Chunk(1.5, 2.0, " Bye.")),
        duration_s=2.5,
    )
    view = view_data(transcript)
    assert view["turns"] == []
    assert view["segments"] == [
        {"speaker": None, "start": 0.0, "end": 1.0, "words": [[" Hello there.", 0.0, 1.0]]},
        {"speaker": None, "start": 1.5, "end": 2.0, "words": [[" Bye.", 1.5, 2.0]]},
    ]
    document = parse_strictly(render(transcript, "html", audio_src=None))
    assert document.find(f"{NAMESPACE}body").get("data-audio") == ""


def test_silence_gives_a_valid_empty_page() -> None:
    document = parse_strictly(render(Transcript(text="", chunks=(), duration_s=3.0), "html"))
    assert embedded_view(document)["segments"] == []


def test_embedded_audio_is_a_data_url_of_the_file() -> None:
    source = audio_source(b"RIFF1234", "x.wav", "embed")
    media_type, encoded = source.removeprefix("data:").split(";base64,")
    assert media_type in {"audio/wav", "audio/x-wav"}
    assert base64.b64decode(encoded) == b"RIFF1234"


def test_the_viewer_script_can_be_inlined() -> None:
    # html_transcript inlines viewer.js as it is: "</" would end its <script> element.
    assert "</" not in asset("viewer.js") and "<!--" not in asset("viewer.js")
    assert "html" in RESPONSE_FORMATS


@pytest.mark.slow
def test_the_cli_writes_a_page_that_opens_from_disk(converted_model, sample_wav: Path, tmp_path: Path) -> None:
    audio_dir = tmp_path / "calls"
    audio_dir.mkdir()
    audio = audio_dir / "sample call.wav"
    audio.write_bytes(sample_wav.read_bytes())
    out = tmp_path / "out"
    argv = [
        "transcribe", str(audio), "-f", "html", "-o", str(out), "--no-progress",
        "--asr-model", str(converted_model("whisper-tiny.en")), "--diarization-model", "builtin",
    ]
    assert main(argv) == 0
    page_path = out / "sample call.html"
    document = parse_strictly(page_path.read_text(encoding="utf-8"))
    assert document.find(f"{NAMESPACE}body").get("data-audio") == "../calls/sample%20call.wav"
    view = embedded_view(document)
    assert {s["speaker"] for s in view["segments"]} == {"SPEAKER_00", "SPEAKER_01"}
    words = [w for segment in view["segments"] for w in segment["words"]]
    starts = [w[1] for w in words]
    assert starts == sorted(starts) and len(words) > 50
    assert "know you were there" in "".join(w[0] for w in words)

    # No server: the file from disk, its audio found by the relative path.
    with chromium(tmp_path / "profile") as page:
        page.open(page_path.as_uri())
        page.wait_for("document.querySelectorAll('.lane').length === 2", timeout_s=10, what="two lanes")
        page.wait_for("document.querySelector('#audio').readyState >= 1", timeout_s=20, what="the linked audio")
        assert page.evaluate("document.querySelector('#audio').duration") == pytest.approx(view["duration"], abs=0.05)
        segment = next(index for index, s in enumerate(view["segments"]) if len(s["words"]) >= 3)
        target = f".w[data-s='{segment}'][data-w='2']"
        page.wait_for(f"document.querySelector(\"{target}\") !== null", timeout_s=10, what="the word")
        page.click(target)
        start_s = view["segments"][segment]["words"][2][1]
        page.wait_for(f"Math.abs(document.querySelector('#audio').currentTime - {start_s}) < 0.01", timeout_s=10)
        # The keyboard: a speaker's turn is a button; Enter on it plays from its start.
        speaker = page.evaluate("document.querySelectorAll('.lane-label')[1].textContent")
        turn = next(t for t in view["turns"] if t["speaker"] == speaker)
        page.evaluate("document.querySelectorAll('.lane')[1].querySelector('.turn').focus()")
        page.press_enter()
        page.wait_for(
            f"Math.abs(document.querySelector('#audio').currentTime - {turn['start']}) < 0.01", timeout_s=10,
            what="the seek by keyboard",
        )
        shown = page.evaluate("[...document.querySelectorAll('#transcript .text')].map(e => e.textContent).join(' ')")
        assert shown.split() == "".join(w[0] for w in words).split()
