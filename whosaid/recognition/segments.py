"""The segment type of the recognizer's stages (`DecodedSegment`, from the decoder's tokens to
the spans), the spans it returns, and the spans made into the transcript's chunks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from whosaid.results import Chunk, Word


@dataclass(frozen=True, slots=True)
class DecodedSegment:
    """One Whisper segment as the recognizer's stages pass it on: cut from a window's tokens at
    their timestamps, timed on the window's time line (the audio's, but for a joined window until
    its times are mapped back), then given its words. The one shape a segment has from the decoder
    to the spans."""

    tokens: tuple[int, ...]  # its text tokens
    start_s: float
    end_s: float
    words: tuple[Word, ...] = ()  # empty unless words were timed


@dataclass(frozen=True)
class Span:
    """A piece of transcript as decoded, on the audio's time line; None where a time is missing."""

    start_s: Optional[float]
    end_s: Optional[float]
    text: str
    words: tuple[Word, ...] = ()  # empty unless words were timed
    language: Optional[str] = None


def clean_chunks(spans: Sequence[Span], duration_s: float) -> tuple[Chunk, ...]:
    """Whisper's timestamps, made safe for speaker alignment: a missing start follows the previous
    chunk, a missing final end is the end of the audio, times stay within the audio and never go
    backwards. Text is kept as decoded, empty chunks dropped. Words are kept inside their chunk
    and in order, and a chunk starts no earlier than the previous chunk's words end."""
    chunks: list[Chunk] = []
    previous_end = 0.0
    previous_word_end = 0.0
    for span in spans:
        if not span.text.strip():
            continue
        start_s = previous_end if span.start_s is None else float(span.start_s)
        end_s = duration_s if span.end_s is None else float(span.end_s)
        # Never before the previous chunk, nor before its words end (a piece of it may open a
        # speaker segment at one of its words).
        start_s = min(max(start_s, chunks[-1].start_s if chunks else 0.0, previous_word_end), duration_s)
        end_s = min(max(end_s, start_s), duration_s)
        kept_words = []
        for word in span.words:
            word_start_s = min(max(word.start_s, start_s, previous_word_end), end_s)
            word_end_s = min(max(word.end_s, word_start_s), end_s)
            kept_words.append(Word(word.text, word_start_s, word_end_s, word.probability))
            previous_word_end = word_end_s
        chunks.append(
            Chunk(start_s=start_s, end_s=end_s, text=span.text, words=tuple(kept_words), language=span.language)
        )
        previous_end = end_s
    return tuple(chunks)
