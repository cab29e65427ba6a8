"""Timing a call the same way in every benchmark."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable


def median_seconds(run: Callable[[], Any], repeats: int) -> tuple[Any, float, float]:
    """The last result of `repeats` calls of `run`, and their median wall-clock and CPU seconds
    (CPU time: all threads of this process, the part of the cost that other processes on a
    shared machine inflate least)."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = run()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    return result, statistics.median(walls), statistics.median(cpus)


def interleaved_medians(runs: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Each run's median wall-clock seconds over `repeats` rounds that call every run once in
    turn (after one untimed call each), so that all of them meet the same load."""
    for run in runs.values():
        run()
    walls: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            walls[name].append(time.perf_counter() - start)
    return {name: statistics.median(kept) for name, kept in walls.items()}
