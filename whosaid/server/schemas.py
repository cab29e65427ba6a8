"""Request and response models of the Inference Endpoints route and the operations routes.
(The OpenAI routes' response models live in whosaid.formats, beside the code that builds them.)"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from typing_extensions import Annotated

from whosaid.config import InferenceConfig
from whosaid.formats import SpeakerIdentityModel


def _is_none(value: object) -> bool:
    return value is None


class InferenceRequest(BaseModel):
    """The Inference Endpoints contract: `{"inputs": <base64 audio>, "parameters": {...}}`."""

    # huggingface_hub's InferenceClient spreads extra payload keys beside these two.
    model_config = ConfigDict(extra="ignore")

    # Typed loosely on purpose: the core validates both (load_audio, InferenceConfig), so the
    # server accepts and rejects exactly what the endpoint handler does, with the same messages.
    inputs: Annotated[
        Any,
        WithJsonSchema(
            {
                "type": "string",
                "contentEncoding": "base64",
                "description": "the audio file (wav, flac, mp3, ogg/opus, m4a, webm), base64-encoded",
            }
        ),
    ]
    # Documented as InferenceConfig (inline: it has no nested models), validated by the core.
    parameters: Annotated[
        Any, WithJsonSchema({"anyOf": [InferenceConfig.model_json_schema(), {"type": "null"}]})
    ] = None


class TranscriptWord(BaseModel):
    text: str = Field(description="the word with its leading space; a chunk's words join into its text")
    timestamp: tuple[float, float] = Field(description="[start, end] in seconds")
    probability: float = Field(description="mean probability of the word's tokens")


class TranscriptChunk(BaseModel):
    timestamp: tuple[float, float] = Field(description="[start, end] in seconds")
    text: str
    words: Optional[list[TranscriptWord]] = Field(
        default=None, exclude_if=_is_none, description="with return_timestamps='word'"
    )
    language: Optional[str] = Field(
        default=None, exclude_if=_is_none, description="the chunk's language, with multilingual=true"
    )
    channel: Optional[int] = Field(
        default=None, exclude_if=_is_none, description="the channel it was said on, with multichannel=true"
    )


class TranscriptSpeakerSegment(BaseModel):
    speaker: str
    text: str
    timestamp: tuple[float, float] = Field(description="[start, end] in seconds")
    channel: Optional[int] = Field(
        default=None, exclude_if=_is_none, description="the channel it was said on, with multichannel=true"
    )


class TranscriptTurn(BaseModel):
    speaker: str
    start: float = Field(description="seconds from the start of the audio")
    end: float = Field(description="seconds from the start of the audio")
    channel: Optional[int] = Field(
        default=None, exclude_if=_is_none, description="the channel it was said on, with multichannel=true"
    )


class TranscriptResponse(BaseModel):
    """`Transcript.to_dict()`: the original handler's response (text, chunks, speakers) plus language,
    duration, decoding path and warnings. Fields the core leaves out are left out here too."""

    text: str
    chunks: list[TranscriptChunk]
    speakers: list[TranscriptSpeakerSegment] = Field(
        description="consecutive chunks by one speaker; empty without a diarization model"
    )
    turns: Optional[list[TranscriptTurn]] = Field(
        default=None,
        exclude_if=_is_none,
        description="with a diarization model: who spoke when, as the diarizer found it, sorted by "
        "start; two turns may overlap where two speakers talk at once (the `speakers` segments give "
        "each word to one speaker)",
    )
    language: Optional[str] = Field(default=None, exclude_if=_is_none)
    duration: float = Field(description="duration of the input audio in seconds")
    decoding: Optional[Literal["assisted", "batched"]] = Field(
        default=None, exclude_if=_is_none, description="absent when nothing was decoded (silence)"
    )
    channels: Optional[int] = Field(
        default=None,
        exclude_if=_is_none,
        description="with multichannel=true on audio of several channels: how many were transcribed apart",
    )
    speaker_identities: Optional[list[SpeakerIdentityModel]] = Field(
        default=None,
        exclude_if=_is_none,
        description="with known speakers (a voice library, known_speakers) or return_speaker_embeddings: "
        "one entry per diarized speaker",
    )
    warnings: Optional[list[str]] = Field(default=None, exclude_if=_is_none)


class VoiceEntry(BaseModel):
    name: str
    clips: int = Field(description="clips the voice was enrolled from")


class VoicesResponse(BaseModel):
    voices: list[VoiceEntry] = Field(description="the voice library (VOICES_DIR), by name")
    known_speakers: bool = Field(description="whether this server can match known speakers (built-in diarizer)")


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"


class ReadyResponse(BaseModel):
    status: Literal["ready"] = "ready"
    load_duration_s: Optional[float] = Field(default=None, description="how long loading took")
    device: str = Field(description="where the ASR model runs: cuda:0, cpu")
    dtype: str = Field(description="float16, float32, ...")
    attn_implementation: str = Field(description="sdpa, eager or flash_attention_2")
    warnings: Optional[list[str]] = Field(
        default=None,
        exclude_if=_is_none,
        description="e.g. the machine has a GPU that torch cannot use, so the models run on the CPU",
    )
