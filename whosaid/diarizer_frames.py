"""The built-in diarizer's time line: embedding windows inside speech regions, a speaker label
per 10 ms frame from the windows' scores, short changes smoothed away, and turns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whosaid.results import SpeakerTurn

# Labels are given per 10 ms frame, the resolution of the energy used to place turn edges.
FRAME_S = 0.01


@dataclass(frozen=True)
class Window:
    region: int
    start_s: float
    end_s: float


def plan_windows(
    regions: list[tuple[float, float]], window_s: float, hop_s: float, min_window_s: float
) -> list[Window]:
    """Windows of `window_s` every `hop_s` (at most) inside each region, the first and last flush
    with its edges; a region shorter than a window is one window; shorter than `min_window_s`, none."""
    windows = []
    for index, (start_s, end_s) in enumerate(regions):
        duration_s = end_s - start_s
        if duration_s < min_window_s:
            continue
        if duration_s <= window_s:
            windows.append(Window(index, start_s, end_s))
            continue
        n_windows = int(np.ceil((duration_s - window_s) / hop_s)) + 1
        step_s = (duration_s - window_s) / (n_windows - 1)
        windows += [Window(index, start_s + i * step_s, start_s + i * step_s + window_s) for i in range(n_windows)]
    return windows



def frame_span(window: Window, region_start_s: float) -> tuple[int, int]:
    """The 10 ms frames of its region that a window covers: [first, last)."""
    first = int(round((window.start_s - region_start_s) / FRAME_S))
    return first, max(first + 1, int(round((window.end_s - region_start_s) / FRAME_S)))


def frame_labels(
    regions: list[tuple[float, float]],
    windows: list[Window],
    scores: np.ndarray,
    min_turn_s: float,
) -> list[np.ndarray]:
    """A speaker index per 10 ms frame of each region: the speaker the covering windows find
    most similar on average. Regions too short for a window take the nearest labelled frame."""
    by_region: dict[int, list[int]] = {}
    for index, window in enumerate(windows):
        by_region.setdefault(window.region, []).append(index)
    labels: list[np.ndarray] = []
    for index, (start_s, end_s) in enumerate(regions):
        n_frames = max(1, int(round((end_s - start_s) / FRAME_S)))
        if index not in by_region:
            labels.append(np.full(n_frames, -1))
            continue
        total = np.zeros((n_frames, scores.shape[1]))
        for window_index in by_region[index]:
            first, last = frame_span(windows[window_index], start_s)
            total[first:last] += scores[window_index]
        region_labels = np.argmax(total, axis=1)
        labels.append(smooth(region_labels, total, int(round(min_turn_s / FRAME_S))))
    fill_unlabelled(regions, labels)
    return labels


def refined_centroids(
    speakers: np.ndarray,
    regions: list[tuple[float, float]],
    windows: list[Window],
    embeddings: np.ndarray,
    labels: list[np.ndarray],
) -> np.ndarray:
    refined = speakers.copy()
    pure: dict[int, list[int]] = {}
    for index, window in enumerate(windows):
        first, last = frame_span(window, regions[window.region][0])
        window_labels = labels[window.region][first:last]
        if len(window_labels) and (window_labels == window_labels[0]).all():
            pure.setdefault(int(window_labels[0]), []).append(index)
    for speaker, members in pure.items():
        refined[speaker] = unit_vectors(embeddings[members].mean(axis=0, keepdims=True))[0]
    return refined


def smooth(labels: np.ndarray, scores: np.ndarray, min_frames: int) -> np.ndarray:
    """Merge runs shorter than `min_frames` into the neighbouring run whose speaker scores
    higher over them, shortest run first, until none is left (or only one run)."""
    labels = labels.copy()
    while True:
        runs = label_runs(labels)
        if len(runs) <= 1:
            return labels
        shortest = min(range(len(runs)), key=lambda i: runs[i][1] - runs[i][0])
        first, last, _ = runs[shortest]
        if last - first >= min_frames:
            return labels
        neighbours = [runs[i][2] for i in (shortest - 1, shortest + 1) if 0 <= i < len(runs)]
        labels[first:last] = max(neighbours, key=lambda speaker: scores[first:last, speaker].sum())


def label_runs(labels: np.ndarray) -> list[tuple[int, int, int]]:
    """(first, end, label) of each run of equal labels."""
    changes = np.flatnonzero(np.diff(labels)) + 1
    edges = [0, *changes.tolist(), len(labels)]
    return [(edges[i], edges[i + 1], int(labels[edges[i]])) for i in range(len(edges) - 1)]


def fill_unlabelled(regions: list[tuple[float, float]], labels: list[np.ndarray]) -> None:
    labelled = [index for index, region_labels in enumerate(labels) if region_labels[0] >= 0]
    if not labelled:
        for region_labels in labels:
            region_labels[:] = 0
        return
    for index, region_labels in enumerate(labels):
        if region_labels[0] >= 0:
            continue
        middle_s = sum(regions[index]) / 2

        def distance_s(other: int, middle_s: float = middle_s) -> float:
            start_s, end_s = regions[other]
            return 0.0 if start_s <= middle_s <= end_s else min(abs(middle_s - start_s), abs(middle_s - end_s))

        nearest = min(labelled, key=distance_s)
        edge = labels[nearest][0] if regions[nearest][0] > middle_s else labels[nearest][-1]
        region_labels[:] = edge


def speaker_turns(
    regions: list[tuple[float, float]], labels: list[np.ndarray], duration_s: float
) -> tuple[SpeakerTurn, ...]:
    """Turns named SPEAKER_00, SPEAKER_01, ... in order of first appearance, clipped to the audio."""
    names: dict[int, str] = {}
    turns: list[SpeakerTurn] = []
    for (start_s, end_s), region_labels in zip(regions, labels, strict=True):
        for first, last, label in label_runs(region_labels):
            name = names.setdefault(label, f"SPEAKER_{len(names):02d}")
            turn_start_s = max(0.0, start_s + first * FRAME_S)
            turn_end_s = min(duration_s, end_s if last == len(region_labels) else start_s + last * FRAME_S)
            if turn_end_s > turn_start_s:
                turns.append(SpeakerTurn(turn_start_s, turn_end_s, name))
    return tuple(turns)


def unit_vectors(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-10)
