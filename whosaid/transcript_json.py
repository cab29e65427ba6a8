"""POST /'s answer, the original handler's response, as pydantic models: the one family that
`whosaid.results.to_transcript_json` fills (`Transcript.to_dict()` is its JSON) and the server
declares as the route's response model, so the OpenAPI schema is the answer's own class.

Fields left out of the answer are None here and absent from the dump (`exclude_if`); a field
that the answer lists as null (SpeakerIdentityModel.name, .similarity) has no `exclude_if`.
Plain pydantic, nothing of the package: results.py builds these, formats.py and the server read them.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import BaseModel, Field


def is_none(value: object) -> bool:
    """`exclude_if` of the fields left out of an answer when they are None."""
    return value is None


#: The channel something was said on: multichannel transcripts only, absent otherwise.
Channel = Annotated[
    Optional[int],
    Field(exclude_if=is_none, description="the channel it was said on, with multichannel=true"),
]


class TranscriptWord(BaseModel):
    text: str = Field(description="the word with its leading space; a chunk's words join into its text")
    timestamp: tuple[float, float] = Field(description="[start, end] in seconds")
    probability: float = Field(description="mean probability of the word's tokens")


class TranscriptChunk(BaseModel):
    timestamp: tuple[float, float] = Field(description="[start, end] in seconds")
    text: str
    words: Optional[list[TranscriptWord]] = Field(
        default=None, exclude_if=is_none, description="with return_timestamps='word'"
    )
    language: Optional[str] = Field(
        default=None, exclude_if=is_none, description="the chunk's language, with multilingual=true"
    )
    channel: Channel = None


class TranscriptSpeakerSegment(BaseModel):
    speaker: str
    text: str
    timestamp: tuple[float, float] = Field(description="[start, end] in seconds")
    channel: Channel = None


class TranscriptTurn(BaseModel):
    # pyannote's own serialisation of a diarization (DiarizeOutput.serialize) uses these keys.
    speaker: str
    start: float = Field(description="seconds from the start of the audio")
    end: float = Field(description="seconds from the start of the audio")
    channel: Channel = None


class SpeakerIdentityModel(BaseModel):
    """What known-speaker matching decided for one diarized speaker."""

    speaker: str = Field(description="the label the response uses: the matched name, else SPEAKER_NN")
    diarized_as: str = Field(description="the diarizer's own label")
    name: Optional[str] = Field(description="the known voice it matched; null below the threshold")
    similarity: Optional[float] = Field(
        description="cosine similarity to the matched voice (the closest one when unmatched); null "
        "without known voices or when the speaker said too little to embed"
    )
    embedding: Optional[list[float]] = Field(
        default=None, exclude_if=is_none, description="with return_speaker_embeddings=true (unit length)"
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
        exclude_if=is_none,
        description="with a diarization model: who spoke when, as the diarizer found it, sorted by "
        "start; two turns may overlap where two speakers talk at once (the `speakers` segments give "
        "each word to one speaker)",
    )
    language: Optional[str] = Field(default=None, exclude_if=is_none)
    duration: float = Field(description="duration of the input audio in seconds")
    decoding: Optional[Literal["assisted", "batched"]] = Field(
        default=None, exclude_if=is_none, description="absent when nothing was decoded (silence)"
    )
    channels: Optional[int] = Field(
        default=None,
        exclude_if=is_none,
        description="with multichannel=true on audio of several channels: how many were transcribed apart",
    )
    speaker_identities: Optional[list[SpeakerIdentityModel]] = Field(
        default=None,
        exclude_if=is_none,
        description="with known speakers (a voice library, known_speakers) or return_speaker_embeddings: "
        "one entry per diarized speaker",
    )
    warnings: Optional[list[str]] = Field(default=None, exclude_if=is_none)
