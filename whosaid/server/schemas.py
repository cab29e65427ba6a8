"""Request and response models of the Inference Endpoints route and the operations routes.
(POST /'s response model, TranscriptResponse, is whosaid.transcript_json's, the class the core
fills for `Transcript.to_dict()`; the OpenAI routes' live in whosaid.formats, beside the code
that builds them.)"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from typing_extensions import Annotated

from whosaid.config import InferenceConfig

# POST /'s response model: the class the core fills (re-exported, where the routes' models are).
from whosaid.transcript_json import TranscriptResponse as TranscriptResponse
from whosaid.transcript_json import is_none


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
        exclude_if=is_none,
        description="e.g. the machine has a GPU that torch cannot use, so the models run on the CPU",
    )
