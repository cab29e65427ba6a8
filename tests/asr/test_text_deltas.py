"""Streamed text pieces join into exactly the finished transcript's text: the chunks' texts
joined and stripped, whitespace-only pieces dropped as the recognizer drops empty chunks."""

from __future__ import annotations

import pytest

from whosaid.recognition.text_deltas import TextDeltas

BATCHES = [
    [[" Hello.", " Oh, hello. "], ["   "], [" I didn't know", " you were there.  "], [" Bye."]],
    [["  "], ["\n"]],
    [[""], [" One."], [" Two. "]],
]


@pytest.mark.parametrize("batches", BATCHES)
def test_the_deltas_join_into_the_stripped_text_of_the_chunks(batches: list[list[str]]) -> None:
    deltas: list[str] = []
    text_deltas = TextDeltas(deltas.append)
    for batch in batches:
        text_deltas.add(batch)
    chunks = [text for batch in batches for text in batch if text.strip()]
    assert "".join(deltas) == "".join(chunks).strip()
    assert all(delta.strip() for delta in deltas)  # no empty or whitespace-only event


def test_each_delta_is_its_batch_with_the_held_back_space_first() -> None:
    deltas: list[str] = []
    text_deltas = TextDeltas(deltas.append)
    for batch in BATCHES[0]:
        text_deltas.add(batch)
    assert deltas == ["Hello. Oh, hello.", "  I didn't know you were there.", "   Bye."]
