"""Words Whisper squeezes in where a live turn's audio ends (whosaid.live.repeats)."""

from __future__ import annotations

from whosaid.live.repeats import crammed_repeats


def test_a_phrase_repeated_where_the_audio_ends_is_not_speech() -> None:
    # A 1.4 s turn: Whisper said the phrase four times, the word timing found no audio for three.
    phrase = [("aren't", 0.26, 0.5), ("they", 0.5, 0.68), ("suing", 0.68, 0.88), ("you?", 0.88, 1.3)]
    squeezed = [(text, 1.32, 1.32) for text, _, _ in phrase]
    assert crammed_repeats(phrase + squeezed * 3) == set(range(4, 16))
    # "And it's great joy. And it's great joy." with the second time squeezed into 20 ms.
    words = [("And", 0.2, 0.4), ("it's", 0.4, 0.6), ("great", 0.62, 0.84), ("joy.", 0.84, 1.1)]
    words += [("And", 1.12, 1.12), ("it's", 1.12, 1.13), ("great", 1.13, 1.14), ("Joy", 1.14, 1.14)]
    assert crammed_repeats(words) == {4, 5, 6, 7}
    # Two sentences repeated twice.
    sentences = [("And", 0.2, 0.4), ("it's", 0.4, 0.6), ("great", 0.62, 0.84), ("joy.", 0.84, 1.1)]
    sentences += [("Aren't", 1.3, 1.5), ("they", 1.5, 1.68), ("suing", 1.68, 1.88), ("you?", 1.88, 2.3)]
    squeezed = [(text, 2.32, 2.33) for text, _, _ in sentences]
    assert crammed_repeats(sentences + squeezed * 2) == set(range(8, 24))


def test_a_phrase_said_twice_with_time_for_its_words_is_speech() -> None:
    words = [("I", 0.0, 0.1), ("mean,", 0.1, 0.4), ("I", 0.6, 0.7), ("mean,", 0.7, 0.9), ("yes", 1.0, 1.2)]
    assert crammed_repeats(words) == set()
    # A word said twice is left alone, however short its times.
    assert crammed_repeats([("the", 0.5, 0.5), ("the", 0.5, 0.5), ("end", 0.5, 0.9)]) == set()
    # Squeezed words that repeat nothing are left alone.
    assert crammed_repeats([("is", 8.37, 8.37), ("the", 8.37, 8.38), ("second", 8.38, 8.6)]) == set()


def test_a_turns_words_leave_out_the_context_and_the_squeezed_repeats() -> None:
    from whosaid.results import Chunk, Transcript, Word
    from whosaid.server.realtime import turn_words

    def chunk(*words: Word) -> Chunk:
        return Chunk(words[0].start_s, words[-1].end_s, "".join(word.text for word in words), words)

    said = [Word(" And", 4.2, 4.4, 0.9), Word(" it's", 4.4, 4.6, 0.9), Word(" great", 5.62, 5.84, 0.9)]
    said += [Word(" joy.", 5.84, 6.1, 0.9)]
    squeezed = [Word(text, 6.12, 6.12, 0.2) for text in (" And", " it's", " great", " joy.")]
    context = [Word(" I", 1.0, 1.2, 0.9), Word(" think,", 1.2, 1.6, 0.9), Word(" great.", 1.7, 2.3, 0.9)]
    heard = Transcript(
        "I think, great. And it's great joy. And it's great joy.",
        (chunk(*context), chunk(*said, *squeezed)),
        duration_s=6.2,
    )
    turn = turn_words(heard, 4.0)
    assert turn.text == "And it's great joy."
    assert [
        (word.text, round(word.start_s, 6), round(word.end_s, 6)) for chunk in turn.chunks for word in chunk.words
    ] == [
        (" And", 0.2, 0.4),
        (" it's", 0.4, 0.6),
        (" great", 1.62, 1.84),
        (" joy.", 1.84, 2.1),
    ]
    assert [(round(chunk.start_s, 6), round(chunk.end_s, 6)) for chunk in turn.chunks] == [(0.2, 2.1)]
    # Decoded on its own (no context), a transcript without squeezed repeats is kept as it is.
    alone = Transcript("And it's great joy.", (chunk(*said),), duration_s=2.0)
    assert turn_words(alone, 0.0) is alone


def test_a_decoding_that_starts_into_the_turn_has_its_times_moved_to_the_turns_start() -> None:
    # A short turn decoded again from its speech's start (0.7 s after the lookback's start).
    from whosaid.results import Chunk, Transcript, Word
    from whosaid.server.realtime import turn_words

    words = (Word(" Oh", 0.1, 0.3, 0.9), Word(" yeah.", 0.3, 0.6, 0.9))
    heard = Transcript("Oh yeah.", (Chunk(0.1, 0.6, " Oh yeah.", words),), duration_s=1.0)
    turn = turn_words(heard, -0.7)
    assert turn.text == "Oh yeah."
    assert [(word.text, round(word.start_s, 6), round(word.end_s, 6)) for word in turn.chunks[0].words] == [
        (" Oh", 0.8, 1.0),
        (" yeah.", 1.0, 1.3),
    ]
    assert (round(turn.chunks[0].start_s, 6), round(turn.chunks[0].end_s, 6)) == (0.8, 1.3)
