"""Speaker attribution on its own: exact cases and properties."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from whosaid.recognition.segments import Span, clean_chunks
from whosaid.results import Chunk, SpeakerTurn, Word
from whosaid.speakers.attribution import UNKNOWN_SPEAKER, assign_speakers, speaker_of


def chunk(start: float, end: float, text: str) -> Chunk:
    return Chunk(start_s=start, end_s=end, text=text)


def turn(start: float, end: float, speaker: str) -> SpeakerTurn:
    return SpeakerTurn(start_s=start, end_s=end, speaker=speaker)


def word(start: float, end: float, text: str) -> Word:
    return Word(text=text, start_s=start, end_s=end, probability=1.0)


def timed_chunk(*words: Word) -> Chunk:
    return Chunk(start_s=words[0].start_s, end_s=words[-1].end_s, text="".join(w.text for w in words), words=words)


def summary(segments):
    return [(s.speaker, s.start_s, s.end_s, s.text) for s in segments]


def test_empty_transcript_gives_no_segments() -> None:
    assert assign_speakers([], [turn(0, 5, "A")]) == ()
    assert assign_speakers([], []) == ()


def test_one_speaker_gets_everything() -> None:
    chunks = [chunk(0, 2, " Hello."), chunk(2, 4, " How are you?")]
    assert summary(assign_speakers(chunks, [turn(0.1, 3.9, "A")])) == [("A", 0, 4, "Hello. How are you?")]


def test_speakers_alternate() -> None:
    chunks = [chunk(0, 2, " Hi."), chunk(2, 4, " Hello."), chunk(4, 6, " Bye.")]
    turns = [turn(0, 2, "A"), turn(2, 4, "B"), turn(4, 6, "A")]
    assert summary(assign_speakers(chunks, turns)) == [
        ("A", 0, 2, "Hi."),
        ("B", 2, 4, "Hello."),
        ("A", 4, 6, "Bye."),
    ]


def test_speaker_change_inside_a_chunk_goes_to_the_longer_speaker() -> None:
    chunks = [chunk(0, 4, " Mostly B speaking."), chunk(4, 6, " A now.")]
    turns = [turn(0, 1, "A"), turn(1, 4, "B"), turn(4, 6, "A")]
    assert summary(assign_speakers(chunks, turns)) == [("B", 0, 4, "Mostly B speaking."), ("A", 4, 6, "A now.")]


def test_chunks_after_the_last_turn_are_kept() -> None:
    # The original handler dropped these: its loop ended with the diarizer's segments.
    chunks = [chunk(0, 2, " One."), chunk(2, 4, " Two."), chunk(8, 9, " Three."), chunk(9, 10, " Four.")]
    turns = [turn(0, 2, "A"), turn(2, 4, "B")]
    assert summary(assign_speakers(chunks, turns)) == [("A", 0, 2, "One."), ("B", 2, 10, "Two. Three. Four.")]


def test_chunks_before_the_first_turn_go_to_the_nearest_speaker() -> None:
    chunks = [chunk(0, 1, " Early."), chunk(5, 6, " Later.")]
    assert summary(assign_speakers(chunks, [turn(4, 7, "B")])) == [("B", 0, 6, "Early. Later.")]


def test_no_speakers_found_keeps_the_text() -> None:
    chunks = [chunk(0, 2, " Still here.")]
    assert summary(assign_speakers(chunks, [])) == [(UNKNOWN_SPEAKER, 0, 2, "Still here.")]


def test_missing_final_timestamp_gets_the_end_of_the_audio() -> None:
    chunks = clean_chunks([Span(0.0, 5.0, " First."), Span(5.0, None, " Last words")], duration_s=7.5)
    assert chunks[-1] == Chunk(5.0, 7.5, " Last words")
    assert summary(assign_speakers(chunks, [turn(0, 5, "A"), turn(5, 7.5, "B")])) == [
        ("A", 0, 5, "First."),
        ("B", 5, 7.5, "Last words"),
    ]


times = st.floats(min_value=0, max_value=100, allow_nan=False, allow_infinity=False)
texts = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12)


@st.composite
def transcripts(draw):
    raw = draw(st.lists(st.tuples(times, times, texts), max_size=25))
    spans = sorted(raw, key=lambda item: item[0])
    if spans and draw(st.booleans()):
        start, _, text = spans[-1]
        spans[-1] = (start, None, text)
    return clean_chunks([Span(*span) for span in spans], duration_s=100.0)


turn_lists = st.lists(
    st.tuples(times, st.floats(min_value=0.01, max_value=20), st.sampled_from(["A", "B", "C"])).map(
        lambda item: turn(item[0], item[0] + item[1], item[2])
    ),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(chunks=transcripts(), turns=turn_lists)
def test_every_chunk_lands_once_in_order_with_its_text(chunks, turns) -> None:
    segments = assign_speakers(chunks, turns)
    flattened = [c for segment in segments for c in segment.chunks]
    assert flattened == list(chunks)
    for segment in segments:
        assert segment.text == "".join(c.text for c in segment.chunks).strip()
        assert segment.start_s <= segment.end_s
    for previous, current in itertools.pairwise(segments):
        assert previous.speaker != current.speaker
        assert previous.start_s <= current.start_s
    starts = [c.start_s for c in chunks]
    assert starts == sorted(starts)
    assert all(0 <= c.start_s <= c.end_s <= 100.0 for c in chunks)
    labels = {t.speaker for t in turns} or {UNKNOWN_SPEAKER}
    assert {segment.speaker for segment in segments} <= labels


# --- by word -----------------------------------------------------------------------------------


def test_speaker_change_inside_a_chunk_splits_it_at_the_word() -> None:
    reply = timed_chunk(
        word(0.2, 0.6, " Right."), word(1.0, 1.4, " Okay,"), word(1.5, 1.8, " got"), word(1.8, 2.2, " it.")
    )
    segments = assign_speakers([reply], [turn(0.0, 0.8, "A"), turn(0.9, 2.5, "B")])
    assert summary(segments) == [("A", 0.2, 0.6, "Right."), ("B", 1.0, 2.2, "Okay, got it.")]
    assert [w.text for w in segments[1].chunks[0].words] == [" Okay,", " got", " it."]


def test_a_late_turn_boundary_does_not_cut_a_sentence() -> None:
    # "four." overlaps B more than A, but only within TURN_EDGE_S of A's turn: maybe jitter.
    sentence = timed_chunk(
        word(0.0, 0.4, " I"), word(0.4, 0.8, " tested"), word(0.8, 1.2, " all"), word(1.2, 1.6, " four.")
    )
    answer = timed_chunk(word(2.0, 2.5, " Good."))
    segments = assign_speakers([sentence, answer], [turn(0.0, 1.38, "A"), turn(1.38, 3.0, "B")])
    assert speaker_of(sentence.words[-1], [turn(0.0, 1.38, "A"), turn(1.38, 3.0, "B")]) == "B"
    assert summary(segments) == [("A", 0.0, 1.6, "I tested all four."), ("B", 2.0, 2.5, "Good.")]


def test_a_change_with_evidence_splits_an_unpunctuated_sentence() -> None:
    words = [word(0.0, 0.5, " yes"), word(0.5, 1.0, " yes"), word(1.2, 1.8, " I"), word(1.8, 2.4, " agree")]
    segments = assign_speakers([timed_chunk(*words)], [turn(0.0, 1.1, "A"), turn(1.1, 3.0, "B")])
    assert summary(segments) == [("A", 0.0, 1.0, "yes yes"), ("B", 1.2, 2.4, "I agree")]


def test_a_short_turn_inside_a_sentence_keeps_its_word() -> None:
    # "Great, did you check" as Whisper may write two speakers' lines: "Great," lies in A's short
    # turn, away from B's turn, so it is A's even inside B's sentence.
    words = [
        word(13.8, 14.1, " Great,"),
        word(14.4, 14.6, " did"),
        word(14.6, 14.8, " you"),
        word(14.8, 15.2, " check?"),
    ]
    turns = [turn(13.8, 14.14, "A"), turn(14.39, 16.4, "B")]
    assert summary(assign_speakers([timed_chunk(*words)], turns)) == [
        ("A", 13.8, 14.1, "Great,"),
        ("B", 14.4, 15.2, "did you check?"),
    ]


def test_a_short_reply_inside_another_speakers_sentence_keeps_its_word() -> None:
    # "We'll write some help": Whisper wrote B's quick "right" into A's sentence. B's turn and
    # its gaps last under 0.5 s, so no part of it is farther than TURN_EDGE_S from A's turns,
    # but "write" fills most of it: a reply, not jitter. "some" lies mostly outside it: A's.
    words = [word(7.16, 7.52, " We'll"), word(7.52, 7.8, " write"), word(7.8, 8.16, " some"), word(8.16, 8.5, " help.")]
    turns = [turn(6.39, 7.55, "A"), turn(7.6, 7.97, "B"), turn(8.03, 9.35, "A")]
    assert [speaker_of(w, turns) for w in words] == ["A", "B", "B", "A"]
    assert summary(assign_speakers([timed_chunk(*words)], turns)) == [
        ("A", 7.16, 7.52, "We'll"),
        ("B", 7.52, 7.8, "write"),
        ("A", 7.8, 8.5, "some help."),
    ]


def test_a_late_boundary_before_a_short_reply_does_not_cut_a_sentence() -> None:
    # B's short reply "Good." comes right after A's sentence and B's turn starts 0.22 s early:
    # "four." overlaps B more, but fills only a third of B's turn: jitter, not a reply.
    sentence = timed_chunk(word(0.4, 0.8, " tested"), word(0.8, 1.2, " all"), word(1.2, 1.6, " four."))
    answer = timed_chunk(word(1.6, 2.0, " Good."))
    turns = [turn(0.0, 1.38, "A"), turn(1.38, 2.0, "B")]
    assert speaker_of(sentence.words[-1], turns) == "B"
    assert summary(assign_speakers([sentence, answer], turns)) == [
        ("A", 0.4, 1.6, "tested all four."),
        ("B", 1.6, 2.0, "Good."),
    ]


def test_chunks_with_and_without_words_mix() -> None:
    chunks = [chunk(0, 2, " Untimed."), timed_chunk(word(2.0, 2.5, " A"), word(3.0, 3.5, " b."))]
    segments = assign_speakers(chunks, [turn(0, 2.7, "A"), turn(2.7, 4, "B")])
    assert summary(segments) == [("A", 0, 2.5, "Untimed. A"), ("B", 3.0, 3.5, "b.")]


word_texts = st.sampled_from([" so", " right.", " ok,", " yes?", " no", " well", " it's", " fine!", "-", " 12"])


@st.composite
def timed_transcripts(draw):
    """Chunks as clean_chunks makes them, most with words inside their span."""
    raw = draw(
        st.lists(st.tuples(times, times, st.lists(st.tuples(times, times, word_texts), max_size=6)), max_size=12)
    )
    spans = []
    for start, end, raw_words in sorted(raw, key=lambda item: item[0]):
        end = max(start, end)
        words = tuple(
            word(start + (end - start) * a / 100, start + (end - start) * max(a, b) / 100, text)
            for a, b, text in sorted(raw_words)
        )
        text = "".join(w.text for w in words) or " untimed"
        spans.append(Span(start, end, text, words))
    return clean_chunks(spans, duration_s=100.0)


@settings(max_examples=300, deadline=None)
@given(chunks=timed_transcripts(), turns=turn_lists)
def test_every_word_lands_once_in_order(chunks, turns) -> None:
    segments = assign_speakers(chunks, turns)
    pieces = [piece for segment in segments for piece in segment.chunks]
    assert [w for piece in pieces for w in piece.words] == [w for c in chunks for w in c.words]
    assert "".join(piece.text for piece in pieces) == "".join(c.text for c in chunks)
    for piece in pieces:
        assert piece.start_s <= piece.end_s
        assert all(piece.start_s <= w.start_s <= w.end_s <= piece.end_s for w in piece.words)
    for segment in segments:
        assert segment.text == "".join(piece.text for piece in segment.chunks).strip()
    for previous, current in itertools.pairwise(segments):
        assert previous.speaker != current.speaker
        assert previous.start_s <= current.start_s


def brute_force_speaker(span: Word, turns: list[SpeakerTurn]) -> str:
    """The rule written plainly over every turn: most overlap (a tie to the speaker whose first
    turn comes first), else the nearest turn."""
    ordered = sorted(turns, key=lambda t: (t.start_s, t.end_s))
    overlap: dict[str, float] = {}
    for t in ordered:
        amount = min(span.end_s, t.end_s) - max(span.start_s, t.start_s)
        if amount > 0:
            overlap[t.speaker] = overlap.get(t.speaker, 0.0) + amount
    if overlap:
        best = max(overlap.values())
        return next(t.speaker for t in ordered if overlap.get(t.speaker) == best)
    middle = (span.start_s + span.end_s) / 2

    def distance(t: SpeakerTurn) -> float:
        return 0.0 if t.start_s <= middle <= t.end_s else min(abs(middle - t.start_s), abs(middle - t.end_s))

    return min(ordered, key=distance).speaker


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 600), st.floats(0.01, 90), st.sampled_from("ABC")), min_size=1, max_size=30
    ),
    st.floats(0, 700),
    st.floats(0.01, 2),
)
def test_speaker_of_looks_only_near_the_span_yet_follows_the_rule_over_every_turn(items, start, length) -> None:
    # Turns are indexed by time (long recordings have thousands): the answer must not change.
    turns = [turn(s, s + d, name) for s, d, name in items]
    span = word(start, start + length, " w")
    assert speaker_of(span, turns) == brute_force_speaker(span, turns)
