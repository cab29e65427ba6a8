"""Typed results of the core. JSON (and SRT, VTT, RTTM) is made only at the edges; the one JSON
made here is POST /'s answer, the original handler's response (`to_transcript_json`, whose
models, in whosaid.transcript_json, are the server's response model too)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from whosaid.transcript_json import (
    SpeakerIdentityModel,
    TranscriptChunk,
    TranscriptResponse,
    TranscriptSpeakerSegment,
    TranscriptTurn,
    TranscriptWord,
)


@dataclass(frozen=True)
class Word:
    """A word with its time span (seconds from the start of the audio) and the mean probability
    of its tokens. `text` keeps its leading space, so a chunk's words join into its text."""

    text: str
    start_s: float
    end_s: float
    probability: float


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
        """The turn as POST /'s `turns` list it (pyannote's keys: speaker, start, end)."""
        return turn_json(self).model_dump(mode="json")


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
        with a diarizer, also its turns (overlap included), which `speakers` cannot show. The
        JSON of `to_transcript_json(self)`, the model POST / declares."""
        return to_transcript_json(self).model_dump(mode="json")


def sorted_turns(turns: Sequence[SpeakerTurn]) -> list[SpeakerTurn]:
    """Turns in the order every output lists them: by start, then end, then speaker (two speakers
    may start at the same instant when they overlap)."""
    return sorted(turns, key=lambda turn: (turn.start_s, turn.end_s, turn.speaker))


def to_transcript_json(transcript: Transcript) -> TranscriptResponse:
    """POST /'s answer: times in seconds to the millisecond, probabilities to 4 decimals,
    embeddings to 6. A chunk lists its words when the request asked for word timestamps, its
    language when languages were detected per window; the turns come with a diarizer; what the
    transcript does not have (language, decoding, channels, identities, warnings) is left out."""

    def chunk_json(chunk: Chunk) -> TranscriptChunk:
        return TranscriptChunk(
            timestamp=_span(chunk.start_s, chunk.end_s),
            text=chunk.text,
            words=[_word_json(word) for word in chunk.words] if transcript.word_timestamps else None,
            language=chunk.language if transcript.multilingual else None,
            channel=chunk.channel,
        )

    segments = [
        TranscriptSpeakerSegment(
            speaker=segment.speaker,
            text=segment.text,
            timestamp=_span(segment.start_s, segment.end_s),
            channel=segment.channel,
        )
        for segment in transcript.speakers
    ]
    return TranscriptResponse(
        text=transcript.text,
        chunks=[chunk_json(chunk) for chunk in transcript.chunks],
        speakers=segments,
        turns=[turn_json(turn) for turn in sorted_turns(transcript.turns)] if transcript.diarized else None,
        language=transcript.language,
        duration=round(transcript.duration_s, 3),
        decoding=transcript.decoding,
        channels=transcript.channels or None,
        speaker_identities=[identity_json(i) for i in transcript.speaker_identities] or None,
        warnings=list(transcript.warnings) or None,
    )


def _word_json(word: Word) -> TranscriptWord:
    return TranscriptWord(
        text=word.text, timestamp=_span(word.start_s, word.end_s), probability=round(word.probability, 4)
    )


def turn_json(turn: SpeakerTurn) -> TranscriptTurn:
    """A diarizer's turn as POST /'s `turns` list it."""
    return TranscriptTurn(
        speaker=turn.speaker, start=round(turn.start_s, 3), end=round(turn.end_s, 3), channel=turn.channel
    )


def identity_json(identity: SpeakerIdentity) -> SpeakerIdentityModel:
    """One diarized speaker's match, as POST / and the OpenAI routes' JSON formats list it."""
    embedding = None if identity.embedding is None else [round(value, 6) for value in identity.embedding]
    return SpeakerIdentityModel(
        speaker=identity.speaker,
        diarized_as=identity.diarized_as,
        name=identity.name,
        similarity=identity.similarity,
        embedding=embedding,
    )


def _span(start_s: float, end_s: float) -> tuple[float, float]:
    return (round(start_s, 3), round(end_s, 3))
