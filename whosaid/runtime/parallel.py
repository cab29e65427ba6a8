"""Batches side by side on CPU, one thread each, instead of one batch at a time on all threads.

The built-in diarizer's models are made of many small operations: segmentation-3.0's LSTM takes
thousands of steps per chunk, CAM++ a few hundred layers per batch. Split across torch's threads,
each operation ends in a hand-off between them that costs about what the split saves, and far
more when another process competes for the cores (a waiting thread spins on a core its partner
needs). Batches that each run on one thread, as many at once as torch has threads, keep every
core busy with no hand-off inside an operation; and since each batch is computed the same way
whatever the thread count, so is the result.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence, TypeVar

__all__ = ["map_batches", "one_thread_per_operation"]

Batch = TypeVar("Batch")
Result = TypeVar("Result")


def map_batches(function: Callable[[Batch], Result], batches: Sequence[Batch], *, side_by_side: bool) -> list[Result]:
    """[function(batch) for batch in batches], in inference mode. `side_by_side` (CPU work): each
    call on one thread and up to torch's thread count of them at once; otherwise (a GPU) one
    batch after the other, the thread count untouched."""
    import torch

    def run(batch: Batch) -> Result:
        with torch.inference_mode():  # per thread: the workers' too
            return function(batch)

    if not side_by_side:
        return [run(batch) for batch in batches]
    workers = min(torch.get_num_threads(), len(batches))
    with one_thread_per_operation():
        if workers <= 1:
            return [run(batch) for batch in batches]
        with ThreadPoolExecutor(workers, thread_name_prefix="batches") as pool:
            return list(pool.map(run, batches))


_lock = threading.Lock()
_holders = 0
_threads_before = 0


@contextmanager
def one_thread_per_operation() -> Iterator[None]:
    """torch's intra-op thread count set to 1 for the block, then put back. The count is the
    process's: a job running beside this one (MAX_CONCURRENT_JOBS above 1) computes the same
    results meanwhile, on fewer threads, and the count comes back when the last such block
    ends, whatever order they end in."""
    import torch

    global _holders, _threads_before
    with _lock:
        if _holders == 0:
            _threads_before = torch.get_num_threads()
            if _threads_before != 1:
                torch.set_num_threads(1)
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and torch.get_num_threads() != _threads_before:
                torch.set_num_threads(_threads_before)
