"""Attach speakers to the transcript.

Each ASR chunk goes to the speaker who talks most during it (largest overlap with the
diarizer's turns); a chunk that overlaps no turn goes to the nearest turn in time. Consecutive
chunks of one speaker form a segment. Every chunk lands in exactly one segment, in order, so no
text is lost: not after the last turn, not when the diarizer found nobody.
"""

from __future__ import annotations

from typing import Sequence

from whosaid.results import Chunk, SpeakerSegment, SpeakerTurn

#: Label for chunks when the diarizer found no speaker at all (e.g. it heard only noise).
UNKNOWN_SPEAKER = "UNKNOWN"


def speaker_of(chunk: Chunk, turns: Sequence[SpeakerTurn]) -> str:
    """The speaker who overlaps the chunk the most; ties go to the earlier turn's speaker."""
    if not turns:
        return UNKNOWN_SPEAKER
    overlap_s: dict[str, float] = {}
    for turn in turns:
        overlap = min(chunk.end_s, turn.end_s) - max(chunk.start_s, turn.start_s)
        if overlap > 0:
            overlap_s[turn.speaker] = overlap_s.get(turn.speaker, 0.0) + overlap
    if overlap_s:
        best = max(overlap_s.values())
        for turn in turns:  # first speaker (in turn order) with the best overlap
            if overlap_s.get(turn.speaker) == best:
                return turn.speaker
    middle_s = (chunk.start_s + chunk.end_s) / 2
    nearest = min(turns, key=lambda turn: _distance_s(middle_s, turn))
    return nearest.speaker


def _distance_s(time_s: float, turn: SpeakerTurn) -> float:
    if turn.start_s <= time_s <= turn.end_s:
        return 0.0
    return min(abs(time_s - turn.start_s), abs(time_s - turn.end_s))


def assign_speakers(
    chunks: Sequence[Chunk], turns: Sequence[SpeakerTurn]
) -> tuple[SpeakerSegment, ...]:
    """Group the transcript's chunks into speaker segments (see the module's docstring)."""
    ordered_turns = sorted(turns, key=lambda turn: (turn.start_s, turn.end_s))
    segments: list[SpeakerSegment] = []
    group: list[Chunk] = []
    group_speaker = ""
    for chunk in chunks:
        speaker = speaker_of(chunk, ordered_turns)
        if group and speaker != group_speaker:
            segments.append(_segment(group_speaker, group))
            group = []
        group.append(chunk)
        group_speaker = speaker
    if group:
        segments.append(_segment(group_speaker, group))
    return tuple(segments)


def _segment(speaker: str, chunks: list[Chunk]) -> SpeakerSegment:
    return SpeakerSegment(
        speaker=speaker,
        start_s=chunks[0].start_s,
        end_s=chunks[-1].end_s,
        text="".join(chunk.text for chunk in chunks).strip(),
        chunks=tuple(chunks),
    )
