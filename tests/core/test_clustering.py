"""The built-in diarizer's speaker count and clustering on synthetic embeddings: voices as
directions, local speakers as rows of (chunks, local speakers), exact outputs. Speaker numbers
are arbitrary (the diarizer renames speakers by first appearance), so results are compared as
partitions: each local speaker named by the first one, in reading order, of its speaker. Also the
built-in diarizer's pure steps around the clustering: speech shares and chunks not embedded."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pytest

from whosaid.speaker_hints import SpeakerHints
from whosaid.speakers.builtin import _follow_neighbours, _shared
from whosaid.speakers.clustering import ClusteringOptions, TooFewSpeakers, cluster_speakers

#: The cut the voices below are placed around (CAM++'s, the built-in diarizer's default).
THRESHOLD = 0.85
OPTIONS = ClusteringOptions(threshold=THRESHOLD)
# Voices as unit vectors with these cosines; Euclidean distances (sqrt(2 - 2 cos)) against the
# threshold: A, B and C are distinct voices, A and B the nearest pair; "a" lies beyond the
# threshold from every voice but nearest A; "á" lies within it from A.
NAMES = ("A", "B", "C", "a", "á")
COSINES = np.array(
    [
        [1.0, 0.3, 0.1, 0.5, 0.8],
        [0.3, 1.0, 0.0, 0.1, 0.2],
        [0.1, 0.0, 1.0, 0.0, 0.1],
        [0.5, 0.1, 0.0, 1.0, 0.4],
        [0.8, 0.2, 0.1, 0.4, 1.0],
    ]
)
DIMENSION = len(NAMES)
VOICES = dict(zip(NAMES, np.linalg.cholesky(COSINES), strict=True))  # rows whose dot products are COSINES

Chunk = Sequence[Optional[tuple[str, float]]]  # per local speaker: (voice, seconds of speech), None if silent


def chunks(*rows: Chunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Embeddings (chunks, local, dimension), NaN where silent; speech_s; trusted (all embedded)."""
    num_local = max(len(row) for row in rows)
    embeddings = np.full((len(rows), num_local, DIMENSION), np.nan)
    speech_s = np.zeros((len(rows), num_local))
    for chunk, row in enumerate(rows):
        for local, speaker in enumerate(row):
            if speaker is not None:
                voice, seconds = speaker
                embeddings[chunk, local] = VOICES[voice]
                speech_s[chunk, local] = seconds
    return embeddings, speech_s, ~np.isnan(embeddings).any(axis=2)


def cluster(
    rows: Sequence[Chunk], hints: SpeakerHints = SpeakerHints(), options: ClusteringOptions = OPTIONS
) -> list[list[Optional[str]]]:
    """The clustering as a partition: each local speaker named after the voice of the first local
    speaker (in reading order) of its speaker, None where not embedded."""
    embeddings, speech_s, trusted = chunks(*rows)
    return partition(cluster_speakers(embeddings, speech_s, trusted, hints, options), rows)


def partition(clusters: np.ndarray, rows: Sequence[Chunk]) -> list[list[Optional[str]]]:
    assert set(clusters[clusters >= 0].tolist()) == set(range(int(clusters.max()) + 1)), "speakers 0..k-1"
    assert ((clusters >= 0) | (clusters == -2)).all()
    names: dict[int, str] = {}
    for chunk, row in enumerate(rows):
        for local, speaker in enumerate(row):
            if speaker is not None:
                names.setdefault(int(clusters[chunk, local]), speaker[0])
    assert len(set(names.values())) == len(names), "two speakers first heard as the same voice: use places"
    return [[names.get(int(speaker)) if speaker >= 0 else None for speaker in row] for row in clusters]


TWO_VOICES: list[Chunk] = [[("A", 1.0), ("B", 1.0)], [("B", 1.0), ("A", 1.0)], [("A", 1.0), None], [("B", 2.0)]]
THREE_VOICES: list[Chunk] = [[("A", 1.0)], [("B", 1.0)], [("C", 1.0)], [("C", 1.0)], [("B", 1.0)], [("A", 1.0)]]


def test_distinct_voices_are_distinct_speakers_and_silent_rows_none() -> None:
    assert cluster(TWO_VOICES) == [["A", "B"], ["B", "A"], ["A", None], ["B", None]]
    assert cluster(THREE_VOICES) == [["A"], ["B"], ["C"], ["C"], ["B"], ["A"]]


def test_voices_closer_than_the_threshold_are_one_speaker() -> None:
    rows: list[Chunk] = [[("A", 2.0)], [("á", 2.0)]]
    assert cluster(rows) == [["A"], ["A"]]
    assert cluster(rows, options=ClusteringOptions(threshold=0.5)) == [["A"], ["á"]]


@pytest.mark.parametrize(
    "hints, expected",
    [
        (SpeakerHints(num_speakers=1), "AAAAAA"),
        (SpeakerHints(num_speakers=2), "AACCAA"),  # A and B, the nearest voices, merge
        (SpeakerHints(num_speakers=3), "ABCCBA"),
        (SpeakerHints(max_speakers=1), "AAAAAA"),
        (SpeakerHints(max_speakers=2), "AACCAA"),
        (SpeakerHints(min_speakers=2, max_speakers=3), "ABCCBA"),
        (SpeakerHints(min_speakers=3), "ABCCBA"),
    ],
)
def test_speaker_hints_are_honoured_exactly(hints: SpeakerHints, expected: str) -> None:
    assert cluster(THREE_VOICES, hints) == [[name] for name in expected]


def test_a_hint_above_the_voices_splits_the_nearest_apart() -> None:
    """Two voices heard as A and the nearby á: the threshold makes them one speaker, a hint of
    two makes them two."""
    rows: list[Chunk] = [[("A", 1.0)], [("á", 1.0)], [("A", 1.0)], [("á", 1.0)]]
    assert cluster(rows) == [["A"], ["A"], ["A"], ["A"]]
    assert cluster(rows, SpeakerHints(num_speakers=2)) == [["A"], ["á"], ["A"], ["á"]]
    assert cluster(rows, SpeakerHints(min_speakers=2)) == [["A"], ["á"], ["A"], ["á"]]


def test_more_speakers_than_the_voices_hold_is_too_few_speakers() -> None:
    # Three points cannot make four speakers, nor one point two.
    for hints in (SpeakerHints(num_speakers=4), SpeakerHints(min_speakers=4, max_speakers=6)):
        with pytest.raises(TooFewSpeakers):
            cluster(THREE_VOICES[:3], hints)
    with pytest.raises(TooFewSpeakers):
        cluster([[("A", 3.0)]], SpeakerHints(min_speakers=2))
    # Nothing embedded at all: no speaker, unless more than one is required.
    assert cluster([[None, None]], SpeakerHints()) == [[None, None]]
    with pytest.raises(TooFewSpeakers):
        cluster([[None, None]], SpeakerHints(num_speakers=2))


def test_a_short_voice_joins_the_nearest_speaker_rather_than_founding_one() -> None:
    """A voice beyond the threshold from the others with less than `min_speaker_s` of speech (a
    cough) is not a speaker: it joins the nearest one. With as much speech in several short
    pieces it is one, and a hint that asks for it makes it one."""
    short: list[Chunk] = [*TWO_VOICES, [("a", 0.5)]]
    assert cluster(short) == [["A", "B"], ["B", "A"], ["A", None], ["B", None], ["A", None]]
    assert cluster(short, SpeakerHints(num_speakers=3))[-1] == ["a", None]
    heard_twice: list[Chunk] = [*TWO_VOICES, [("a", 0.5)], [("a", 0.5)]]
    assert cluster(heard_twice)[-2:] == [["a", None], ["a", None]]
    longer = ClusteringOptions(threshold=THRESHOLD, min_speaker_s=1.5)
    assert cluster(heard_twice, options=longer)[-2:] == [["A", None], ["A", None]]


def test_when_nothing_holds_enough_speech_everything_is_one_speaker() -> None:
    rows: list[Chunk] = [[("A", 0.2), ("B", 0.2)], [("C", 0.2), None]]
    assert cluster(rows) == [["A", "A"], ["A", None]]


def test_local_speakers_of_a_chunk_go_to_different_speakers_while_speakers_remain() -> None:
    """Both local speakers of the last chunk are nearest the speaker of A and á; the assignment
    with the highest total similarity gives the other one B. A third local speaker, with only
    two speakers, goes to its nearest."""
    two: list[Chunk] = [[("A", 2.0), None], [("B", 2.0), None], [("á", 0.5), ("A", 0.5)]]
    assert cluster(two) == [["A", None], ["B", None], ["A", "B"]]
    three: list[Chunk] = [[("A", 2.0), None, None], [("B", 2.0), None, None], [("A", 0.5), ("B", 0.5), ("á", 0.5)]]
    assert cluster(three)[-1] == ["A", "B", "A"]


def test_untrusted_embeddings_only_join_the_speakers_of_trusted_ones() -> None:
    """An embedding of too little clean speech does not found a speaker, however far it lies;
    when none is trusted, the embedded ones decide."""
    rows: list[Chunk] = [[("A", 2.0)], [("B", 2.0)], [("C", 2.0)]]
    embeddings, speech_s, trusted = chunks(*rows)
    trusted[2, 0] = False
    clusters = cluster_speakers(embeddings, speech_s, trusted, SpeakerHints(), OPTIONS)
    assert partition(clusters, rows) == [["A"], ["B"], ["A"]]
    none_trusted = cluster_speakers(embeddings, speech_s, np.zeros_like(trusted), SpeakerHints(), OPTIONS)
    assert partition(none_trusted, rows) == [["A"], ["B"], ["C"]]


@pytest.mark.parametrize("hints", [SpeakerHints(), SpeakerHints(num_speakers=2), SpeakerHints(num_speakers=3)])
def test_the_same_answer_whatever_the_order_of_equal_inputs(hints: SpeakerHints) -> None:
    """Identical embeddings (ties everywhere in the tree) in any chunk or local order: every
    local speaker gets the same speaker as in the original order."""
    rows: list[Chunk] = [
        [("A", 1.0), ("B", 1.0)],
        [("C", 1.0), ("A", 1.0)],
        [("B", 1.0), ("C", 1.0)],
        [("A", 1.0), ("B", 1.0)],
        [("A", 0.5), None],
        [("C", 1.0), ("B", 1.0)],
    ]
    reference = speakers_by_place(rows, np.arange(len(rows)), False, hints)
    assert len(reference) == (hints.num_speakers or 3)
    for seed in range(6):
        order = np.random.default_rng(seed).permutation(len(rows))
        assert speakers_by_place(rows, order, seed % 2 == 1, hints) == reference, seed


def speakers_by_place(
    rows: Sequence[Chunk], order: np.ndarray, reverse: bool, hints: SpeakerHints
) -> set[frozenset[tuple[int, int]]]:
    """Clusters the chunks of `rows` taken in `order`, each chunk's local speakers reversed if
    `reverse`; returns the speakers, each as the set of (chunk, local speaker) places in `rows`."""
    shuffled = [list(rows[index])[::-1] if reverse else list(rows[index]) for index in order]
    embeddings, speech_s, trusted = chunks(*shuffled)
    clusters = cluster_speakers(embeddings, speech_s, trusted, hints, OPTIONS)
    num_local = clusters.shape[1]
    speakers: dict[int, set[tuple[int, int]]] = {}
    for position, index in enumerate(order):
        for local, speaker in enumerate(clusters[position]):
            if speaker >= 0:
                place = (int(index), num_local - 1 - local if reverse else local)
                speakers.setdefault(int(speaker), set()).add(place)
    return {frozenset(members) for members in speakers.values()}


def test_clustering_is_bounded_and_finds_the_voices() -> None:
    rng = np.random.default_rng(1)
    voices = rng.standard_normal((3, 192))
    num_chunks, local = 2400, 2
    truth = rng.integers(3, size=(num_chunks, local))
    truth[:, 1] = (truth[:, 0] + 1) % 3  # two different voices in each chunk
    embeddings = voices[truth] + 0.5 * rng.standard_normal((num_chunks, local, 192))
    speech_s = np.full((num_chunks, local), 0.5)
    options = ClusteringOptions(threshold=THRESHOLD, max_points=1000)
    clusters = cluster_speakers(embeddings, speech_s, np.ones((num_chunks, local), bool), SpeakerHints(), options)
    assert {(int(a), int(b)) for a, b in zip(truth.ravel(), clusters.ravel(), strict=True)} == {
        (voice, int(clusters[truth == voice][0])) for voice in range(3)
    }
    with pytest.raises(TooFewSpeakers):
        cluster_speakers(embeddings[:1], speech_s[:1], np.ones((1, local), bool), SpeakerHints(num_speakers=3), options)


# ------------------------------------------------------- the built-in diarizer around it


def test_speech_shared_by_overlapping_chunks_counts_once() -> None:
    """Four frames of speech per chunk, chunks two frames apart: a frame seen by two chunks adds
    half to each, so the chunks' shares add up to the eight frames of the time line."""
    shares = _shared(np.ones((3, 4, 1)), step_frames=2.0)
    assert shares.ravel().tolist() == [3.0, 2.0, 3.0]
    assert _shared(np.ones((5, 4, 1)), step_frames=1.0).sum() == pytest.approx(8.0)


def test_a_chunk_not_embedded_follows_the_speakers_of_its_neighbours() -> None:
    """X speaks frames 0-5, Y frames 6-11 of the time line; chunks of six frames every three.
    The middle chunk was not embedded and holds Y as its first local speaker, X as its second:
    each takes the speaker its neighbours' local speakers share its frames with."""
    activity = np.zeros((3, 6, 2))
    for chunk in range(3):
        for frame in range(6):
            voice = 0 if chunk * 3 + frame < 6 else 1
            local = 1 - voice if chunk == 1 else voice
            activity[chunk, frame, local] = 1
    clusters = np.array([[0, -2], [-2, -2], [-2, 1]])
    active = activity.sum(axis=1) > 0
    assert _follow_neighbours(activity, clusters, active, step_frames=3.0).tolist() == [[0, -2], [1, 0], [-2, 1]]
