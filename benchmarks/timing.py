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
