"""Typed results of the core. JSON (and SRT, VTT, RTTM) is made only at the edges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence


@dataclass(frozen=True)
class Word:
    """A word with its time span (seconds from the start of the audio) and the mean probability
    of its tokens. `text` keeps its leading space, so a chunk's words join into its text."""

    text: str
    start_s: float
    end_s: float
    probability: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "timestamp": [round(self.start_s, 3), round(self.end_s, 3)],
            "probability": round(self.probability, 4),
        }


@dataclass(frozen=True)
class Chunk:
    """A piece of transcript with its time span in seconds from the start of the audio, and its
    words when word timestamps were computed."""

    start_s: float
    end_s: float
    text: str
    words: tuple[Word, ...] = ()
    #: Language of the text (Whisper's code), when known.
    language: Optional[str] = None
    #: The recording's channel it was said on (0 first), for multichannel transcripts; its words
    #: are that channel's too.
    channel: Optional[int] = None

    def to_dict(self, *, words: bool = False, language: bool = False) -> dict[str, Any]:
        response: dict[str, Any] = {"timestamp": [round(self.start_s, 3), round(self.end_s, 3)], "text": self.text}
        if words:
            response["words"] = [word.to_dict() for word in self.words]
        if language and self.language is not None:
            response["language"] = self.language
        if self.channel is not None:
            response["channel"] = self.channel
        return response


@dataclass(frozen=True)
class SpeakerTurn:
    """One speaker talking without interruption, as the diarizer saw it. Another speaker's turn
    may overlap it (both talking at once)."""

    start_s: float
    end_s: float
    speaker: str
    #: The channel the turn was heard on, for multichannel transcripts.
    channel: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        # pyannote's own serialisation of a diarization (DiarizeOutput.serialize) uses these keys.
        response: dict[str, Any] = {
            "speaker": self.speaker,
            "start": round(self.start_s, 3),
            "end": round(self.end_s, 3),
        }
        if self.channel is not None:
            response["channel"] = self.channel
        return response


@dataclass(frozen=True)
class Diarization:
    """Who spoke when, as a diarizer returns it. `turns` may overlap (two people talking at
    once); `exclusive_turns` is the same result with each instant given to at most one speaker,
    the view words are attributed on. Both are sorted by (start_s, end_s) and clipped to the audio."""

    turns: tuple[SpeakerTurn, ...]
    exclusive_turns: tuple[SpeakerTurn, ...]
    #: (speaker, unit-length mean of the embeddings the diarizer clustered into it), where the
    #: diarizer has them (the built-in one): known speakers are matched on them.
    centroids: tuple[tuple[str, tuple[float, ...]], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class SpeakerIdentity:
    """What known-speaker matching decided for one diarized speaker."""

    #: The label the response uses: the matched name, else the diarizer's SPEAKER_NN.
    speaker: str
    #: The diarizer's own label.
    diarized_as: str
    #: The known voice it matched, or None when no voice reached the threshold.
    name: Optional[str]
    #: Cosine similarity to the matched voice (to the closest voice when unmatched); None
    #: without known voices or when the speaker said too little to embed.
    similarity: Optional[float]
    #: The speaker's embedding (unit length), when the request asked for it.
    embedding: Optional[tuple[float, ...]] = None

    def to_dict(self) -> dict[str, Any]:
        response: dict[str, Any] = {
            "speaker": self.speaker,
            "diarized_as": self.diarized_as,
            "name": self.name,
            "similarity": self.similarity,
        }
        if self.embedding is not None:
            response["embedding"] = [round(value, 6) for value in self.embedding]
        return response


@dataclass(frozen=True)
class SpeakerSegment:
    """Consecutive transcript chunks attributed to one speaker."""

    speaker: str
    start_s: float
    end_s: float
    text: str
    chunks: tuple[Chunk, ...] = ()
    #: The channel it was said on, for multichannel transcripts.
    channel: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        response: dict[str, Any] = {
            "speaker": self.speaker,
            "text": self.text,
            "timestamp": [round(self.start_s, 3), round(self.end_s, 3)],
        }
        if self.channel is not None:
            response["channel"] = self.channel
        return response


@dataclass(frozen=True)
class Transcript:
    """What was said (chunks) and, when a diarizer ran, who said it (speakers)."""

    text: str
    chunks: tuple[Chunk, ...]
    duration_s: float
    language: Optional[str] = None
    #: The transcript by speaker: every chunk (every word) in exactly one segment, in order,
    #: attributed on the diarizer's exclusive view.
    speakers: tuple[SpeakerSegment, ...] = ()
    #: The diarizer's turns as it found them, sorted; they may overlap (two speakers at once).
    turns: tuple[SpeakerTurn, ...] = ()
    diarized: bool = False
    #: "assisted" (speculative decoding at batch size 1) or "batched"; None when nothing was decoded.
    decoding: Optional[str] = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    #: The request asked for word timestamps: each chunk's `words` are part of the response.
    word_timestamps: bool = False
    #: Languages were detected per window: each chunk says its own language.
    multilingual: bool = False
    #: Per diarized speaker, the known voice it matched (and its embedding when asked for);
    #: empty when no known voices or embeddings were involved.
    speaker_identities: tuple[SpeakerIdentity, ...] = ()
    #: Channels transcribed one by one (multichannel on a recording of two or more); 0 otherwise.
    channels: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The response of the original handler: text, chunks, speakers, plus language and warnings;
        with a diarizer, also its turns (overlap included), which `speakers` cannot show."""
        response: dict[str, Any] = {
            "text": self.text,
            "chunks": [
                chunk.to_dict(words=self.word_timestamps, language=self.multilingual) for chunk in self.chunks
            ],
            "speakers": [segment.to_dict() for segment in self.speakers],
        }
        if self.diarized:
            response["turns"] = [turn.to_dict() for turn in sorted_turns(self.turns)]
        if self.language is not None:
            response["language"] = self.language
        response["duration"] = round(self.duration_s, 3)
        if self.decoding is not None:
            response["decoding"] = self.decoding
        if self.channels:
            response["channels"] = self.channels
        if self.speaker_identities:
            response["speaker_identities"] = [identity.to_dict() for identity in self.speaker_identities]
        if self.warnings:
            response["warnings"] = list(self.warnings)
        return response


def sorted_turns(turns: Sequence[SpeakerTurn]) -> list[SpeakerTurn]:
    """Turns in the order every output lists them: by start, then end, then speaker (two speakers
    may start at the same instant when they overlap)."""
    return sorted(turns, key=lambda turn: (turn.start_s, turn.end_s, turn.speaker))
