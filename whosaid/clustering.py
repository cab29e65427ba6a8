"""Clustering speaker embeddings into speakers, with the number of speakers estimated when the
request does not give it.

Spectral clustering with the normalised maximum eigengap (NME-SC, Park et al., 2019): the
cosine affinity of the embeddings is pruned to each point's p nearest neighbours, and p is
chosen where the Laplacian's largest eigengap is widest relative to p; the position of that gap
is the number of speakers. It needs no threshold tuned per embedding model, which is what made
a plain agglomerative threshold guess wrong speaker counts in both directions. Memory is
O(points²), so callers bound the number of points (`MAX_POINTS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

MAX_POINTS = 1000  # 1000² float64 affinities: 8 MB, and an eigensolve well under a second
DEFAULT_MAX_SPEAKERS = 20
# Fewer neighbours than this leave a graph of near-disconnected pairs and triples whose eigengaps
# count fragments of one voice as speakers (pyannote's 30 s sample came out as 18 speakers).
MIN_NEIGHBOURS = 4
_SEED = 0


@dataclass(frozen=True)
class SpeakerCount:
    """Hints from the request; None where not given."""

    exactly: Optional[int] = None
    at_least: Optional[int] = None
    at_most: Optional[int] = None

    @property
    def lowest(self) -> int:
        return self.exactly or self.at_least or 1

    def bounds(self, n_points: int) -> tuple[int, int]:
        if self.exactly is not None:
            return self.exactly, self.exactly
        highest = min(self.at_most or DEFAULT_MAX_SPEAKERS, n_points)
        return min(self.lowest, highest), highest


def estimate_count(
    embeddings: np.ndarray, count: SpeakerCount = SpeakerCount(), *, min_neighbours: int = MIN_NEIGHBOURS
) -> int:
    """How many speakers the embeddings (unit rows) hold, within `count`'s bounds. Embeddings of
    overlapping windows are near-duplicates of their neighbours: raise `min_neighbours` with the
    overlap. The caller checks that there are at least `count.lowest` points."""
    n_points = len(embeddings)
    lowest, highest = count.bounds(n_points)
    if n_points <= 1 or highest <= 1:
        return max(1, min(lowest, n_points))
    _, estimated = _choose_pruning(_affinity(embeddings), highest, min_neighbours)
    return int(np.clip(estimated, lowest, highest))


def cluster(embeddings: np.ndarray, n_speakers: int, *, min_neighbours: int = MIN_NEIGHBOURS) -> np.ndarray:
    """A speaker index per embedding, 0..n_speakers-1 numbered by first appearance."""
    n_points = len(embeddings)
    if n_points > MAX_POINTS:
        raise ValueError(f"cluster() takes at most {MAX_POINTS} points, got {n_points}")
    if n_points <= 1 or n_speakers <= 1:
        return np.zeros(n_points, dtype=int)
    affinity = _affinity(embeddings)
    neighbours, _ = _choose_pruning(affinity, n_speakers, min_neighbours)
    spectral = _laplacian_eigenvectors(_pruned(affinity, neighbours), n_speakers)
    return _relabel_by_first_appearance(_kmeans(spectral, n_speakers))


def _affinity(embeddings: np.ndarray) -> np.ndarray:
    if len(embeddings) > MAX_POINTS:
        raise ValueError(f"at most {MAX_POINTS} points can be clustered, got {len(embeddings)}")
    return np.clip(embeddings @ embeddings.T, -1.0, 1.0).astype(np.float64)


def _pruned(affinity: np.ndarray, neighbours: int) -> np.ndarray:
    """Keep each row's `neighbours` largest affinities (as 1), drop the rest, symmetrise."""
    order = np.argsort(-affinity, axis=1)[:, :neighbours]
    binary = np.zeros_like(affinity)
    np.put_along_axis(binary, order, 1.0, axis=1)
    return (binary + binary.T) / 2


def _laplacian_spectrum(graph: np.ndarray, n_values: int) -> tuple[np.ndarray, np.ndarray]:
    """The `n_values` smallest eigenvalues of the graph's Laplacian and their eigenvectors."""
    laplacian = np.diag(graph.sum(axis=1)) - graph
    values, vectors = np.linalg.eigh(laplacian)
    return values[:n_values], vectors[:, :n_values]


def _choose_pruning(affinity: np.ndarray, max_speakers: int, min_neighbours: int) -> tuple[int, int]:
    """NME-SC: the neighbour count p whose Laplacian has the widest normalised eigengap, and the
    speaker count that gap implies. Only p that leave the graph connected are candidates."""
    n_points = len(affinity)
    smallest_p = min(min_neighbours, n_points - 1)
    largest_p = max(smallest_p, int(n_points * 0.25))
    candidates = sorted({int(p) for p in np.linspace(smallest_p, largest_p, num=min(20, largest_p - smallest_p + 1))})
    best = (np.inf, 2, 1)
    for p in candidates:
        graph = _pruned(affinity, p)
        values = np.linalg.eigvalsh(np.diag(graph.sum(axis=1)) - graph)
        gaps = np.diff(values[: max_speakers + 1])
        if len(gaps) == 0 or (values[1] < 1e-8 and p != candidates[-1]):
            continue  # a disconnected graph: its zero eigenvalues count components, not speakers
        speakers = int(np.argmax(gaps)) + 1
        normalised_gap = gaps[speakers - 1] / max(values[-1], 1e-10)
        ratio = p / max(normalised_gap, 1e-10)
        if ratio < best[0]:
            best = (ratio, p, speakers)
    return best[1], best[2]


def _laplacian_eigenvectors(graph: np.ndarray, n_speakers: int) -> np.ndarray:
    _, vectors = _laplacian_spectrum(graph, n_speakers)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-10)


def _kmeans(points: np.ndarray, k: int, *, iterations: int = 50) -> np.ndarray:
    """k-means with k-means++ seeding from a fixed seed: the same input gives the same labels."""
    rng = np.random.default_rng(_SEED)
    centres = [points[rng.integers(len(points))]]
    for _ in range(1, k):
        distance = np.min([np.sum((points - centre) ** 2, axis=1) for centre in centres], axis=0)
        total = distance.sum()
        index = rng.choice(len(points), p=distance / total) if total > 0 else rng.integers(len(points))
        centres.append(points[index])
    centre_array = np.array(centres)
    labels = np.zeros(len(points), dtype=int)
    for _ in range(iterations):
        distances = ((points[:, None, :] - centre_array[None, :, :]) ** 2).sum(axis=2)
        new_labels = distances.argmin(axis=1)
        if np.array_equal(new_labels, labels) and _ > 0:
            break
        labels = new_labels
        for cluster_index in range(k):
            members = points[labels == cluster_index]
            if len(members):
                centre_array[cluster_index] = members.mean(axis=0)
    return labels


def _relabel_by_first_appearance(labels: np.ndarray) -> np.ndarray:
    mapping: dict[int, int] = {}
    for label in labels:
        mapping.setdefault(int(label), len(mapping))
    return np.array([mapping[int(label)] for label in labels], dtype=int)


def centroids(embeddings: np.ndarray, labels: np.ndarray, n_speakers: int) -> np.ndarray:
    """The unit mean embedding of each speaker: (n_speakers, dim)."""
    means = np.stack([embeddings[labels == speaker].mean(axis=0) for speaker in range(n_speakers)])
    return means / np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-10)
