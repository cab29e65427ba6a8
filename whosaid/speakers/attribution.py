"""Attach speakers to the transcript.

With word timestamps (computed whenever a diarizer runs), each word goes to the speaker who
talks most during it (largest overlap with the diarizer's turns), so a speaker change inside a
Whisper segment ("Right." / "Okay, got it.") splits the segment there. Diarizer boundaries are
approximate, so a sentence is not split without reason: a run of words that overlaps its
speaker only within TURN_EDGE_S of another speaker's turn stays with the rest of its sentence,
unless its words fill most of a turn of their speaker: a short reply ("right" while someone else
talks, 50-200 ms from their words), which keeps the words inside that turn.
The engine passes the diarizer's exclusive view (one speaker at a time); overlapping turns work too.
Chunks without words go whole to the speaker who talks most during them. Anything that overlaps
no turn goes to the nearest turn in time. Consecutive pieces of one speaker form a segment. Every
chunk (every word) lands in exactly one segment, in order, so no text is lost: not after the last
turn, not when the diarizer found nobody.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Optional, Sequence

from whosaid.results import Chunk, SpeakerSegment, SpeakerTurn, Word

#: Label for chunks when the diarizer found no speaker at all (e.g. it heard only noise).
UNKNOWN_SPEAKER = "UNKNOWN"
#: How far a diarizer's turn boundary may be off: the collar diarization error rates forgive
#: (0.25 s on each side of a reference boundary, as in pyannote.metrics' collar=0.5).
TURN_EDGE_S = 0.25
#: Share of a turn that a run of words must fill to keep that turn's speaker inside a sentence,
#: however short the turn (see _reply_core).
REPLY_COVER = 0.5
#: A word ending with one of these ends a sentence.
SENTENCE_END_MARKS = ".!?。！？…"


class _TurnIndex:
    """Turns sorted by (start, end), to find those near a time span without scanning them all:
    a meeting of hours has thousands of turns and tens of thousands of words."""

    def __init__(self, turns: Sequence[SpeakerTurn]) -> None:
        self.turns = sorted(turns, key=lambda turn: (turn.start_s, turn.end_s))
        self._starts = [turn.start_s for turn in self.turns]
        self._longest_s = max((turn.end_s - turn.start_s for turn in self.turns), default=0.0)
        self._first_turn: dict[str, int] = {}
        for position, turn in enumerate(self.turns):
            self._first_turn.setdefault(turn.speaker, position)

    def near(self, start_s: float, end_s: float, margin_s: float = 0.0) -> list[SpeakerTurn]:
        """The turns, in order, that overlap or touch [start_s - margin_s, end_s + margin_s]."""
        low = bisect_left(self._starts, start_s - margin_s - self._longest_s)
        high = bisect_right(self._starts, end_s + margin_s)
        return [turn for turn in self.turns[low:high] if turn.end_s >= start_s - margin_s]

    def speaker_of(self, span: Chunk | Word) -> str:
        if not self.turns:
            return UNKNOWN_SPEAKER
        overlap_s = _overlaps(span.start_s, span.end_s, self.near(span.start_s, span.end_s))
        if overlap_s:
            best = max(overlap_s.values())
            # A tie goes to the speaker whose first turn comes first.
            tied = [speaker for speaker, overlap in overlap_s.items() if overlap == best]
            return min(tied, key=self._first_turn.__getitem__)
        # The nearest turn lies within margin_s of the middle once any turn does.
        middle_s, margin_s = (span.start_s + span.end_s) / 2, 1.0
        while not (close := self.near(middle_s, middle_s, margin_s)):
            margin_s *= 2
        return min(close, key=lambda turn: _distance_s(middle_s, turn)).speaker


def speaker_of(span: Chunk | Word, turns: Sequence[SpeakerTurn]) -> str:
    """The speaker who overlaps the span the most; ties go to the speaker whose first turn comes
    first. A span that overlaps no turn goes to the nearest one."""
    return _TurnIndex(turns).speaker_of(span)


def _overlaps(start_s: float, end_s: float, turns: Sequence[SpeakerTurn]) -> dict[str, float]:
    overlap_s: dict[str, float] = {}
    for turn in turns:
        overlap = min(end_s, turn.end_s) - max(start_s, turn.start_s)
        if overlap > 0:
            overlap_s[turn.speaker] = overlap_s.get(turn.speaker, 0.0) + overlap
    return overlap_s


def _distance_s(time_s: float, turn: SpeakerTurn) -> float:
    if turn.start_s <= time_s <= turn.end_s:
        return 0.0
    return min(abs(time_s - turn.start_s), abs(time_s - turn.end_s))


def assign_speakers(
    chunks: Sequence[Chunk], turns: Sequence[SpeakerTurn]
) -> tuple[SpeakerSegment, ...]:
    """Group the transcript into speaker segments (see the module's docstring)."""
    index = _TurnIndex(turns)
    word_speakers = _word_speakers([word for chunk in chunks for word in chunk.words], index)
    pieces: list[tuple[str, Chunk]] = []
    first_word = 0
    for chunk in chunks:
        if chunk.words:
            speakers = word_speakers[first_word : first_word + len(chunk.words)]
            first_word += len(chunk.words)
            pieces += _split_chunk(chunk, speakers)
        else:
            pieces.append((index.speaker_of(chunk), chunk))
    segments: list[SpeakerSegment] = []
    group: list[Chunk] = []
    group_speaker = ""
    for speaker, piece in pieces:
        if group and speaker != group_speaker:
            segments.append(_segment(group_speaker, group))
            group = []
        group.append(piece)
        group_speaker = speaker
    if group:
        segments.append(_segment(group_speaker, group))
    return tuple(segments)


def _word_speakers(words: Sequence[Word], turns: _TurnIndex) -> list[str]:
    """Each word's speaker: most overlap, then sentence-aware smoothing of weak changes."""
    speakers = [turns.speaker_of(word) for word in words]
    if not turns.turns:
        return speakers
    sentence_start = 0
    for index, word in enumerate(words):
        if index == len(words) - 1 or word.text.rstrip().endswith(tuple(SENTENCE_END_MARKS)):
            # Smoothing weighs only turns that overlap a word, or come within TURN_EDGE_S of one.
            sentence = words[sentence_start : index + 1]
            nearby = turns.near(min(w.start_s for w in sentence), max(w.end_s for w in sentence), TURN_EDGE_S)
            _smooth_sentence(words, speakers, sentence_start, index + 1, nearby)
            sentence_start = index + 1
    return speakers


def _smooth_sentence(
    words: Sequence[Word], speakers: list[str], start: int, end: int, turns: Sequence[SpeakerTurn]
) -> None:
    """Inside words[start:end], a run of words goes to its neighbour's speaker when none of its
    words has evidence for its own speaker (see _is_evident) and it is no short reply (see
    _reply_core); a run with evidence keeps its speaker, splitting the sentence."""
    runs = _runs(speakers, start, end)
    if len(runs) < 2:
        return
    # A short reply keeps only the words inside its turn: the words at its edges that lie
    # outside go to the neighbouring run on their side (word times are off by a word or so).
    before = list(speakers)
    for position, run in enumerate(runs):
        if any(_is_evident(words[index], speakers[index], turns) for index in run):
            continue
        core = _reply_core([words[index] for index in run], before[run[0]], turns)
        if core is None:
            continue
        for offset, index in enumerate(run):
            if offset < core.start and position > 0:
                speakers[index] = before[runs[position - 1][-1]]
            elif offset >= core.stop and position < len(runs) - 1:
                speakers[index] = before[runs[position + 1][0]]
    runs = _runs(speakers, start, end)
    evident = [
        any(_is_evident(words[index], speakers[index], turns) for index in run)
        or _reply_core([words[index] for index in run], speakers[run[0]], turns) is not None
        for run in runs
    ]
    if not any(evident):
        return  # nothing to lean on: keep the overlaps' verdict
    chosen = [other for other in range(len(runs)) if evident[other]]
    for position, run in enumerate(runs):
        if evident[position]:
            continue
        # The nearest run with evidence, the previous one on a tie.
        nearest = min(chosen, key=lambda other: (abs(other - position), other > position))
        for index in run:
            speakers[index] = speakers[runs[nearest][0]]


def _runs(speakers: Sequence[str], start: int, end: int) -> list[list[int]]:
    """Indices start..end-1 grouped into runs of one speaker."""
    runs: list[list[int]] = []
    for index in range(start, end):
        if runs and speakers[runs[-1][0]] == speakers[index]:
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs


def _reply_core(run: Sequence[Word], speaker: str, turns: Sequence[SpeakerTurn]) -> Optional[slice]:
    """The words of `run` that make it a short reply: those whose middle lies inside one turn of
    `speaker` and that fill at least REPLY_COVER of that turn ("right" while someone else talks);
    None when no turn is filled so. A boundary that is off moves where a neighbour's turn ends;
    it does not make a turn that these words fill, so this holds however close the turn lies to
    other speakers' turns, where _is_evident finds nothing."""
    for turn in turns:
        if turn.speaker != speaker:
            continue
        inside = [
            offset for offset, word in enumerate(run) if turn.start_s <= (word.start_s + word.end_s) / 2 <= turn.end_s
        ]
        if not inside:
            continue
        covered_s = sum(
            max(0.0, min(run[offset].end_s, turn.end_s) - max(run[offset].start_s, turn.start_s)) for offset in inside
        )
        if covered_s > 0 and covered_s >= REPLY_COVER * (turn.end_s - turn.start_s):
            return slice(inside[0], inside[-1] + 1)
    return None


def _is_evident(word: Word, speaker: str, turns: Sequence[SpeakerTurn]) -> bool:
    """The word overlaps a turn of `speaker` somewhere farther than TURN_EDGE_S from every other
    speaker's turn: there a boundary that is off by TURN_EDGE_S would still give it to `speaker`.
    A word that only overlaps its speaker near another speaker's turn may be jitter."""
    for turn in turns:
        if turn.speaker != speaker:
            continue
        start_s, end_s = max(word.start_s, turn.start_s), min(word.end_s, turn.end_s)
        if end_s <= start_s:
            continue
        others = sorted(
            (max(other.start_s - TURN_EDGE_S, start_s), min(other.end_s + TURN_EDGE_S, end_s))
            for other in turns
            if other.speaker != speaker
        )
        position_s = start_s
        for other_start_s, other_end_s in others:
            if other_end_s <= other_start_s:
                continue
            if other_start_s > position_s:
                return True  # a stretch no other speaker's turn comes near
            position_s = max(position_s, other_end_s)
        if position_s < end_s:
            return True
    return False


def _split_chunk(chunk: Chunk, speakers: Sequence[str]) -> list[tuple[str, Chunk]]:
    """The chunk cut where its words' speaker changes. A chunk of one speaker stays as it is; the
    pieces of a split chunk span their words, the first from the chunk's start and the last to
    its end, and carry their words' text."""
    runs: list[tuple[str, list[Word]]] = []
    for word, speaker in zip(chunk.words, speakers, strict=True):
        if runs and runs[-1][0] == speaker:
            runs[-1][1].append(word)
        else:
            runs.append((speaker, [word]))
    if len(runs) == 1:
        return [(runs[0][0], chunk)]
    pieces = []
    for position, (speaker, words) in enumerate(runs):
        start_s = chunk.start_s if position == 0 else words[0].start_s
        end_s = chunk.end_s if position == len(runs) - 1 else words[-1].end_s
        text = "".join(word.text for word in words)
        pieces.append((speaker, Chunk(start_s, end_s, text, tuple(words), chunk.language, chunk.channel)))
    return pieces


def _segment(speaker: str, chunks: list[Chunk]) -> SpeakerSegment:
    return SpeakerSegment(
        speaker=speaker,
        start_s=chunks[0].start_s,
        end_s=chunks[-1].end_s,
        text="".join(chunk.text for chunk in chunks).strip(),
        chunks=tuple(chunks),
    )
