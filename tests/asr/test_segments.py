"""Decoded spans made into the transcript's chunks (clean_chunks), on synthetic spans: exact
outputs, no model."""

from __future__ import annotations

from whosaid.recognition.segments import Span, clean_chunks
from whosaid.results import Chunk, Word


def test_times_are_clamped_to_the_audio_and_never_go_backwards() -> None:
    chunks = clean_chunks(
        [Span(0.0, 2.0, " a"), Span(1.5, 3.0, " b"), Span(None, 12.0, " c"), Span(4.0, 3.0, "   ")], duration_s=10.0
    )
    assert chunks == (Chunk(0.0, 2.0, " a"), Chunk(1.5, 3.0, " b"), Chunk(3.0, 10.0, " c"))


def test_a_missing_start_follows_the_previous_chunk_and_a_missing_end_is_the_audio_end() -> None:
    chunks = clean_chunks([Span(1.0, 4.0, " one"), Span(None, None, " two")], duration_s=9.0)
    assert chunks == (Chunk(1.0, 4.0, " one"), Chunk(4.0, 9.0, " two"))


def test_spans_past_the_audio_or_ending_before_they_start_collapse_onto_one_time() -> None:
    chunks = clean_chunks([Span(3.0, 2.0, " back"), Span(12.0, 15.0, " late")], duration_s=10.0)
    assert chunks == (Chunk(3.0, 3.0, " back"), Chunk(10.0, 10.0, " late"))


def test_text_is_kept_as_decoded_and_empty_spans_are_dropped() -> None:
    chunks = clean_chunks([Span(0.0, 1.0, ""), Span(1.0, 2.0, "  Hi, there. "), Span(2.0, 3.0, "\n")], 5.0)
    assert chunks == (Chunk(1.0, 2.0, "  Hi, there. "),)
    assert clean_chunks([], duration_s=5.0) == ()


def test_words_stay_inside_their_chunk_in_order_and_the_next_chunk_starts_after_them() -> None:
    first = Span(0.0, 2.0, " a b", (Word(" a", -0.5, 0.8, 0.9), Word(" b", 0.6, 2.5, 0.8)), "en")
    second = Span(1.5, 3.0, " c", (Word(" c", 1.0, 2.8, 0.7),), "fr")
    assert clean_chunks([first, second], duration_s=10.0) == (
        Chunk(0.0, 2.0, " a b", (Word(" a", 0.0, 0.8, 0.9), Word(" b", 0.8, 2.0, 0.8)), "en"),
        Chunk(2.0, 3.0, " c", (Word(" c", 2.0, 2.8, 0.7),), "fr"),
    )
