"""POST /v1/audio/transcriptions and /v1/audio/translations: OpenAI's audio API, so that the
openai SDK (and tools built on it) can use this server by changing `base_url`.

Multipart form as OpenAI takes it. `model` is accepted and ignored (the server runs the models it
loaded). `prompt` conditions the first window (the handler's `initial_prompt`);
`timestamp_granularities[]=word` adds OpenAI's `words` to verbose_json. Sampling
temperatures are not supported: they are accepted and reported as warnings rather than refused,
so that existing clients keep working.
Speaker-count hints (num_speakers, min_speakers, max_speakers) and POST /'s batch_size,
chunk_length_s and assisted are extra form fields.
`stream=true` answers with server-sent events (whosaid.server.streaming).
Known speakers come as OpenAI's `known_speaker_names[]` + `known_speaker_references[]` (data URLs,
in the same order; with or without the brackets); `include[]=speaker_embeddings` lists each
diarized speaker's embedding in verbose_json and diarized_json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from fastapi import APIRouter, Depends, Form, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field, create_model

from whosaid.config import request_options
from whosaid.errors import InvalidParametersError
from whosaid.formats import (
    FORMATS,
    OutputFormat,
    Rendering,
    ResponseFormat,
    Task,
    check_format,
    json_models,
    parameters_for,
)
from whosaid.server.auth import require_api_key
from whosaid.server.dependencies import get_service
from whosaid.server.errors import ERROR_RESPONSES, ApiError
from whosaid.server.service import TranscriptionService
from whosaid.server.streaming import STREAMABLE, stream_transcription
from whosaid.ui.view import HtmlAudio, audio_source

router = APIRouter(prefix="/v1/audio", tags=["OpenAI-compatible"], dependencies=[Depends(require_api_key)])

#: How the server says to load a diarization model, after "response_format=NAME needs a diarization model".
_DIARIZER_HINT = ": start the server with DIARIZATION_MODEL set (and HF_TOKEN for gated pyannote models)"
_WORDS_ON_REQUEST = " or ".join(row.name for row in FORMATS.values() if row.words_on_request)
_JSON_NAMES = [row.name for row in FORMATS.values() if row.is_json]
_TEXT_ROWS = [row for row in FORMATS.values() if not row.is_json]
_TEXT_RESPONSES = {
    "description": f"{', '.join(_JSON_NAMES)} as JSON; "
    + ", ".join(f"{row.name} as {row.media_type}" for row in _TEXT_ROWS)
    + "; with stream=true, server-sent events (transcript.text.delta, transcript.text.segment, transcript.text.done)",
    "content": {
        media_type: {"schema": {"type": "string"}}
        for media_type in sorted({*(row.media_type for row in _TEXT_ROWS), "text/event-stream"})
    },
}


def _format_notes() -> str:
    """`response_format`'s description, from the table."""
    names = [row.name + (" (plays the audio)" if row.plays_audio else "") for row in FORMATS.values()]
    needing_speakers = [row.name for row in FORMATS.values() if row.needs_speakers]
    return f"{', '.join(names)}; {' and '.join(needing_speakers)} need a diarization model"


def _form_list(alias: str, description: str) -> Any:
    """A repeated form field: every value sent under `alias`, in order; empty when none is."""
    return Field(default_factory=list, alias=alias, description=description)


class _OpenAIForm(BaseModel):
    """OpenAI's own fields of the multipart form (and the known-speaker and `include[]` lists);
    `AudioForm` adds the request options (whosaid.config.request_options)."""

    file: UploadFile = Field(description="the audio file: wav, flac, mp3, ogg/opus, m4a, webm")
    model: Optional[str] = Field(default=None, description="accepted and ignored")
    response_format: ResponseFormat = Field(
        default="json",
        description=_format_notes(),
    )
    html_audio: HtmlAudio = Field(
        default="link",
        description="html only: 'link' plays the file by its name, beside the saved page; "
        "'embed' puts the audio inside",
    )
    temperature: float = Field(
        default=0.0, ge=0, le=1, description="decoding is deterministic: other values are ignored with a warning"
    )
    timestamp_granularities: list[Literal["word", "segment"]] = _form_list(
        "timestamp_granularities[]",
        "segment timestamps are always given; 'word' adds `words` to verbose_json, "
        "and with stream=true the viewer's transcript (`view`) to the done event",
    )
    stream: bool = Field(
        default=False,
        description="server-sent events: transcript.text.delta as windows finish, then "
        f"transcript.text.done ({STREAMABLE}, as transcript.text.segment events before done)",
    )
    known_speaker_names: list[str] = _form_list("known_speaker_names[]", "names of the known speakers")
    known_speaker_references: list[str] = _form_list(
        "known_speaker_references[]",
        "their reference clips as data URLs (data:audio/wav;base64,...), in the names' order",
    )
    known_speaker_names_plain: list[str] = _form_list("known_speaker_names", "known_speaker_names[] without brackets")
    known_speaker_references_plain: list[str] = _form_list(
        "known_speaker_references", "known_speaker_references[] without brackets"
    )
    include: list[str] = _form_list("include[]", "'speaker_embeddings': each speaker's embedding")

    @property
    def output_format(self) -> OutputFormat:
        return FORMATS[self.response_format]

    def parameters(self, task: Task) -> dict[str, object]:
        """The core's request parameters (validated there, like every edge's)."""
        # A repeated field sent no time is not given (None), like an unset one.
        values = {option.name: getattr(self, option.form_name) for option in _FORM_OPTIONS}
        values |= {option.name: values[option.name] or None for option in _FORM_OPTIONS if option.kind == "list"}
        values |= {
            "task": task,
            "return_timestamps": "word" if self._words_asked() else None,
            "known_speaker_names": [*self.known_speaker_names, *self.known_speaker_names_plain] or None,
            "known_speaker_references": [*self.known_speaker_references, *self.known_speaker_references_plain] or None,
            "return_speaker_embeddings": True if "speaker_embeddings" in self.include else None,
        }
        given = {name: value for name, value in values.items() if value is not None}
        return parameters_for(self.response_format, given)

    def wants_words(self) -> bool:
        """Word timestamps are computed: the format needs them (`parameters_for`), or they were
        asked for where they show."""
        return self.output_format.needs_words or self._words_asked()

    def _words_asked(self) -> bool:
        """timestamp_granularities[]=word where words show: a format that lists them on request,
        or the stream's view."""
        return "word" in self.timestamp_granularities and (self.output_format.words_on_request or self.stream)

    def ignored(self) -> list[str]:
        warnings = []
        if self.temperature > 0:
            warnings.append("temperature was ignored: decoding here is deterministic")
        for value in self.include:
            if value != "speaker_embeddings":
                warnings.append(f"include[]={value} was ignored: only speaker_embeddings is supported")
        if "word" in self.timestamp_granularities and not self.wants_words():
            warnings.append(f"word timestamps come with response_format={_WORDS_ON_REQUEST}; they were not computed")
        return warnings


# The form's types are loose (the core validates the values, with the same messages on every
# edge): a number stays a number, a choice is text.
_FORM_TYPES = {"flag": bool, "int": int, "float": float, "str": str, "choice": str}
_FORM_OPTIONS = tuple(option for option in request_options() if option.form_name)


def _option_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for option in _FORM_OPTIONS:
        if option.kind == "list":
            fields[option.form_name] = (list[str], _form_list(option.form_name, option.help))
            continue
        if option.kind not in _FORM_TYPES:
            raise TypeError(f"request option {option.name}: a form field cannot be a {option.kind}")
        fields[option.form_name] = (Optional[_FORM_TYPES[option.kind]], Field(default=None, description=option.help))
    return fields


#: The multipart form of both routes: OpenAI's fields, then one field per request option.
AudioForm = create_model("AudioForm", __base__=_OpenAIForm, **_option_fields())


_RESPONSES = {**ERROR_RESPONSES, 200: _TEXT_RESPONSES}


@router.post(
    "/transcriptions",
    response_model=json_models("transcribe"),
    responses=_RESPONSES,
    summary="Transcribe audio (OpenAI-compatible)",
)
async def create_transcription(
    request: Request,
    form: Annotated[AudioForm, Form()],
    service: TranscriptionService = Depends(get_service),
) -> Response:
    return await _respond(request, form, service, task="transcribe")


@router.post(
    "/translations",
    response_model=json_models("translate"),
    responses=_RESPONSES,
    summary="Translate speech into English text (OpenAI-compatible)",
)
async def create_translation(
    request: Request,
    form: Annotated[AudioForm, Form()],
    service: TranscriptionService = Depends(get_service),
) -> Response:
    if not form.output_format.translatable:
        raise ApiError(
            422,
            "invalid_parameters",
            f"{form.response_format} is a transcription format; use /v1/audio/transcriptions",
            param="response_format",
        )
    return await _respond(request, form, service, task="translate")


async def _respond(request: Request, form: AudioForm, service: TranscriptionService, *, task: Task) -> Response:
    try:
        output_format = check_format(
            form.response_format, has_diarizer=lambda: service.engine().diarizer is not None, hint=_DIARIZER_HINT
        )
    except InvalidParametersError as error:
        raise ApiError(422, "invalid_parameters", str(error), param="response_format") from error
    data = await form.file.read()
    if form.stream:
        return await stream_transcription(
            request,
            service,
            data,
            form.parameters(task),
            extra_warnings=form.ignored(),
            output_format=output_format,
            view=form.wants_words(),
        )
    transcript = await service.transcribe(
        data,
        form.parameters(task),
        extra_warnings=form.ignored(),
        is_disconnected=request.is_disconnected,
    )
    filename = form.file.filename or "audio"
    file_id = Path(filename).stem or "audio"
    # html: the page links the file by the name it was sent under (a client may send the path
    # from where it saves the page to the audio), or embeds it.
    audio_src = audio_source(data, filename, form.html_audio) if output_format.plays_audio else None
    rendered = output_format.render(transcript, Rendering(task, file_id, audio_src))
    if isinstance(rendered, str):
        return PlainTextResponse(rendered, media_type=output_format.media_type)
    return JSONResponse(rendered.model_dump(mode="json"))
