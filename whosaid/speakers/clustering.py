"""Who is who across chunks: the built-in diarizer's speaker count and clustering.

Each 10 s chunk of segmentation gives up to three local speakers, each with a speaker embedding
and the seconds it speaks alone in the chunk. Embeddings of enough clean speech are clustered
(centroid linkage on unit vectors, as pyannote's AgglomerativeClustering does); a cluster is a
speaker when it holds enough speech, counted in seconds, so the rule does not depend on the
chunk step or the recording's length: a voice heard for two seconds in an hour is a speaker, a
cough is not. Every local speaker then joins its nearest speaker, at most one local speaker per
speaker in a chunk (pyannote's constrained assignment).

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
    # Centroid-linkage cut, as a Euclidean distance between unit vectors (2 - 2 cos = d^2). It
    # depends on the embedder: None in the built-in diarizer's options means its embedder's
    # `clustering_threshold`; `cluster_speakers` needs a number.
    threshold: Optional[float] = None
    # A cluster holding less speech than this (seconds, overlapping chunks counted once) is not a
    # speaker; its members join the nearest speaker.
    min_speaker_s: float = 1.0
    # At most this many embeddings are clustered (linkage memory grows with their square); the
    # rest, an even spread of them kept, are assigned to the speakers found.
    max_points: int = 3000
    # When the hints and the threshold disagree, this many other cuts of the tree are tried.
    max_cuts: int = 200


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
        dendrogram = linkage(points, method="centroid", metric="euclidean")
        labels = _cut(dendrogram, points, point_speech_s, hints, options, fcluster)
    n_speakers = int(labels.max()) + 1
    if n_speakers < hints.lowest:
        raise TooFewSpeakers()

    centroids = _unit(np.stack([points[labels == k].mean(axis=0) for k in range(n_speakers)]))
    return _assign(embeddings, embedded, centroids)


def _cut(dendrogram, points, speech_s, hints, options, fcluster) -> np.ndarray:
    """Labels 0..k-1 of the points for the speaker count the hints and the threshold give; points
    of clusters too small to be speakers are given to the nearest speaker."""
    n_points = len(points)
    at_threshold = fcluster(dendrogram, options.threshold, criterion="distance") - 1
    estimated = _speakers(at_threshold, speech_s, options.min_speaker_s)
    target = int(np.clip(len(estimated), hints.lowest, hints.highest(DEFAULT_MAX_SPEAKERS)))
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
