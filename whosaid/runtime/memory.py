"""Giving memory back after long requests, and after failed ones.

A 20-minute request left the process holding 2.4 GB of its 3.5 GB peak: freed blocks stay in
glibc's heap arenas (and PyTorch's CUDA cache) unless asked to return them. Worth a few
milliseconds after long audio, not after every short request. A failed request may have held as
much (audio decoded up to the length limit, a model's tensors), and its exception keeps the
locals of every frame it passed through alive: those are dropped before memory is returned.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import traceback
from typing import Any, Iterator, Optional

logger = logging.getLogger(__name__)

#: Audio at least this long is followed by `release_memory()`.
RELEASE_AFTER_AUDIO_S = 60.0

#: glibc's mallopt parameter for the size from which blocks are mapped on their own (M_MMAP_THRESHOLD).
M_MMAP_THRESHOLD = -3
#: Blocks of at least this many bytes are mapped on their own and unmapped when freed, kept fixed:
#: a batch's large tensors (a part's keys and values, encoder states) go back to the OS when freed,
#: while the decoder's per-step tensors, smaller, reuse the heap (mapping and faulting in each of
#: those again at every step is what glibc's initial 128 kB cost: benchmarks/CHANGELOG.md, "The
#: decoder's parts at a 4 MiB mmap threshold").
MMAP_THRESHOLD_BYTES = 4 * 2**20


def freeze_loaded_objects() -> None:
    """Once models are loaded: collect what loading left, then move every object the collector
    tracks (the models, the libraries' modules and tables: hundreds of thousands) out of its reach
    (`gc.freeze`). Collections after a request then walk only what was made since, not the whole
    process (what that saves: benchmarks/CHANGELOG.md, "Half copies of the weights"). Frozen objects
    are still freed when their last reference goes; only garbage in reference cycles waits, until
    the next call: each call first gives the collector back what an earlier one froze (a process
    that loads models again, such as a test run, frees the cycles of those it dropped)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def unmap_freed_large_blocks() -> bool:
    """Make glibc map every block of MMAP_THRESHOLD_BYTES or more on its own, so that freeing it
    hands it back to the OS at once. By default glibc raises that threshold each time such a block
    is freed (up to 32 MB), and from then on the tensors of a batch of windows (keys and values,
    activations: MBs each) come from its heap, where what they leave stays with the process and
    the next batch peaks on top of it. Not when the operator set MALLOC_MMAP_THRESHOLD_ (glibc
    reads it). Returns whether the threshold was set."""
    import os

    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def release_memory(*, collect_cycles: bool = True) -> None:
    """Collect garbage, return free heap pages to the OS (glibc) and free the CUDA cache.
    `collect_cycles=False` skips the collection: a full one walks every object the collector
    tracks and not frozen (`freeze_loaded_objects`), and costs far more than the rest."""
    if collect_cycles:
        gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def release_memory_after(duration_s: float) -> None:
    """`release_memory()` once a request's audio of `duration_s` is done with, when it lasted
    at least RELEASE_AFTER_AUDIO_S."""
    if duration_s >= RELEASE_AFTER_AUDIO_S:
        release_memory()


def release_memory_between_stages(duration_s: float) -> None:
    """Between the stages of one job on audio of at least RELEASE_AFTER_AUDIO_S: the heap pages
    the last stage freed go back to the OS, without a garbage collection (the job's objects are
    still alive)."""
    if duration_s >= RELEASE_AFTER_AUDIO_S:
        release_memory(collect_cycles=False)


@contextlib.contextmanager
def memory_released_on_failure() -> Iterator[None]:
    """Around one request: when it raises, the finished frames' locals (its samples, tensors)
    are dropped and the memory handed back before the error goes on to the edge. Locals of
    frames still running, the caller's, are the caller's to drop. No garbage collection: with
    the frames cleared, reference counting frees what the request held, and a full collection
    after every refused request would let a stream of bad requests keep the CPU busy."""
    try:
        yield
    except BaseException as error:
        chained: Optional[BaseException] = error
        seen: set[int] = set()
        while chained is not None and id(chained) not in seen:  # the causes' frames too
            seen.add(id(chained))
            traceback.clear_frames(chained.__traceback__)
            chained = chained.__cause__ or chained.__context__
        release_memory(collect_cycles=False)
        raise


@functools.lru_cache(maxsize=1)
def _libc() -> Optional[Any]:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "malloc_trim"):
            return libc
    except OSError:
        pass
    logger.info("malloc_trim is unavailable (not glibc): freed heap memory stays with the process")
    return None
