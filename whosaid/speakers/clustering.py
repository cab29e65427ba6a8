"""Who is who across chunks: the built-in diarizer's speaker count and clustering.

Each 10 s chunk of segmentation gives up to three local speakers, each with a speaker embedding
and the seconds it speaks alone in the chunk. Embeddings of enough clean speech are clustered
(average linkage on unit vectors); a cluster is a speaker when it holds enough speech, counted in
seconds, so the rule does not depend on the chunk step or the recording's length: a voice heard
for two seconds in an hour is a speaker, a cough is not. Every local speaker then joins its
nearest speaker, at most one local speaker per speaker in a chunk (pyannote's constrained
assignment).

The count looks at the whole file, not only at one cut: where the threshold's cut gives several
speakers, that count and one fewer are compared, and the cut whose speakers are better separated
(the higher silhouette, each embedding weighted by its speech) wins. A voice that drifts over
minutes of talk (a raised voice, another distance to the microphone) then stays one speaker even
where its halves lie further apart than a fixed cut allows. Centroid linkage, which
pyannote's AgglomerativeClustering uses, was replaced: on minutes of two-person talk its two-way
split cut one speaker's outliers off rather than the two voices apart (benchmarks/CHANGELOG.md,
"Who spoke when on recordings it was not tuned on").

Everything here is float64 numpy and scipy's single-threaded linkage: the count is the same
whatever the BLAS or torch thread count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from whosaid.speaker_hints import SpeakerHints

#: Highest speaker count estimated when the request gives no upper bound.
DEFAULT_MAX_SPEAKERS = 20


@dataclass(frozen=True)
class ClusteringOptions:
    # Average-linkage cut, as a Euclidean distance between unit vectors (2 - 2 cos = d^2): the
    # speech holds several voices when it gives more than one speaker, and it is the count where
    # too few embeddings exist to compare cuts. It depends on the embedder: None in the built-in
    # diarizer's options means its embedder's `clustering_threshold`; `cluster_speakers` needs a
    # number.
    threshold: Optional[float] = None
    # A cluster holding less speech than this (seconds, overlapping chunks counted once) is not a
    # speaker; its members join the nearest speaker.
    min_speaker_s: float = 1.0
    # At most this many embeddings are clustered (linkage memory grows with their square); the
    # rest, an even spread of them kept, are assigned to the speakers found.
    max_points: int = 3000
    # When the hints and the threshold disagree, this many other cuts of the tree are tried.
    max_cuts: int = 200
    # The separation of a cut is measured on at most this many embeddings (an even spread of
    # them): its cost grows with their square.
    max_separation_points: int = 1000
    # Cuts of up to this many clusters more than the most speakers allowed are compared: their
    # brief clusters join the speakers.
    max_brief_clusters: int = 5


class TooFewSpeakers(Exception):
    """The speech holds fewer distinct speakers than the hints require."""


def cluster_speakers(
    embeddings: np.ndarray,
    speech_s: np.ndarray,
    trusted: np.ndarray,
    hints: SpeakerHints,
    options: ClusteringOptions,
) -> np.ndarray:
    """Speaker index of each local speaker of each chunk, -2 where the local speaker is not
    embedded (too little speech).

    embeddings: (chunks, local speakers, dimension), NaN rows where not embedded;
    speech_s: (chunks, local speakers), the seconds of speech each local speaker adds to its
    speaker: its frames of speech alone, each divided by the number of chunks that cover it, so
    that a speaker's total is the same whatever the step;
    trusted: (chunks, local speakers), which embeddings hold enough clean speech to be clustered.
    Raises TooFewSpeakers when the hints ask for more speakers than can be found.
    """
    from scipy.cluster.hierarchy import fcluster, linkage

    if options.threshold is None:
        raise ValueError("cluster_speakers needs ClusteringOptions.threshold (the embedder's clustering_threshold)")

    num_chunks, num_local, _ = embeddings.shape
    embedded = ~np.isnan(embeddings).any(axis=2)
    trusted = trusted & embedded
    chunk_index, local_index = np.nonzero(trusted)
    if len(chunk_index) > options.max_points:
        keep = np.linspace(0, len(chunk_index) - 1, options.max_points).round().astype(int)
        chunk_index, local_index = chunk_index[keep], local_index[keep]
    if len(chunk_index) == 0:  # speech, but no chunk with enough of one voice: the embedded ones
        chunk_index, local_index = np.nonzero(embedded)
    if len(chunk_index) == 0:
        if hints.lowest > 1:
            raise TooFewSpeakers()
        return np.where(embedded, 0, -2)

    points = _unit(embeddings[chunk_index, local_index].astype(np.float64))
    point_speech_s = speech_s[chunk_index, local_index]
    if len(points) == 1:
        labels = np.zeros(1, dtype=int)
    else:
        dendrogram = linkage(points, method="average", metric="euclidean")
        labels = _cut(dendrogram, points, point_speech_s, hints, options, fcluster)
    n_speakers = int(labels.max()) + 1
    if n_speakers < hints.lowest:
        raise TooFewSpeakers()

    centroids = _unit(np.stack([points[labels == k].mean(axis=0) for k in range(n_speakers)]))
    return _assign(embeddings, embedded, centroids)


# Fewer embeddings than this say too little to compare cuts by their separation: the threshold
# alone decides.
MIN_POINTS_TO_COMPARE_CUTS = 4
# Separations this close are a tie, which the cut with fewer speakers wins (sums of float64
# products can differ in their last bits with the BLAS kernel; a tie must not).
SEPARATION_TIE = 1e-9


def _cut(dendrogram, points, speech_s, hints, options, fcluster) -> np.ndarray:
    """Labels 0..k-1 of the points for the speaker count the hints, the threshold and the
    separation of the cuts give; points of clusters too small to be speakers are given to the
    nearest speaker."""
    n_points = len(points)
    at_threshold = fcluster(dendrogram, options.threshold, criterion="distance") - 1
    estimated = _speakers(at_threshold, speech_s, options.min_speaker_s)
    target = int(np.clip(len(estimated), hints.lowest, hints.highest(DEFAULT_MAX_SPEAKERS)))
    if target >= 2 and n_points >= MIN_POINTS_TO_COMPARE_CUTS:
        # The threshold's count, or one speaker fewer where that separates the voices better.
        fewest = target if hints.lowest >= target else max(2, hints.lowest, target - 1)
        separated = _best_separated(dendrogram, points, speech_s, (fewest, target), options, fcluster)
        if separated is not None:
            return separated
    if len(estimated) == target:
        return _relabel(at_threshold, estimated, points)
    # Another cut of the same tree: the number of clusters nearest the threshold's that gives the
    # target number of speakers.
    start = int(at_threshold.max()) + 1
    candidates = sorted(range(1, n_points + 1), key=lambda n: (abs(n - start), n))[: options.max_cuts]
    for n_clusters in candidates:
        labels = fcluster(dendrogram, n_clusters, criterion="maxclust") - 1
        speakers = _speakers(labels, speech_s, options.min_speaker_s)
        if len(speakers) == target:
            return _relabel(labels, speakers, points)
    if target < hints.lowest or target > n_points:
        raise TooFewSpeakers()
    # No cut has exactly that many clusters with enough speech: the largest clusters of the
    # finest cut that has that many clusters at all.
    labels = fcluster(dendrogram, target, criterion="maxclust") - 1
    sizes = np.bincount(labels, weights=speech_s)
    if len(sizes) < hints.lowest:
        raise TooFewSpeakers()
    return _relabel(labels, list(np.argsort(-sizes, kind="stable")[:target]), points)


def _best_separated(dendrogram, points, speech_s, counts, options, fcluster) -> Optional[np.ndarray]:
    """Labels of the cut of the tree into a number of speakers within `counts` (lowest, highest)
    whose speakers are best separated (`_separation`); None when no cut gives such a count."""
    lowest, highest = counts
    sample = np.linspace(0, len(points) - 1, min(len(points), options.max_separation_points)).round().astype(int)
    distances = 1.0 - points[sample] @ points[sample].T
    best: Optional[tuple[float, np.ndarray]] = None
    seen: set[bytes] = set()
    # Clusters too brief to be speakers join others, so a cut may need more clusters than speakers.
    for n_clusters in range(2, min(len(points) - 1, highest + options.max_brief_clusters) + 1):
        labels = fcluster(dendrogram, n_clusters, criterion="maxclust") - 1
        speakers = _speakers(labels, speech_s, options.min_speaker_s)
        if not lowest <= len(speakers) <= highest:
            continue
        labels = _relabel(labels, speakers, points)
        if labels.tobytes() in seen:
            continue
        seen.add(labels.tobytes())
        separation = _separation(distances, labels[sample], speech_s[sample])
        if best is None or separation > best[0] + SEPARATION_TIE:
            best = (separation, labels)
    return None if best is None else best[1]


def _separation(distances: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> float:
    """The silhouette of a partition on cosine distances, each point weighted by its speech: per
    point, (b - a) / max(a, b), a its weighted mean distance to the rest of its speaker, b to the
    nearest other speaker; a point alone in its speaker scores 0."""
    n_speakers = int(labels.max()) + 1
    if n_speakers < 2:
        return -1.0
    members = np.eye(n_speakers)[labels] * weights[:, None]  # (points, speakers)
    totals = distances @ members  # weighted distance sums, self included (distance 0)
    own_weight = members.sum(axis=0)[labels] - weights
    index = np.arange(len(labels))
    speaker_weight = members.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(speaker_weight > 0, totals / speaker_weight, np.inf)
        own = totals[index, labels] / own_weight
    means[index, labels] = np.inf
    nearest = means.min(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = np.where(own_weight > 0, (nearest - own) / np.maximum(own, nearest), 0.0)
    return float(np.average(np.nan_to_num(scores), weights=weights))


def _speakers(labels: np.ndarray, speech_s: np.ndarray, min_speaker_s: float) -> list[int]:
    speech = np.bincount(labels, weights=speech_s)
    return [int(k) for k in np.flatnonzero(speech >= min_speaker_s)]


def _relabel(labels: np.ndarray, speakers: list[int], points: np.ndarray) -> np.ndarray:
    """Labels 0..len(speakers)-1; members of other clusters join the nearest speaker centroid."""
    if not speakers:  # nothing holds enough speech: all of it is one speaker
        return np.zeros(len(labels), dtype=int)
    centroids = _unit(np.stack([points[labels == k].mean(axis=0) for k in speakers]))
    mapping = {k: index for index, k in enumerate(speakers)}
    nearest = np.argmax(points @ centroids.T, axis=1)
    return np.array([mapping.get(int(k), int(n)) for k, n in zip(labels, nearest, strict=True)])


def _assign(embeddings: np.ndarray, embedded: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Each embedded local speaker to the most similar speaker, no two local speakers of one
    chunk to the same speaker while speakers remain (Hungarian assignment per chunk)."""
    from scipy.optimize import linear_sum_assignment

    num_chunks, num_local, _ = embeddings.shape
    clusters = np.full((num_chunks, num_local), -2, dtype=int)
    for chunk in range(num_chunks):
        local = np.flatnonzero(embedded[chunk])
        if len(local) == 0:
            continue
        similarity = _unit(embeddings[chunk, local].astype(np.float64)) @ centroids.T
        rows, columns = linear_sum_assignment(similarity, maximize=True)
        clusters[chunk, local[rows]] = columns
        unassigned = np.setdiff1d(np.arange(len(local)), rows)  # more local speakers than speakers
        clusters[chunk, local[unassigned]] = np.argmax(similarity[unassigned], axis=1)
    return clusters


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
