"""Decoded samples kept once: in memory while short, in a temporary file past a size.

Four hours at 16 kHz float32 is 0.92 GB; the models only ever look at a window of it (a 30 s
Whisper window, a 10 s segmentation chunk, a 16 s block of voice activity detection). So decoding
writes its samples into memory up to `SPILL_AFTER_S` and, past it, into an unlinked temporary file
(under TMPDIR, which should be a disk, not a RAM file system), and every stage of a job reads the
blocks it needs from there (`SpilledSamples`): the process holds a block at a time however long
the recording. The samples stay float32, bit for bit what the decoder produced, so results do not
change with the length of the recording.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any, BinaryIO, Iterator, Optional, Union

import numpy as np

from whosaid.config import WHISPER_SAMPLE_RATE_HZ

logger = logging.getLogger(__name__)

# Decoded audio longer than this goes to a temporary file (10 minutes: 38 MB in memory before it).
SPILL_AFTER_S = 600.0
# What one read of a spilled recording holds at most, while scanning it block by block.
BLOCK_S = 30.0
_FILE_BUFFER_BYTES = 1 << 20
_FLOAT32 = np.dtype(np.float32)


class SpilledSamples:
    """float32 mono samples in an unlinked temporary file, read by slices as a 1-D array is
    (`samples[start:stop]` is a new array of those samples), so that code written for an array
    of samples reads a window at a time from it. Reads use `pread` on the file, never a mapping:
    nothing read stays resident after its array is dropped. Safe to read from several threads."""

    ndim = 1
    dtype = _FLOAT32

    def __init__(self, file: BinaryIO, size: int) -> None:
        self._file = file
        self.size = size
        self.shape = (size,)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice):
            raise TypeError(f"spilled samples are read by slices, not by {type(key).__name__}")
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise TypeError("spilled samples are read by contiguous slices")
        out = np.empty(max(0, stop - start), _FLOAT32)
        wanted = memoryview(out).cast("B")
        done = 0
        while done < len(wanted):
            read = _read_into(self._file.fileno(), wanted[done:], start * _FLOAT32.itemsize + done)
            if read <= 0:
                raise OSError(f"the temporary audio file ended {len(wanted) - done} bytes early")
            done += read
        return out

    def mapped(self) -> np.ndarray:
        """The samples as one array mapped from the file (copy on write): for code that needs a
        real array of the whole recording. Its pages become resident as they are read."""
        return np.memmap(self._file, dtype=_FLOAT32, mode="c", shape=self.shape)

    def close(self) -> None:
        self._file.close()


def _read_into(fd: int, buffer: memoryview, offset: int) -> int:
    """pread into `buffer` (no shared file position: safe from several threads at once)."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [buffer], offset)
    data = os.pread(fd, len(buffer), offset)  # macOS has no preadv in Python
    buffer[: len(data)] = data
    return len(data)


#: What every stage reads samples from: an array, or a recording spilled to a file.
Samples = Union[np.ndarray, SpilledSamples]


def blocks(samples: Samples, block_samples: int) -> Iterator[np.ndarray]:
    """The samples in consecutive blocks of `block_samples` (the last one shorter)."""
    for start in range(0, len(samples), block_samples):
        yield samples[start : start + block_samples]


class SampleWriter:
    """float32 samples appended piece by piece: into one array that doubles when full, up to
    `spill_after` samples; past that into a temporary file. Memory follows what has been decoded
    until the spill, then stays at a write buffer. Tracks whether every sample is finite, so that
    no pass over the whole recording is needed to check it."""

    def __init__(self, capacity: int, spill_after: Optional[int] = None) -> None:
        self._spill_after = spill_after
        if spill_after is not None:
            capacity = min(capacity, spill_after)
        self._array = np.empty(max(1, capacity), np.float32)
        self._file: Optional[BinaryIO] = None
        self.size = 0
        self.finite = True

    def append(self, piece: np.ndarray) -> None:
        piece = np.ascontiguousarray(piece, dtype=np.float32)
        self.finite = self.finite and bool(np.isfinite(piece).all())
        end = self.size + len(piece)
        if self._file is None and self._spill_after is not None and end > self._spill_after:
            self._spill()
        if self._file is not None:
            self._file.write(memoryview(piece).cast("B"))
        else:
            if end > len(self._array):
                # In place where the allocator can (realloc; mremap for large arrays): no copy.
                self._array.resize(max(end, 2 * len(self._array)), refcheck=False)
            self._array[self.size : end] = piece
        self.size = end

    def _spill(self) -> None:
        try:
            file: Any = tempfile.TemporaryFile(prefix="whosaid-audio-", buffering=_FILE_BUFFER_BYTES)
            file.write(memoryview(self._array[: self.size]).cast("B"))
        except OSError as error:
            # No writable temporary directory: the request still works, in memory.
            logger.warning("cannot spill decoded audio to a temporary file (%s); keeping it in memory", error)
            self._spill_after = None
            return
        self._file = file
        self._array = np.empty(0, np.float32)

    def finish(self) -> Samples:
        """The samples: an array without spare capacity, or `SpilledSamples`. The writer is
        empty afterwards."""
        if self._file is not None:
            file, self._file = self._file, None
            file.flush()
            return SpilledSamples(file, self.size)
        array, self._array = self._array, np.empty(0, np.float32)
        array.resize(self.size, refcheck=False)
        return array

    def free(self) -> None:
        self._array = np.empty(0, np.float32)
        if self._file is not None:
            self._file.close()
            self._file = None
        self.size = 0


def spill_after_samples(spill_after_s: Optional[float] = None) -> int:
    return int((SPILL_AFTER_S if spill_after_s is None else spill_after_s) * WHISPER_SAMPLE_RATE_HZ)
