"""Decoded pieces of transcript (spans) made into the transcript's chunks."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from whosaid.results import Chunk, Word

#: (start_s, end_s, text, words, language) of a piece of transcript; words empty unless timed.
Span = tuple[Optional[float], Optional[float], str, tuple[Word, ...], Optional[str]]


def clean_chunks(spans: Sequence[Sequence[Any]], duration_s: float) -> tuple[Chunk, ...]:
    """Whisper's timestamps, made safe for speaker alignment: a missing start follows the previous
    chunk, a missing final end is the end of the audio, times stay within the audio and never go
    backwards. Text is kept as decoded, empty chunks dropped. Spans are (start_s, end_s, text)
    or (start_s, end_s, text, words, language); words are kept inside their chunk and in order, and a chunk
    starts no earlier than the previous chunk's words end."""
    chunks: list[Chunk] = []
    previous_end = 0.0
    previous_word_end = 0.0
    for span in spans:
        start, end, text = span[0], span[1], span[2]
        words: Sequence[Word] = span[3] if len(span) > 3 else ()
        language: Optional[str] = span[4] if len(span) > 4 else None
        if not text.strip():
            continue
        start_s = previous_end if start is None else float(start)
        end_s = duration_s if end is None else float(end)
        # Never before the previous chunk, nor before its words end (a piece of it may open a
        # speaker segment at one of its words).
        start_s = min(max(start_s, chunks[-1].start_s if chunks else 0.0, previous_word_end), duration_s)
        end_s = min(max(end_s, start_s), duration_s)
        kept_words = []
        for word in words:
            word_start_s = min(max(word.start_s, start_s, previous_word_end), end_s)
            word_end_s = min(max(word.end_s, word_start_s), end_s)
            kept_words.append(Word(word.text, word_start_s, word_end_s, word.probability))
            previous_word_end = word_end_s
        chunks.append(Chunk(start_s=start_s, end_s=end_s, text=text, words=tuple(kept_words), language=language))
        previous_end = end_s
    return tuple(chunks)
