"""One viewer of a transcript, two ways to open it: the server's web page (`GET /ui`) and the
self-contained HTML file (`whosaid transcribe -f html`, `response_format=html`).

Both are `page.html` with the same `viewer.css` and `viewer.js`; the page adds `app.js` (upload,
record, the streamed text) and links the files, the offline file inlines them and embeds the
transcript as JSON (`view_data`), so there is a single renderer, in the browser, for both.
No framework, no build step, nothing fetched from elsewhere.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import re
from functools import cache
from importlib import resources
from typing import Any, Literal, Optional
from urllib.parse import quote

from whosaid.results import Transcript, sorted_turns

#: The files GET /ui/<name> serves, with their media types.
ASSETS = {
    "viewer.css": "text/css; charset=utf-8",
    "viewer.js": "text/javascript; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
}
#: How an HTML transcript reaches its audio: embedded as a data URL, or a relative path beside it.
HtmlAudio = Literal["embed", "link"]
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@cache
def asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def view_data(transcript: Transcript) -> dict[str, Any]:
    """What the viewer draws: the overlapping turns (one lane per speaker) and the transcript by
    speaker, each segment's words as [text, start, end] (the text keeps its leading space, so
    the words join into the transcript). Every word is in exactly one segment, in order. Without
    word times a chunk is one "word"; without a diarizer the speaker is null. `identities`: the
    speakers matched to known voices (known speakers), each with the voice's name and similarity."""
    if transcript.speakers:
        pieces = [(segment.speaker, segment.chunks) for segment in transcript.speakers]
    else:
        pieces = [(None, (chunk,)) for chunk in transcript.chunks]
    segments = []
    for speaker, chunks in pieces:
        words = []
        for chunk in chunks:
            if chunk.words:
                words.extend([word.text, _s(word.start_s), _s(word.end_s)] for word in chunk.words)
            elif chunk.text:
                words.append([chunk.text, _s(chunk.start_s), _s(chunk.end_s)])
        if words:
            segments.append({"speaker": speaker, "start": words[0][1], "end": words[-1][2], "words": words})
    return {
        "duration": _s(transcript.duration_s),
        "language": transcript.language,
        "turns": [turn.to_dict() for turn in sorted_turns(transcript.turns)],
        "segments": segments,
        "identities": [
            {"speaker": i.speaker, "name": i.name, "similarity": i.similarity}
            for i in transcript.speaker_identities
            if i.name is not None
        ],
        "warnings": list(transcript.warnings),
    }


def page(*, api_key_required: bool) -> str:
    """The server's page (GET /ui): the form, the viewer, and the scripts as /ui/ files."""
    return _fill(
        title="whosaid",
        style='<link rel="stylesheet" href="/ui/viewer.css">',
        scripts='<script src="/ui/viewer.js"></script>\n<script src="/ui/app.js"></script>',
        mode="live",
        auth="bearer" if api_key_required else "none",
        data="",
        audio_src="",
    )


def html_transcript(transcript: Transcript, *, title: str, audio_src: Optional[str]) -> str:
    """The transcript as one HTML file that opens from disk: styles and script inlined, the
    transcript embedded; `audio_src` (a relative path or a data URL, see `audio_source`) plays
    beside it, or no player when None."""
    return _fill(
        title=title,
        style=f"<style>\n{asset('viewer.css')}</style>",
        # viewer.js holds no "</" (tested), so it can be inlined as it is.
        scripts=f"<script>\n{asset('viewer.js')}</script>",
        mode="file",
        auth="none",
        data=f'<script type="application/json" id="whosaid-data">{_json_in_script(view_data(transcript))}</script>',
        audio_src=audio_src or "",
    )


def audio_source(audio: bytes, filename: str, how: HtmlAudio) -> str:
    """`link`: `filename`, a path relative to the HTML file ('/'-separated), as a URL; `embed`: a
    data URL of the bytes."""
    if how == "link":
        return quote(filename)
    media_type = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    return f"data:{media_type};base64,{base64.b64encode(audio).decode('ascii')}"


def _fill(*, style: str, scripts: str, data: str, **attributes: str) -> str:
    """page.html with its placeholders filled: markup as given, the other values escaped."""
    text = asset("page.html")
    values = {"style": style, "scripts": scripts, "data": data}
    values.update({name: _attribute(value) for name, value in attributes.items()})
    # One pass: a transcript that says "{{title}}" stays as it was said.
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], text)


def _attribute(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def _json_in_script(data: Any) -> str:
    # Inside <script>, "</script" or "<!--" in a transcript would end or change the element:
    # every "<" (only ever inside a JSON string) is written as its escape.
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def _s(value_s: float) -> float:
    return round(value_s, 3)
