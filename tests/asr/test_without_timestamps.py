"""Decoding text only (`without_timestamps=true`, faster-whisper's `without_timestamps`): the
window's text without Whisper's timestamp tokens, cut into chunks at its words' times."""

from __future__ import annotations

import pytest

from tests.support.engines import config
from whosaid.recognition.word_timing import PIECE_MAX_S, PIECE_PAUSE_S, _Timing, sentence_pieces


def timing(text: str, start_s: float, end_s: float) -> _Timing:
    return _Timing(text, [], start_s, end_s, 0.9)


def texts(pieces) -> list[str]:
    return ["".join(word.text for word in piece) for piece in pieces]


def test_pieces_end_at_sentence_marks_also_before_a_closing_quote() -> None:
    words = [
        timing(" Hello", 0.0, 0.4),
        timing(" there.", 0.4, 0.8),
        timing(' "Yes?"', 0.9, 1.2),
        timing(" Fine,", 1.3, 1.6),
        timing(" thanks", 1.6, 2.0),
    ]
    assert texts(sentence_pieces(words)) == [" Hello there.", ' "Yes?"', " Fine, thanks"]


def test_pieces_end_at_pauses_and_at_their_longest() -> None:
    pause = [timing(" one", 0.0, 0.5), timing(" two", 0.5 + PIECE_PAUSE_S, 2.0), timing(" three", 2.1, 2.4)]
    assert texts(sentence_pieces(pause)) == [" one", " two three"]
    just_short = [timing(" one", 0.0, 0.5), timing(" two", 0.5 + PIECE_PAUSE_S - 0.01, 2.0)]
    assert texts(sentence_pieces(just_short)) == [" one two"]
    assert sentence_pieces([]) == []


def test_long_pieces_are_halved_at_clauses_else_at_their_widest_pause_near_the_middle() -> None:
    # Words every second, no mark, equal pauses: halved nearest the middle until none is over the limit.
    even = [timing(f" w{index}", float(index), index + 0.9) for index in range(30)]
    pieces = sentence_pieces(even)
    assert [len(piece) for piece in pieces] == [7, 8, 7, 8]
    assert all(piece[-1].end_s - piece[0].start_s <= PIECE_MAX_S for piece in pieces)
    # A wider pause inside the middle half wins over the middle; one outside it does not count.
    paused = [timing(f" w{index}", index + (0.5 if index >= 10 else 0.0), index + 0.9) for index in range(16)]
    assert [len(piece) for piece in sentence_pieces(paused)] == [10, 6]
    early = [timing(f" w{index}", index + (0.5 if index >= 2 else 0.0), index + 0.9) for index in range(16)]
    assert [len(piece) for piece in sentence_pieces(early)] == [7, 9]
    # A comma in the middle half wins over any pause.
    clause = [
        timing(f" w{index}" + ("," if index == 5 else ""), index + (0.5 if index >= 10 else 0.0), index + 0.9)
        for index in range(16)
    ]
    assert texts(sentence_pieces(clause))[0] == " w0 w1 w2 w3 w4 w5,"


@pytest.fixture(scope="module")
def text_only(tiny_en_engine, sample_audio):
    return tiny_en_engine.transcribe(sample_audio, config(without_timestamps=True))


def test_the_text_is_greedy_text_only_decoding_of_each_window(tiny_en_engine, sample_audio, text_only) -> None:
    """The transcript's text is what the lean loop decodes from <|notimestamps|> on each speech
    window (no timestamp token at all), cut into chunks at sentence ends and pauses."""
    import torch

    recognizer = tiny_en_engine.recognizer
    options = recognizer.decoding_options(config(without_timestamps=True))
    windows = recognizer._windows(sample_audio, 30.0, multilingual=False)
    prompt = recognizer.decoder.prompt(None, "transcribe", timestamps=False)
    assert prompt[-1] == recognizer.decoder.timestamp_begin - 1  # <|notimestamps|>
    window_texts = []
    with torch.inference_mode():
        for window in windows:
            states = recognizer.encode(recognizer.features([window.samples(sample_audio.reader)]))
            (decoded,) = recognizer.decoder.decode(states, prompt, options)
            assert max(decoded.tokens) < recognizer.decoder.timestamp_begin
            window_texts.append(recognizer.text(decoded.tokens))
    assert " ".join(text_only.text.split()) == " ".join(" ".join(window_texts).split())
    assert len(text_only.chunks) > len(windows)  # the windows were cut at their sentences


def test_chunks_are_in_order_inside_the_audio_and_end_at_sentences_or_pauses(text_only, sample_audio) -> None:
    chunks = text_only.chunks
    assert chunks and all(not chunk.words for chunk in chunks)  # words were not asked for
    previous_end_s = 0.0
    for chunk, following in zip(chunks, chunks[1:] + (None,), strict=True):
        assert previous_end_s <= chunk.start_s <= chunk.end_s <= sample_audio.duration_s
        previous_end_s = chunk.start_s
        if following is not None:
            ends_sentence = chunk.text.rstrip("\"')]}»”’")[-1:] in ".!?。！？"
            paused = following.start_s - chunk.end_s >= PIECE_PAUSE_S - 0.3  # times move to the words'
            halved = following.end_s - chunk.start_s > PIECE_MAX_S - 1
            assert ends_sentence or paused or halved, (chunk, following)
    response = text_only.to_dict()
    assert response["text"] == text_only.text and "words" not in response["chunks"][0]


def test_words_when_asked_make_each_chunks_text(tiny_en_engine, sample_audio, text_only) -> None:
    worded = tiny_en_engine.transcribe(sample_audio, config(without_timestamps=True, return_timestamps="word"))
    assert [chunk.text for chunk in worded.chunks] == [chunk.text for chunk in text_only.chunks]
    for chunk in worded.chunks:
        assert chunk.words and chunk.text == "".join(word.text for word in chunk.words)
        assert all(chunk.start_s <= word.start_s <= word.end_s <= chunk.end_s for word in chunk.words)
