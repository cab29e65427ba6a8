"""Multichannel recordings (one party per channel: stereo calls): what each channel's transcript
keeps, who its speaker is, and how the channels merge into one transcript by time.

Crosstalk: a channel often carries the other party faintly (a headset's echo, one room heard by
two microphones), and Whisper transcribes faint speech as readily as loud, so the other party's
words would come twice. Two things mark a channel's words as the other party's: another channel
is CROSSTALK_DB louder over them, and that channel holds the same words at the same time. Level
alone is not enough: a quiet party's words said over a loud one are real and can sit 15-25 dB
below it (measured on real speech); and text alone is not either: two parties may say the same
"yes" at once. So a run of consecutive words that another channel drowns out is dropped when at
least half of its words match that channel's words within MATCH_WINDOW_S (a misheard faint word
goes with its run; a run ends at a word that is not faint, or at a pause). benchmarks/CHANGELOG.md
("Stereo calls") has the levels measured.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from whosaid.audio.loading import Audio
from whosaid.results import Chunk, SpeakerSegment, SpeakerTurn, Word

#: A word whose channel is this much quieter than another channel over the word's span may be
#: that channel's speech heard faintly (crosstalk); it is, when the louder channel said the same.
CROSSTALK_DB = 15.0
#: How far apart in time a faint word and the loud channel's same word may start (the echo's
#: delay plus Whisper's timing error on faint speech).
MATCH_WINDOW_S = 1.0
#: Share of a faint run's words that must match the loud channel's words for the run to go.
MATCHED_SHARE = 0.5
#: A pause this long between two faint words ends their run (another utterance).
RUN_GAP_S = 0.5
#: Level of digital silence, for spans without samples or without energy.
_FLOOR_DB = -120.0
#: A channel's words closer than this form one turn (RTTM, `turns`) when no diarizer runs.
TURN_GAP_S = 1.0
_NOT_WORD = re.compile(r"[^\w']+")


def channel_label(channel: int, names: Sequence[str] = ()) -> str:
    """The speaker of a channel: its name from channel_names, else CHANNEL_N."""
    return names[channel].strip() if channel < len(names) else f"CHANNEL_{channel}"


def level_db(audio: Audio, start_s: float, end_s: float) -> float:
    """RMS level of the span in dBFS (digital silence and empty spans: -120)."""
    rate = audio.sample_rate_hz
    start, end = max(0, int(start_s * rate)), min(len(audio.samples), int(math.ceil(end_s * rate)))
    if end <= start:
        return _FLOOR_DB
    piece = np.asarray(audio.reader[start:end], dtype=np.float64)
    rms = float(np.sqrt(np.mean(piece**2)))
    return max(_FLOOR_DB, 20 * math.log10(rms)) if rms > 0 else _FLOOR_DB


def loudest_other(channels: Sequence[Audio], channel: int, start_s: float, end_s: float) -> tuple[int, float]:
    """The other channel loudest over the span, and how much quieter `channel` is than it (dB;
    negative when `channel` is the louder)."""
    own = level_db(channels[channel], start_s, end_s)
    levels = [(level_db(audio, start_s, end_s), index) for index, audio in enumerate(channels) if index != channel]
    level, index = max(levels)
    return index, level - own


def is_drowned(channels: Sequence[Audio], channel: int, start_s: float, end_s: float) -> bool:
    """Another channel is CROSSTALK_DB louder over the span."""
    return loudest_other(channels, channel, start_s, end_s)[1] > CROSSTALK_DB


def _norm(text: str) -> str:
    return _NOT_WORD.sub("", text.lower())


def crosstalk_words(words: Sequence[Sequence[Word]], channels: Sequence[Audio]) -> list[set[int]]:
    """Per channel, the positions of its words that are another channel's speech heard faintly
    (see the module's docstring). `words`: each channel's words in order. A faint word matches
    only words its loud channel holds loud (not that channel's own crosstalk)."""
    loudness = [
        [loudest_other(channels, channel, word.start_s, word.end_s) for word in channel_words]
        for channel, channel_words in enumerate(words)
    ]
    starts: list[dict[str, list[float]]] = [{} for _ in words]
    for channel, channel_words in enumerate(words):
        for word, (_, difference_db) in zip(channel_words, loudness[channel], strict=True):
            if difference_db <= CROSSTALK_DB:
                starts[channel].setdefault(_norm(word.text), []).append(word.start_s)
    dropped: list[set[int]] = []
    for channel, channel_words in enumerate(words):
        gone: set[int] = set()
        run: list[tuple[int, bool]] = []  # a run of faint words: (position, said loud on the loud channel)
        for position, word in enumerate([*channel_words, None]):
            if word is not None:
                loud, difference_db = loudness[channel][position]
                if run and word.start_s - channel_words[run[-1][0]].end_s > RUN_GAP_S:
                    if sum(matched for _, matched in run) >= MATCHED_SHARE * len(run):
                        gone.update(index for index, _ in run)
                    run = []
                if difference_db > CROSSTALK_DB:
                    same = starts[loud].get(_norm(word.text), [])
                    run.append((position, any(abs(start - word.start_s) <= MATCH_WINDOW_S for start in same)))
                    continue
            if run and sum(matched for _, matched in run) >= MATCHED_SHARE * len(run):
                gone.update(index for index, _ in run)
            run = []
        dropped.append(gone)
    return dropped


def without_crosstalk(chunks: Sequence[Sequence[Chunk]], channels: Sequence[Audio]) -> tuple[list[list[Chunk]], int]:
    """Each channel's chunks without its crosstalk words (`crosstalk_words`; a chunk without
    words counts as one word), each chunk labelled with its channel; and how many words went. A
    chunk that loses words keeps the span of those it keeps."""
    words = [
        [word for chunk in channel_chunks for word in (chunk.words or (_as_word(chunk),))] for channel_chunks in chunks
    ]
    gone = crosstalk_words(words, channels)
    kept_chunks: list[list[Chunk]] = []
    for channel, channel_chunks in enumerate(chunks):
        position, kept = 0, []
        for chunk in channel_chunks:
            count = len(chunk.words) or 1
            keep = [index for index in range(count) if position + index not in gone[channel]]
            position += count
            if not chunk.words:
                if keep:
                    kept.append(_relabel(chunk, (), channel))
                continue
            if keep:
                kept.append(_relabel(chunk, tuple(chunk.words[index] for index in keep), channel))
        kept_chunks.append(kept)
    return kept_chunks, sum(len(positions) for positions in gone)


def _as_word(chunk: Chunk) -> Word:
    return Word(chunk.text, chunk.start_s, chunk.end_s, 1.0)


def _relabel(chunk: Chunk, words: tuple[Word, ...], channel: int) -> Chunk:
    if words == chunk.words:
        return Chunk(chunk.start_s, chunk.end_s, chunk.text, chunk.words, chunk.language, channel)
    return Chunk(
        start_s=chunk.start_s if words[0] is chunk.words[0] else words[0].start_s,
        end_s=chunk.end_s if words[-1] is chunk.words[-1] else words[-1].end_s,
        text="".join(word.text for word in words),
        words=words,
        language=chunk.language,
        channel=channel,
    )


def turns_of_words(chunks: Sequence[Chunk], speaker: str, channel: int) -> list[SpeakerTurn]:
    """A channel's speech as turns, from its words' times: words less than TURN_GAP_S apart form
    one turn (chunks without words count as one word)."""
    spans = sorted(
        (word.start_s, word.end_s)
        for chunk in chunks
        for word in (chunk.words or (chunk,))  # type: ignore[attr-defined]
    )
    turns: list[SpeakerTurn] = []
    for start_s, end_s in spans:
        if turns and start_s - turns[-1].end_s < TURN_GAP_S:
            last = turns[-1]
            turns[-1] = SpeakerTurn(last.start_s, max(last.end_s, end_s), speaker, channel)
        else:
            turns.append(SpeakerTurn(start_s, end_s, speaker, channel))
    return turns


@dataclass(frozen=True)
class ChannelResult:
    """One channel's part of the transcript: its chunks (with their channel), who said each, and
    its speakers' turns."""

    channel: int
    segments: tuple[SpeakerSegment, ...]
    turns: tuple[SpeakerTurn, ...]


def merge_channels(
    results: Sequence[ChannelResult],
) -> tuple[tuple[Chunk, ...], tuple[SpeakerSegment, ...], tuple[SpeakerTurn, ...]]:
    """The channels' chunks merged by time (ties: the lower channel first), consecutive chunks of
    one speaker on one channel as one segment, and every channel's turns, sorted. Turns of two
    channels may overlap: both parties talking at once."""
    pieces: list[tuple[float, int, int, Chunk, str]] = []
    for result in results:
        order = 0
        for segment in result.segments:
            for chunk in segment.chunks:
                pieces.append((chunk.start_s, result.channel, order, chunk, segment.speaker))
                order += 1
    pieces.sort(key=lambda piece: piece[:3])
    segments: list[SpeakerSegment] = []
    for _, channel, _, chunk, speaker in pieces:
        last: Optional[SpeakerSegment] = segments[-1] if segments else None
        if last is not None and last.speaker == speaker and last.channel == channel:
            chunks = (*last.chunks, chunk)
            segments[-1] = SpeakerSegment(
                speaker,
                last.start_s,
                max(last.end_s, chunk.end_s),
                "".join(c.text for c in chunks).strip(),
                chunks,
                channel,
            )
        else:
            segments.append(SpeakerSegment(speaker, chunk.start_s, chunk.end_s, chunk.text.strip(), (chunk,), channel))
    chunks = tuple(piece[3] for piece in pieces)
    turns = sorted(
        (turn for result in results for turn in result.turns),
        key=lambda turn: (turn.start_s, turn.end_s, turn.speaker),
    )
    return chunks, tuple(segments), tuple(turns)


def without_drowned_speech(
    channels: Sequence[Audio], channel: int, regions: Sequence[tuple[float, float]]
) -> tuple[Audio, float]:
    """The channel with its speech regions (`regions`: the voice activity detector's) that another
    channel holds CROSSTALK_DB louder over their whole span silenced, so that speech recognition
    skips them: on a call, each channel carries the other party's voice faintly almost all the
    time, and transcribing it only to drop its words would double the work. A region where the
    channel's own party speaks too is not drowned on average, and stays (its crosstalk words go
    after recognition). Returns the channel (itself when nothing is silenced) and the seconds
    silenced."""
    track = channels[channel]
    drowned = [(start_s, end_s) for start_s, end_s in regions if is_drowned(channels, channel, start_s, end_s)]
    if not drowned:
        return track, 0.0
    samples = np.array(track.reader[0 : len(track.samples)], dtype=np.float32)
    rate = track.sample_rate_hz
    for start_s, end_s in drowned:
        samples[int(start_s * rate) : int(math.ceil(end_s * rate))] = 0.0
    return Audio(samples, rate), sum(end_s - start_s for start_s, end_s in drowned)
