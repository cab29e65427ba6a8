"""A Transcript in the output formats every edge offers: plain text, SubRip, WebVTT, RTTM, the
JSON shapes of OpenAI's audio API (json, verbose_json, diarized_json), and an HTML page that
shows who spoke when (whosaid.ui).

`FORMATS` is the one table of them: a row per format says how it is rendered and what the edges
need to know about it (media type, the CLI's file suffix, whether it needs speakers or word
timestamps, whether stream=true can carry it, what its file holds when that is another route's
answer). The OpenAI routes, streaming, the CLI, batch and the remote client all read it, so a new
format is a new row (and its renderer); `check_format` and `parameters_for` say, once for every
edge, what a format needs of the engine.

Pure functions on the core's typed result, shared by the server and the CLI. The JSON shapes are
pydantic models so that the server can declare them as response models and tests can parse
responses with the very classes that produced them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Optional, Union

from pydantic import BaseModel, Field

from whosaid.errors import InvalidParametersError
from whosaid.results import Chunk, Transcript, identity_json, sorted_turns, to_transcript_json
from whosaid.transcript_json import Channel, SpeakerIdentityModel, TranscriptResponse, is_none

Task = Literal["transcribe", "translate"]
JSON_MEDIA_TYPE = "application/json"
#: RTTM's file-id column cannot hold whitespace.
_RTTM_UNSAFE = re.compile(r"\s+")


@dataclass(frozen=True)
class Rendering:
    """What a renderer may use besides the transcript."""

    task: Task = "transcribe"
    #: The audio's name without its suffix: RTTM's file id, the html page's title.
    file_id: str = "audio"
    #: The audio a page plays (whosaid.ui.view.audio_source); None: no player.
    audio_src: Optional[str] = None


@dataclass(frozen=True)
class FileOutput:
    """What a file of a format holds when it is not what the OpenAI routes answer under that
    name: another route's JSON answer (`-f json` in the CLI is the full transcript, as POST /
    answers, where the routes' `json` is OpenAI's small JsonTranscription)."""

    #: The model the file holds: the other route's response model.
    json_model: type[BaseModel]
    #: Fills it from a transcript.
    build: Callable[[Transcript], BaseModel]
    #: Where a remote client (`--url`) asks for it: POST {"inputs": <base64 audio>, "parameters": {...}}.
    route: str


@dataclass(frozen=True)
class OutputFormat:
    """One output format and what every edge needs to know about it."""

    name: str
    #: A string for text formats, the `json_model` instance for JSON ones.
    render: Callable[[Transcript, Rendering], Union[str, BaseModel]]
    #: The Content-Type the OpenAI routes answer with.
    media_type: str
    #: What the CLI appends to the audio file's stem (`-o DIR`).
    suffix: str
    #: JSON formats: the pydantic model rendered (the routes' response model); None: text.
    json_model: Optional[type[BaseModel]] = None
    #: Says who spoke: needs a diarization model, refused up front without one.
    needs_speakers: bool = False
    #: Shows every word with its times: the request asks for word timestamps.
    needs_words: bool = False
    #: Lists the words with their times when timestamp_granularities[]=word asks for them.
    words_on_request: bool = False
    #: stream=true can carry it (its events hold the text; with `needs_speakers`, the segments).
    streamable: bool = False
    #: Plays the audio: edges pass `Rendering.audio_src` (the client sends `html_audio`).
    plays_audio: bool = False
    #: Offered by /v1/audio/translations too, not only /transcriptions.
    translatable: bool = True
    #: What a file of this format holds (`whosaid transcribe -f`, `whosaid batch`, `--url`) when
    #: it is not `render`'s answer; None: the file is what the routes answer.
    file_output: Optional[FileOutput] = None

    @property
    def is_json(self) -> bool:
        return self.json_model is not None

    def file_text(self, transcript: Transcript, rendering: Rendering) -> str:
        """What a file of this format holds (`whosaid transcribe`, `whosaid batch`): `file_output`'s
        JSON as its route sends it (Python's json, as Starlette's JSONResponse writes it), else the
        routes' answer; JSON indented."""
        if self.file_output is not None:
            answer = self.file_output.build(transcript).model_dump(mode="json")
            return json.dumps(answer, ensure_ascii=False, indent=2) + "\n"
        rendered = self.render(transcript, rendering)
        if isinstance(rendered, str):
            return rendered
        return rendered.model_dump_json(indent=2) + "\n"


class DurationUsage(BaseModel):
    """What the request consumed, as OpenAI reports it for models billed by audio duration."""

    type: Literal["duration"] = "duration"
    seconds: float = Field(description="duration of the input audio in seconds")


class JsonTranscription(BaseModel):
    """`response_format=json`: OpenAI's `Transcription` (and `Translation`)."""

    text: str
    usage: DurationUsage
    warnings: Optional[list[str]] = Field(
        default=None, exclude_if=is_none, description="parameters that were ignored, if any"
    )


class VerboseSegment(BaseModel):
    """A timed piece of the transcript. Whisper's per-segment decoding statistics (avg_logprob,
    no_speech_prob, tokens) are not reported: the pipeline does not return them."""

    id: int
    start: float = Field(description="seconds from the start of the audio")
    end: float = Field(description="seconds from the start of the audio")
    text: str
    speaker: Optional[str] = Field(
        default=None, exclude_if=is_none, description="who said it, when a diarization model ran"
    )
    channel: Channel = None


class VerboseWord(BaseModel):
    """OpenAI's `TranscriptionWord`: a word without its leading space, with its times."""

    word: str
    start: float = Field(description="seconds from the start of the audio")
    end: float = Field(description="seconds from the start of the audio")


class VerboseTranscription(BaseModel):
    """`response_format=verbose_json`: OpenAI's `TranscriptionVerbose` / `TranslationVerbose`."""

    task: Task
    language: Optional[str] = Field(
        description="language of the text, by name ('english'); null when it could not be "
        "determined (silence on a multilingual model without a language parameter)"
    )
    duration: float = Field(description="duration of the input audio in seconds")
    text: str
    segments: list[VerboseSegment]
    words: Optional[list[VerboseWord]] = Field(
        default=None, exclude_if=is_none, description="with timestamp_granularities[]=word"
    )
    usage: DurationUsage
    speaker_identities: Optional[list[SpeakerIdentityModel]] = Field(
        default=None, exclude_if=is_none, description="with known speakers or include[]=speaker_embeddings"
    )
    warnings: Optional[list[str]] = Field(default=None, exclude_if=is_none)


class DiarizedSegment(BaseModel):
    """OpenAI's `TranscriptionDiarizedSegment`. Speaker labels are the diarization model's own
    (SPEAKER_00, ...), the same labels the other formats and RTTM carry."""

    type: Literal["transcript.text.segment"] = "transcript.text.segment"
    id: str
    start: float
    end: float
    text: str
    speaker: str
    channel: Channel = None


class DiarizedTranscription(BaseModel):
    """`response_format=diarized_json`: OpenAI's `TranscriptionDiarized`."""

    task: Literal["transcribe"] = "transcribe"
    duration: float
    text: str
    segments: list[DiarizedSegment]
    usage: DurationUsage
    speaker_identities: Optional[list[SpeakerIdentityModel]] = Field(
        default=None, exclude_if=is_none, description="with known speakers or include[]=speaker_embeddings"
    )
    warnings: Optional[list[str]] = Field(default=None, exclude_if=is_none)


def _html(transcript: Transcript, rendering: Rendering) -> str:
    from whosaid.ui.view import html_transcript

    return html_transcript(transcript, title=rendering.file_id, audio_src=rendering.audio_src)


#: Every output format, in the order the OpenAI routes list them (OpenAI's, then RTTM and html).
FORMATS: dict[str, OutputFormat] = {
    row.name: row
    for row in (
        OutputFormat(
            "json",
            lambda transcript, _: to_json(transcript),
            media_type=JSON_MEDIA_TYPE,
            suffix=".json",
            json_model=JsonTranscription,
            streamable=True,
            file_output=FileOutput(TranscriptResponse, to_transcript_json, route="/"),
        ),
        OutputFormat(
            "text", lambda transcript, _: to_text(transcript), media_type="text/plain", suffix=".txt", streamable=True
        ),
        OutputFormat("srt", lambda transcript, _: to_srt(transcript), media_type="application/x-subrip", suffix=".srt"),
        OutputFormat("vtt", lambda transcript, _: to_vtt(transcript), media_type="text/vtt", suffix=".vtt"),
        OutputFormat(
            "verbose_json",
            lambda transcript, rendering: to_verbose_json(transcript, task=rendering.task),
            media_type=JSON_MEDIA_TYPE,
            suffix=".verbose.json",
            json_model=VerboseTranscription,
            words_on_request=True,
        ),
        OutputFormat(
            "diarized_json",
            lambda transcript, _: to_diarized_json(transcript),
            media_type=JSON_MEDIA_TYPE,
            suffix=".diarized.json",
            json_model=DiarizedTranscription,
            needs_speakers=True,
            streamable=True,
            translatable=False,  # OpenAI's TranscriptionDiarized: its task is always "transcribe"
        ),
        OutputFormat(
            "rttm",
            lambda transcript, rendering: to_rttm(transcript, file_id=rendering.file_id),
            media_type="text/plain",
            suffix=".rttm",
            needs_speakers=True,
        ),
        OutputFormat(
            "html", _html, media_type="text/html", suffix=".html", needs_words=True, plays_audio=True
        ),
    )
}
RESPONSE_FORMATS: tuple[str, ...] = tuple(FORMATS)
#: The formats' names as a type: the routes' form validates `response_format` against it.
ResponseFormat = Literal[RESPONSE_FORMATS]  # type: ignore[valid-type]


def json_models(task: Task = "transcribe") -> Any:
    """The models of the JSON formats `task`'s route offers, as one Union (its response model)."""
    offered = [row for row in FORMATS.values() if row.translatable or task != "translate"]
    return Union[tuple(row.json_model for row in offered if row.json_model)]


def output_format(name: str) -> OutputFormat:
    """The row of `name`; ValueError for a name that is none of `FORMATS`."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown response format {name!r}; one of {', '.join(RESPONSE_FORMATS)}") from None


def check_format(
    name: str, *, has_diarizer: Callable[[], bool], option: str = "response_format=", hint: str = ""
) -> OutputFormat:
    """The row of `name`, once it is known that this edge can produce it: a format that says who
    spoke needs a diarization model, refused up front without one (InvalidParametersError
    `{option}{name} needs a diarization model{hint}`: each edge names the option and says how to
    load one its own way). `has_diarizer` is asked only for such a format (the server's models
    may still be loading). ValueError for an unknown name."""
    row = output_format(name)
    if row.needs_speakers and not has_diarizer():
        raise InvalidParametersError(f"{option}{name} needs a diarization model{hint}")
    return row


def parameters_for(name: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The request parameters with what format `name` needs of the core added: word timestamps
    for a format that shows every word with its times."""
    if output_format(name).needs_words:
        return {**parameters, "return_timestamps": "word"}
    return dict(parameters)


def render(
    transcript: Transcript,
    response_format: str,
    *,
    task: Task = "transcribe",
    file_id: str = "audio",
    audio_src: Optional[str] = None,
) -> Union[str, BaseModel]:
    """The transcript in `response_format`: a string for the text formats, a model for JSON.
    `audio_src`: for a format that plays the audio (html), what it plays; None: no player."""
    return output_format(response_format).render(transcript, Rendering(task, file_id, audio_src))


def to_text(transcript: Transcript) -> str:
    # Newline-terminated like OpenAI's text responses, so that shells print it cleanly.
    return transcript.text + "\n"


def to_json(transcript: Transcript) -> JsonTranscription:
    return JsonTranscription(
        text=transcript.text, usage=_usage(transcript), warnings=_warnings(transcript)
    )


def to_verbose_json(transcript: Transcript, *, task: Task = "transcribe") -> VerboseTranscription:
    segments = [
        VerboseSegment(
            id=index,
            start=_seconds(chunk.start_s),
            end=_seconds(chunk.end_s),
            text=chunk.text,
            speaker=speaker,
            channel=chunk.channel,
        )
        for index, (chunk, speaker) in enumerate(_chunks_with_speakers(transcript))
    ]
    # A translation's text is English whatever was spoken (OpenAI reports it that way too).
    language = "english" if task == "translate" else language_name(transcript.language)
    words = None
    if transcript.word_timestamps:
        words = [
            VerboseWord(word=word.text.strip(), start=_seconds(word.start_s), end=_seconds(word.end_s))
            for chunk in transcript.chunks
            for word in chunk.words
        ]
    return VerboseTranscription(
        task=task,
        language=language,
        duration=_seconds(transcript.duration_s),
        text=transcript.text,
        segments=segments,
        words=words,
        usage=_usage(transcript),
        speaker_identities=_identities(transcript),
        warnings=_warnings(transcript),
    )


def to_diarized_json(transcript: Transcript) -> DiarizedTranscription:
    """The transcript's speaker segments: every word in exactly one segment, in order, even where
    the diarizer heard two speakers at once (overlap shows in RTTM and POST /'s `turns`)."""
    _require_diarized(transcript, "diarized_json")
    segments = [
        DiarizedSegment(
            id=f"seg_{index}",
            start=_seconds(segment.start_s),
            end=_seconds(segment.end_s),
            text=segment.text,
            speaker=segment.speaker,
            channel=segment.channel,
        )
        for index, segment in enumerate(transcript.speakers)
    ]
    return DiarizedTranscription(
        duration=_seconds(transcript.duration_s),
        text=transcript.text,
        segments=segments,
        usage=_usage(transcript),
        speaker_identities=_identities(transcript),
        warnings=_warnings(transcript),
    )


def to_srt(transcript: Transcript) -> str:
    """SubRip: numbered cues, comma before the milliseconds. Diarized cues start with the
    speaker's label."""
    cues = []
    for number, (chunk, speaker) in enumerate(_chunks_with_speakers(transcript), start=1):
        text = _one_line(chunk.text)
        if speaker is not None:
            text = f"{speaker}: {text}"
        start, end = _clock(chunk.start_s, ","), _clock(chunk.end_s, ",")
        cues.append(f"{number}\n{start} --> {end}\n{text}\n")
    return "\n".join(cues)


def to_vtt(transcript: Transcript) -> str:
    """WebVTT: diarized cues carry the speaker as a voice span (`<v SPEAKER_00>`), which players
    display as the speaker's name."""
    cues = ["WEBVTT\n"]
    for chunk, speaker in _chunks_with_speakers(transcript):
        text = _escape_vtt(_one_line(chunk.text))
        if speaker is not None:
            text = f"<v {_escape_vtt(speaker)}>{text}"
        cues.append(f"{_clock(chunk.start_s, '.')} --> {_clock(chunk.end_s, '.')}\n{text}\n")
    return "\n".join(cues)


def to_rttm(transcript: Transcript, *, file_id: str = "audio") -> str:
    """RTTM: one SPEAKER line per diarizer turn (the turns, not the transcript: RTTM scores
    diarization against a reference, e.g. pyannote's sample.rttm). Overlapping turns stay as
    they are, each on its own line, as RTTM references mark overlapped speech; lines are sorted
    by start, then end, then speaker."""
    _require_diarized(transcript, "rttm")
    uri = _RTTM_UNSAFE.sub("_", file_id.strip()) or "audio"
    return "".join(
        f"SPEAKER {uri} 1 {turn.start_s:.3f} {turn.end_s - turn.start_s:.3f} <NA> <NA> {turn.speaker} <NA> <NA>\n"
        for turn in sorted_turns(transcript.turns)
    )


def language_name(code: Optional[str]) -> Optional[str]:
    """Whisper's language code as OpenAI's verbose_json names it ('en' -> 'english')."""
    if code is None:
        return None
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return LANGUAGES.get(code, code)


def _chunks_with_speakers(transcript: Transcript) -> list[tuple[Chunk, Optional[str]]]:
    if transcript.speakers:
        return [(chunk, segment.speaker) for segment in transcript.speakers for chunk in segment.chunks]
    return [(chunk, None) for chunk in transcript.chunks]


def _require_diarized(transcript: Transcript, response_format: str) -> None:
    if not transcript.diarized:
        raise ValueError(f"response_format={response_format} needs a transcript made with a diarization model")


def _usage(transcript: Transcript) -> DurationUsage:
    return DurationUsage(seconds=_seconds(transcript.duration_s))


def _identities(transcript: Transcript) -> Optional[list[SpeakerIdentityModel]]:
    if not transcript.speaker_identities:
        return None
    return [identity_json(identity) for identity in transcript.speaker_identities]


def _warnings(transcript: Transcript) -> Optional[list[str]]:
    return list(transcript.warnings) or None


def _seconds(value_s: float) -> float:
    # Millisecond precision, as POST /'s answer (to_transcript_json) rounds its timestamps.
    return round(value_s, 3)


def _clock(seconds: float, decimal_separator: str) -> str:
    total_ms = max(0, round(seconds * 1000))
    hours, rest_ms = divmod(total_ms, 3_600_000)
    minutes, rest_ms = divmod(rest_ms, 60_000)
    whole_s, ms = divmod(rest_ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{whole_s:02d}{decimal_separator}{ms:03d}"


def _one_line(text: str) -> str:
    # A blank line ends a subtitle cue, so a cue's text keeps no line breaks of its own.
    return " ".join(text.split())


def _escape_vtt(text: str) -> str:
    # A cue's text is markup: '<' and '&' must be escaped, and "-->" would end the cue timing.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
