"""The web page (GET /ui) in a real headless Chromium against a real server (whisper-tiny.en's
real weights, the built-in diarizer, an API key): the page asks for the key, shows the API's
errors as it gives them, uploads pyannote's sample.wav, shows the text as it streams, then one
lane per speaker and the words; a click on a word moves the audio there. A known voice added in
the page (a clean turn of the sample) names its speaker, with the similarity beside the name."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest
import requests

from benchmarks.common.scoring import rttm_speakers, rttm_turns
from tests.support.browser import Page, chromium
from tests.support.server import cpu_server, tiny_en_with_builtin_diarizer

pytestmark = pytest.mark.slow

API_KEY = "ui-key"
#: Set to a path to keep the page's screenshot (the README's is made this way).
SCREENSHOT_VARIABLE = "WHOSAID_UI_SCREENSHOT"


@pytest.fixture(scope="module")
def server(converted_model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with cpu_server(tmp_path_factory, "server-ui", tiny_en_with_builtin_diarizer(converted_model, API_KEY)) as url:
        yield url


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    with chromium(tmp_path / "profile", width=1100, height=1000) as page:
        yield page


def visible(selector: str) -> str:
    return f"(() => {{ const e = document.querySelector('{selector}'); return e !== null && !e.hidden; }})()"


def text_of(page: Page, selector: str) -> str:
    return page.evaluate(f"document.querySelector('{selector}').textContent")


def submit(page: Page, form: str) -> None:
    page.evaluate(f"document.querySelector('{form}').requestSubmit()")


def test_the_page_and_its_files_need_no_key_but_the_api_does(server: str) -> None:
    page = requests.get(f"{server}/ui", timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert 'data-auth="bearer"' in page.text
    script = requests.get(f"{server}/ui/viewer.js", timeout=10)
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    missing = requests.get(f"{server}/ui/secrets.txt", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    keyless = requests.post(f"{server}/v1/audio/transcriptions", files={"file": ("a.wav", b"x")}, timeout=10)
    assert keyless.status_code == 401


def test_who_said_what_in_the_browser(server: str, page: Page, sample_wav: Path, tmp_path: Path) -> None:
    page.open(f"{server}/ui")
    # The server wants a key: the page asks for it before anything else.
    page.wait_for(visible("#key-form"), timeout_s=10)
    assert page.evaluate("document.querySelector('#upload-form').hidden") is True

    # A wrong key: the API's 401 as it gave it, and the page asks again.
    page.type_into("#api-key", "wrong")
    submit(page, "#key-form")
    page.wait_for(visible("#upload-form"), timeout_s=10)
    page.set_files("#file", sample_wav)
    submit(page, "#upload-form")
    page.wait_for(visible("#error"), timeout_s=30)
    assert text_of(page, "#error") == "Error 401 (invalid_api_key): invalid API key"
    page.wait_for(visible("#key-form"), timeout_s=10)

    # The right key, an impossible speaker count: the 422 and its message, as the API gave them.
    page.type_into("#api-key", API_KEY)
    submit(page, "#key-form")
    page.wait_for(visible("#upload-form"), timeout_s=10)
    assert page.evaluate("document.querySelector('#error').hidden") is True
    page.type_into("#num-speakers", "101")
    submit(page, "#upload-form")
    page.wait_for(visible("#error"), timeout_s=60)
    error = text_of(page, "#error")
    assert error.startswith("Error 422 (invalid_parameters): "), error
    assert "num_speakers" in error

    # The sample, named in the page: the text streams in, then the speakers.
    page.type_into("#num-speakers", "")
    page.type_into("#names", "Ann, Bob")
    submit(page, "#upload-form")
    page.wait_for("document.querySelector('#live-text').textContent.length > 0", timeout_s=120, what="streamed text")
    page.wait_for(visible("#viewer"), timeout_s=180, what="the speakers")
    assert page.evaluate("document.querySelector('#error').hidden") is True
    assert page.evaluate("document.querySelectorAll('.lane').length") == 2
    labels = page.evaluate("[...document.querySelectorAll('.lane-label')].map(e => e.textContent)")
    assert labels == ["Ann", "Bob"]
    transcript = page.evaluate("document.querySelector('#transcript').textContent")
    assert "know you were there" in transcript
    view = page.evaluate("window.whosaidViewer.data")
    words = [word for segment in view["segments"] for word in segment["words"]]
    assert len(words) > 50
    assert "".join(word[0] for word in words).strip() == page.evaluate(
        "window.whosaidViewer.data.segments.map(s => s.words.map(w => w[0]).join('')).join('')"
    ).strip()

    # A click on a word plays from there: the audio's currentTime is the word's start.
    page.wait_for("document.querySelector('#audio').readyState >= 1", timeout_s=30, what="the audio's metadata")
    segments = view["segments"]
    segment = next(i for i in range(len(segments) // 2, len(segments)) if len(segments[i]["words"]) >= 2)
    target = f".w[data-s='{segment}'][data-w='1']"
    page.evaluate(f"document.querySelector(\".segment[data-index='{segment}']\").scrollIntoView()")
    page.wait_for(f"document.querySelector(\"{target}\") !== null", timeout_s=10, what="the word on screen")
    page.click(target)
    start_s = view["segments"][segment]["words"][1][1]
    page.wait_for(
        f"Math.abs(document.querySelector('#audio').currentTime - {start_s}) < 0.01", timeout_s=10, what="the seek"
    )
    assert page.evaluate("document.querySelector('.w.now').dataset.s") == str(segment)
    assert page.evaluate("document.querySelector('.w.now').dataset.w") == "1"

    # Renamed in place: the lanes, the transcript and the downloads follow.
    page.type_into(".speaker-name[data-for='SPEAKER_01']", "Bea")
    assert page.evaluate("[...document.querySelectorAll('.lane-label')].map(e => e.textContent)") == ["Ann", "Bea"]
    rttm = page.evaluate("fetch(document.querySelector('#downloads a[download$=\".rttm\"]').href).then(r => r.text())")
    assert rttm_speakers(rttm) == {"Ann", "Bea"}


def longest_clean_turn(rttm: Path) -> tuple[str, float, float]:
    """(speaker, start, end): the longest stretch of one speaker's turn where nobody else talks."""
    turns = [(speaker, start, end) for start, end, speaker in rttm_turns(rttm.read_text())]
    pieces = []
    for speaker, start, end in turns:
        others = sorted((s, e) for who, s, e in turns if who != speaker and s < end and start < e)
        cursor = start
        for other_start, other_end in others:
            if other_start > cursor:
                pieces.append((speaker, cursor, other_start))
            cursor = max(cursor, other_end)
        if cursor < end:
            pieces.append((speaker, cursor, end))
    return max(pieces, key=lambda piece: piece[2] - piece[1])


def test_a_known_voice_added_in_the_page_names_its_speaker(
    server: str, page: Page, sample_wav: Path, sample_audio, tmp_path: Path
) -> None:
    from tests.diarization.test_known_speakers import wav_bytes

    speaker, start_s, end_s = longest_clean_turn(sample_wav.with_name("sample.rttm"))
    assert (speaker, start_s, end_s) == ("speaker91", 21.78, 27.85)
    rate = sample_audio.sample_rate_hz
    clip = tmp_path / "speaker91.wav"
    clip.write_bytes(wav_bytes(sample_audio.samples[int(start_s * rate) : int(end_s * rate)]))
    short = tmp_path / "short.wav"
    short.write_bytes(wav_bytes(sample_audio.samples[int(start_s * rate) : int((start_s + 0.5) * rate)]))

    page.open(f"{server}/ui")
    page.wait_for(visible("#key-form"), timeout_s=10)
    page.type_into("#api-key", API_KEY)
    submit(page, "#key-form")
    page.wait_for(visible("#upload-form"), timeout_s=10)
    # The server can match voices (built-in diarizer) and has no library of its own.
    assert page.evaluate("document.querySelector('#voices').hidden") is False
    assert page.evaluate("document.querySelector('#library').hidden") is True
    page.set_files("#file", sample_wav)

    # A clip too short to describe a voice: the API's error, naming the speaker.
    page.set_files("#voice-file", short)
    assert page.evaluate("document.querySelector('.voice-name').value") == "short"
    submit(page, "#upload-form")
    page.wait_for(visible("#error"), timeout_s=60)
    assert text_of(page, "#error").startswith(
        "Error 400 (invalid_audio): known speaker 'short': the reference lasts 0.50 s; it needs at least 1 s"
    ), text_of(page, "#error")
    page.wait_for("!document.querySelector('#submit').disabled", timeout_s=30, what="the form back")
    page.click(".voice-list button")
    assert page.evaluate("document.querySelectorAll('.voice-list li').length") == 0

    # The clean turn as "Alice"; the Names field names the speaker no voice matched.
    page.set_files("#voice-file", clip)
    assert page.evaluate("document.querySelector('.voice-name').value") == "speaker91"
    page.type_into(".voice-name", "Alice")
    page.type_into("#names", "Bob")
    submit(page, "#upload-form")
    page.wait_for(visible("#viewer"), timeout_s=180, what="the speakers")
    assert page.evaluate("document.querySelector('#error').hidden") is True
    view = page.evaluate("window.whosaidViewer.data")
    assert [i["name"] for i in view["identities"]] == ["Alice"]
    similarity = view["identities"][0]["similarity"]
    assert similarity >= 0.5  # the threshold: below it nobody is named
    others = {segment["speaker"] for segment in view["segments"]} - {"Alice"}
    assert len(others) == 1 and others.pop().startswith("SPEAKER_"), view["segments"]
    # Every word of the enrolled turn is Alice's.
    inside = {s["speaker"] for s in view["segments"] for w in s["words"] if start_s + 0.5 <= w[1] <= end_s - 0.5}
    assert inside == {"Alice"}

    # Lanes in order of first speaking: Alice's shows the similarity, the other takes "Bob".
    labels = page.evaluate("[...document.querySelectorAll('.lane-label')].map(e => e.textContent)")
    alice = next(label for label in labels if label.startswith("Alice \u00b7 "))
    assert sorted(labels) == [alice, "Bob"], labels
    assert abs(float(alice.removeprefix("Alice \u00b7 ")) - similarity) <= 0.005
    shown = page.evaluate("[...document.querySelectorAll('#speakers .similarity')].map(e => e.textContent)")
    assert shown == [alice.removeprefix("Alice")]

    page.evaluate("window.scrollTo(0, 0)")
    screenshot = page.screenshot(tmp_path / "ui.png")
    assert screenshot.read_bytes().startswith(b"\x89PNG")
    if os.environ.get(SCREENSHOT_VARIABLE):
        shutil.copyfile(screenshot, os.environ[SCREENSHOT_VARIABLE])


def test_response_format_html_embeds_the_audio_on_request(server: str, sample_wav: Path) -> None:
    import base64
    import json

    import html5lib

    audio = sample_wav.read_bytes()
    response = requests.post(
        f"{server}/v1/audio/transcriptions",
        files={"file": ("sample.wav", audio, "audio/wav")},
        data={"response_format": "html", "html_audio": "embed"},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=300,
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    parser = html5lib.HTMLParser(strict=True)
    document = parser.parse(response.text)
    namespace = "{http://www.w3.org/1999/xhtml}"
    body = document.find(f"{namespace}body")
    assert base64.b64decode(body.get("data-audio").split(";base64,", 1)[1]) == audio
    data = next(s for s in document.iter(f"{namespace}script") if s.get("id") == "whosaid-data")
    view = json.loads(data.text)
    assert {segment["speaker"] for segment in view["segments"]} == {"SPEAKER_00", "SPEAKER_01"}
    assert "know you were there" in "".join(w[0] for segment in view["segments"] for w in segment["words"])


def test_the_cli_writes_the_page_from_a_remote_server(server: str, sample_wav: Path, tmp_path: Path) -> None:
    import html5lib

    from whosaid.cli.main import main

    audio = tmp_path / "calls" / "sample.wav"
    audio.parent.mkdir()
    audio.write_bytes(sample_wav.read_bytes())
    out = tmp_path / "out"
    argv = ["transcribe", "--url", server, "--api-key", API_KEY, "--no-progress", "-f", "html", "-o", str(out)]
    assert main([*argv, str(audio)]) == 0
    parser = html5lib.HTMLParser(strict=True)
    document = parser.parse((out / "sample.html").read_text(encoding="utf-8"))
    namespace = "{http://www.w3.org/1999/xhtml}"
    # The page links the audio by its path from the page, as a local -f html does.
    assert document.find(f"{namespace}body").get("data-audio") == "../calls/sample.wav"
    assert document.find(f"{namespace}head/{namespace}title").text == "sample"


def test_live_captions_from_the_microphone(server: str, sample_wav: Path, tmp_path: Path) -> None:
    """The microphone (Chromium's fake one, playing pyannote's sample) streamed to /v1/realtime:
    the turn's text and its speakers appear while the session runs, and the stopped session is
    the viewer's, with the captured audio and the downloads."""
    with chromium(tmp_path / "profile", width=1100, height=1000, microphone=sample_wav) as page:
        page.open(f"{server}/ui")
        page.wait_for(visible("#key-form"), timeout_s=10)
        page.type_into("#api-key", API_KEY)
        submit(page, "#key-form")
        page.wait_for(visible("#upload-form"), timeout_s=10)
        page.type_into("#language", "en")
        page.click("#live")
        page.wait_for("document.querySelector('#live').getAttribute('aria-pressed') === 'true'", timeout_s=10)
        # Turn by turn: the sample's first ("Hello."), then the long exchange that follows it.
        page.wait_for(visible("#viewer"), timeout_s=240, what="the first completed turn")
        page.wait_for(
            "document.querySelector('#transcript').textContent.includes('know you were there')",
            timeout_s=240,
            what="the second turn",
        )
        assert page.evaluate("document.querySelector('#error').hidden") is True
        live = page.evaluate("window.whosaidViewer.data")
        assert len(live["segments"]) >= 2 and all(segment["speaker"] for segment in live["segments"])

        page.click("#live")
        page.wait_for(
            "document.querySelector('#status').textContent.startsWith('Live session ended')",
            timeout_s=120,
            what="the session to end",
        )
        assert page.evaluate("document.querySelector('#live').getAttribute('aria-pressed')") == "false"
        view = page.evaluate("window.whosaidViewer.data")
        assert len(view["segments"]) >= len(live["segments"])
        assert view["duration"] > view["segments"][0]["end"]
        assert page.evaluate("document.querySelector('#audio').src").startswith("blob:")
        lanes = page.evaluate("[...document.querySelectorAll('.lane-label')].map(e => e.textContent)")
        assert lanes and all(label.startswith("SPEAKER_") for label in lanes)
        downloads = page.evaluate("[...document.querySelectorAll('#downloads a')].map(a => a.download)")
        assert downloads == ["live-captions.srt", "live-captions.vtt", "live-captions.rttm", "live-captions.json"]
        srt = page.evaluate("fetch(document.querySelector('#downloads a').href).then(r => r.text())")
        assert "know you were there" in srt
