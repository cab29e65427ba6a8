"""Memory handed back after a failed request: the exception an edge still holds must not keep the
request's samples alive, and the freed heap goes back to the OS."""

from __future__ import annotations

import numpy as np
import pytest

from whosaid.errors import InferenceError
from whosaid.runtime.memory import freeze_loaded_objects, memory_released_on_failure, release_memory

HELD_MB = 200


def resident_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def failing_request() -> None:
    # Many small arrays, as decoding frame by frame leaves them: glibc's heap, not mmap.
    pieces = [np.ones(1024) for _ in range(HELD_MB * 128)]
    raise InferenceError(f"speech recognition failed after {len(pieces)} pieces")


def test_a_failed_requests_memory_goes_back_while_its_exception_is_still_held() -> None:
    release_memory(collect_cycles=False)  # whatever earlier tests left in the heap
    before_mb = resident_mb()
    with pytest.raises(InferenceError) as failed:  # holds the traceback, as an edge's handler does
        with memory_released_on_failure():
            failing_request()
    after_mb = resident_mb()
    assert failed.value.code == "inference_error"
    assert after_mb - before_mb < HELD_MB / 4, f"{before_mb:.0f} MB before, {after_mb:.0f} MB after"


def test_without_it_the_memory_stays_with_the_process() -> None:
    """The measurement can fail: after the same request without the guard, the process still
    holds what it allocated (referenced by the exception, or freed into glibc's heap)."""
    release_memory(collect_cycles=False)
    before_mb = resident_mb()
    with pytest.raises(InferenceError) as failed:
        failing_request()
    assert resident_mb() - before_mb > HELD_MB / 2
    del failed


def test_objects_frozen_after_loading_are_skipped_by_collections_and_freed_by_the_next_load() -> None:
    """What `release_memory` walks after a request is what the request made, not the loaded models;
    a cycle frozen with them is collected when models are loaded again."""
    import gc
    import weakref

    class Node:
        pass

    cycle = Node()
    cycle.self = cycle  # type: ignore[attr-defined]
    alive = weakref.ref(cycle)
    del cycle
    try:
        freeze_loaded_objects()  # what loading an Engine ends with; collects the cycle first
        assert alive() is None
        frozen = Node()
        frozen.self = frozen  # type: ignore[attr-defined]
        kept = weakref.ref(frozen)
        freeze_loaded_objects()
        del frozen
        assert gc.get_freeze_count() > 1000
        gc.collect()
        assert kept() is not None  # frozen: out of the collector's reach
        freeze_loaded_objects()  # the next load unfreezes and collects first
        assert kept() is None
    finally:
        gc.unfreeze()
