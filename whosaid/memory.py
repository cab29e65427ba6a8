"""Giving memory back after long requests.

A 20-minute request left the process holding 2.4 GB of its 3.5 GB peak: freed blocks stay in
glibc's heap arenas (and PyTorch's CUDA cache) unless asked to return them. Worth a few
milliseconds after long audio, not after every short request.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
from typing import Any, Optional

logger = logging.getLogger(__name__)

#: Audio at least this long is followed by `release_memory()`.
RELEASE_AFTER_AUDIO_S = 60.0


def release_memory() -> None:
    """Collect garbage, return free heap pages to the OS (glibc) and free the CUDA cache."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


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
