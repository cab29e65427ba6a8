"""Speakers of a live session, found turn by turn.

People answer each other without pausing, so a committed turn often holds several speakers. Each
turn is diarized (the built-in diarizer: overlap-aware segmentation, CAM++ embeddings) together
with the last CONTEXT_S seconds of the session's earlier turns, whose speakers are already known:

1. a speaker of this diarization who covers at least MIN_CONTEXT_OVERLAP_S of a known speaker's
   earlier speech is that speaker (even a short "Hello." before gets its speaker right);
2. any other is compared, by its CAM++ embedding, with the centroid of every speaker heard so
   far in the session (incremental clustering): at or above `same_speaker_similarity` (the
   encoder's own threshold for "the same voice", cosine) it is the closest one; below it, a new
   speaker. A new speaker whose voice matches a known voice (cosine at or above the known-speaker
   threshold, a voice not yet taken) carries that name instead of SPEAKER_NN.

The turn's words go to its speakers as in a file (whosaid.speakers.attribution).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from whosaid.audio.loading import Audio
from whosaid.config import WHISPER_SAMPLE_RATE_HZ
from whosaid.results import Chunk, Diarization, SpeakerSegment, SpeakerTurn
from whosaid.speaker_hints import SpeakerHints
from whosaid.speakers.attribution import assign_speakers
from whosaid.speakers.known import KnownVoice, SpeakerIdentifier
from whosaid.speakers.protocols import Diarizer

RATE = WHISPER_SAMPLE_RATE_HZ
#: Earlier speech diarized with each turn: with a turn of a few seconds, one segmentation chunk
#: of the built-in diarizer (10 s).
CONTEXT_S = 5.0
#: Shared speech that makes a speaker of the turn's diarization a speaker already known.
MIN_CONTEXT_OVERLAP_S = 0.25
#: The label of a turn the diarizer found no speaker in (too short): all of it is one speaker's.
WHOLE_TURN = "turn"


@dataclass
class LiveSpeaker:
    label: str
    #: Sum of the unit-length embeddings of its turns (empty before one); its direction is the centroid.
    total: np.ndarray
    name: Optional[str] = None
    similarity: Optional[float] = field(default=None)

    def add(self, embedding: Optional[np.ndarray]) -> None:
        if embedding is not None:
            self.total = embedding.copy() if self.total.size == 0 else self.total + embedding

    @property
    def centroid(self) -> np.ndarray:
        return self.total / max(float(np.linalg.norm(self.total)), 1e-12)


class LiveSpeakers:
    def __init__(
        self, same_speaker_similarity: float, voices: Sequence[KnownVoice] = (), name_threshold: float = 0.5
    ) -> None:
        self.same_speaker_similarity = same_speaker_similarity
        self.voices = tuple(voices)
        self.name_threshold = name_threshold
        self.speakers: list[LiveSpeaker] = []
        self._previous: Optional[LiveSpeaker] = None

    def assign(self, embedding: Optional[np.ndarray]) -> Optional[LiveSpeaker]:
        """The speaker of a turn with this unit-length embedding (None: too short to embed)."""
        if embedding is None:
            return self._previous
        best: Optional[LiveSpeaker] = None
        best_similarity = -1.0
        for speaker in self.speakers:
            if speaker.total.size == 0:
                continue
            similarity = float(speaker.centroid @ embedding)
            if similarity > best_similarity:
                best, best_similarity = speaker, similarity
        if best is not None and best_similarity >= self.same_speaker_similarity:
            best.add(embedding)
        else:
            best = self._new_speaker(embedding)
        self._previous = best
        return best

    def assign_unknown(self) -> LiveSpeaker:
        """The speaker of a part with no usable voice and no speaker before it: the previous
        speaker, else a first speaker."""
        if self._previous is None:
            self._previous = self._new_speaker(None)
        return self._previous

    def by_label(self, label: str) -> Optional[LiveSpeaker]:
        return next((speaker for speaker in self.speakers if speaker.label == label), None)

    def _new_speaker(self, embedding: Optional[np.ndarray]) -> LiveSpeaker:
        taken = {speaker.name for speaker in self.speakers if speaker.name}
        name, similarity = None, None
        for voice in self.voices if embedding is not None else ():
            score = float(voice.embedding @ embedding)
            if voice.name not in taken and score >= self.name_threshold and (similarity is None or score > similarity):
                name, similarity = voice.name, score
        unnamed = sum(1 for speaker in self.speakers if speaker.name is None)
        label = name or f"SPEAKER_{unnamed:02d}"
        total = embedding.copy() if embedding is not None else np.zeros(0)
        speaker = LiveSpeaker(label=label, total=total, name=name, similarity=similarity)
        self.speakers.append(speaker)
        return speaker


@dataclass(frozen=True)
class TurnSpeakers:
    """Who spoke which part of a turn, before the session's labels are known: `parts` carry the
    diarizer's own labels (times from the turn's start); `known` maps a label to the session
    speaker it shares earlier speech with; `embeddings` holds each label's voice."""

    parts: tuple[SpeakerSegment, ...]
    #: The diarizer's exclusive turns in the turn (times from its start): who spoke when, for
    #: the next turns' context (word times would leave out the edges of each speaker's speech).
    turns: tuple[SpeakerTurn, ...]
    known: dict[str, str]
    embeddings: dict[str, np.ndarray]

    def labels(self, speakers: LiveSpeakers) -> dict[str, str]:
        """The session label of each of the turn's labels (new speakers are added to `speakers`)."""
        labels: dict[str, str] = {}
        for part in self.parts:
            if part.speaker in labels:
                continue
            embedding = self.embeddings.get(part.speaker)
            known = speakers.by_label(self.known[part.speaker]) if part.speaker in self.known else None
            if known is not None:
                known.add(embedding)
                speaker: Optional[LiveSpeaker] = known
            else:
                speaker = speakers.assign(embedding)
            labels[part.speaker] = speaker.label if speaker is not None else speakers.assign_unknown().label
        return labels


class SpeakerContext:
    """The session's recent committed speech and who said it, for diarizing the next turn."""

    def __init__(self, diarizer: Diarizer, identifier: SpeakerIdentifier, context_s: float = CONTEXT_S) -> None:
        self.diarizer = diarizer
        self.identifier = identifier
        self.context_s = context_s
        # (session start, samples, [(start, end, label) in session time]) of recent turns.
        self._turns: list[tuple[float, np.ndarray, list[tuple[float, float, str]]]] = []

    def diarize(self, samples: np.ndarray, chunks: Sequence[Chunk], hints: SpeakerHints) -> TurnSpeakers:
        """The speakers of a turn (its samples, and its transcript's chunks with word times)."""
        context = [turn_samples for _, turn_samples, _ in self._turns]
        offset_s = sum(piece.size for piece in context) / RATE
        joined = Audio(np.concatenate([*context, samples]).astype(np.float32))
        diarization = self.diarizer.diarize(joined, hints)
        known = self._known_speakers(diarization)
        own = tuple(
            SpeakerTurn(max(turn.start_s, offset_s) - offset_s, turn.end_s - offset_s, turn.speaker)
            for turn in diarization.exclusive_turns
            if turn.end_s > offset_s
        )
        # Only the voices of the turn's own speakers are used (TurnSpeakers.labels).
        embeddings = self.identifier.speaker_embeddings(joined, diarization, {turn.speaker for turn in own})
        if not own:  # too short for the diarizer: one speaker, its voice from the whole turn
            own = (SpeakerTurn(0.0, samples.size / RATE, WHOLE_TURN),)
            whole = self.identifier.embed_samples(samples)
            embeddings = {WHOLE_TURN: whole} if whole is not None else {}
        return TurnSpeakers(parts=assign_speakers(chunks, own), turns=own, known=known, embeddings=embeddings)

    def remember(self, start_s: float, samples: np.ndarray, speakers: TurnSpeakers, labels: dict[str, str]) -> None:
        """A finished turn joins the context; the oldest leave it past `context_s`."""
        segments = [
            (start_s + turn.start_s, start_s + turn.end_s, labels[turn.speaker])
            for turn in speakers.turns
            if turn.speaker in labels
        ]
        self._turns.append((start_s, samples, segments))
        while len(self._turns) > 1 and sum(turn.size for _, turn, _ in self._turns) / RATE > self.context_s:
            self._turns.pop(0)
        if self._turns and self._turns[0][1].size / RATE > self.context_s:
            start, turn_samples, turn_segments = self._turns[0]
            cut = turn_samples.size - int(self.context_s * RATE)
            self._turns[0] = (start + cut / RATE, turn_samples[cut:], turn_segments)

    def _known_speakers(self, diarization: Diarization) -> dict[str, str]:
        """Each speaker of `diarization` that shares at least MIN_CONTEXT_OVERLAP_S of earlier
        speech with a session speaker -> that speaker's label (the one it shares most with)."""
        shared: dict[str, dict[str, float]] = {}
        offset_s = 0.0
        for start_s, turn_samples, segments in self._turns:
            for segment_start_s, segment_end_s, label in segments:
                begin = offset_s + max(segment_start_s - start_s, 0.0)
                end = offset_s + min(segment_end_s - start_s, turn_samples.size / RATE)
                for turn in diarization.exclusive_turns:
                    overlap = min(end, turn.end_s) - max(begin, turn.start_s)
                    if overlap > 0:
                        by_label = shared.setdefault(turn.speaker, {})
                        by_label[label] = by_label.get(label, 0.0) + overlap
            offset_s += turn_samples.size / RATE
        return {
            speaker: max(by_label, key=by_label.__getitem__)
            for speaker, by_label in shared.items()
            if max(by_label.values()) >= MIN_CONTEXT_OVERLAP_S
        }
