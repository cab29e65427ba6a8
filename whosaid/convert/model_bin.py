"""Reader of CTranslate2's `model.bin`, whole or split in parts, read as one stream.

Layout (little-endian), as written by `ctranslate2/specs/model_spec.py` and read by CTranslate2's
`src/models/model.cc`: uint32 binary version; name (uint16 length including a NUL, bytes, NUL);
uint32 spec revision; uint32 variable count; per variable its name, uint8 rank, rank x uint32
dims, uint8 dtype id, uint32 byte count and the raw data; then uint32 alias count and
(alias, target) name pairs.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Optional, Sequence

from whosaid.convert.errors import ConversionError

if TYPE_CHECKING:
    import numpy as np

# Binary versions whose layout this reader knows. Version 4 introduced the dtype id + byte count
# per variable (earlier versions store an item size), aliases exist since version 3, and nothing
# in the layout changed up to version 6, the version CTranslate2 3.x and 4.x write.
SUPPORTED_BINARY_VERSIONS = range(4, 7)
WHISPER_SPEC_NAME = "WhisperSpec"
# CTranslate2 reads WhisperSpec revision 3 only (WhisperModel::current_spec_revision).
SUPPORTED_WHISPER_REVISIONS = (3,)

# CTranslate2 DataType ids (include/ctranslate2/types.h) -> numpy dtype of the stored bytes.
# bfloat16 has no numpy type: its bits are read as uint16 and widened by hand.
_CT2_DTYPES: dict[int, str] = {
    0: "<f4",  # float32
    1: "i1",  # int8
    2: "<i2",  # int16
    3: "<i4",  # int32
    4: "<f2",  # float16
    5: "<u2",  # bfloat16
}
_BFLOAT16_ID = 5
_MAX_RANK = 8  # no CTranslate2 variable has more than 4 dims; a bigger rank means garbage

# What to do about a file that is not (or no longer) a CTranslate2 model.bin.
_NOT_A_MODEL_HINT = "pass a CTranslate2 Whisper checkpoint, fetched again if it was damaged"
PART_NAME_PATTERN = re.compile(r"^model\.bin\.part(\d+)$")


@dataclass
class CT2Checkpoint:
    """The parsed content of a CTranslate2 model.bin."""

    binary_version: int
    spec_name: str
    spec_revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str] = field(default_factory=dict)

    def resolve(self, name: str) -> Optional[str]:
        """The stored variable behind `name`, following aliases the way CTranslate2 does (an
        alias also aliases the target's `_scale`)."""
        if name in self.variables:
            return name
        if name in self.aliases:
            return self.resolve(self.aliases[name])
        if name.endswith("_scale"):
            base = name[: -len("_scale")]
            if base in self.aliases:
                return self.resolve(self.aliases[base] + "_scale")
        return None

    def has(self, name: str) -> bool:
        return self.resolve(name) is not None


class _ConcatenatedReader:
    """Reads several files as one byte stream, so split parts never have to be joined on disk."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._paths = list(paths)
        self._sizes = [path.stat().st_size for path in self._paths]
        self.total_bytes = sum(self._sizes)
        self.offset = 0
        self._index = 0
        self._handle: Optional[BinaryIO] = None

    def __enter__(self) -> _ConcatenatedReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._handle is not None:
            self._handle.close()

    def read(self, num_bytes: int, what: str) -> bytes:
        """Exactly `num_bytes` bytes, or a ConversionError saying what was cut off."""
        if self.offset + num_bytes > self.total_bytes:
            raise ConversionError(
                f"model.bin is truncated: {what} needs {num_bytes} bytes at offset "
                f"{self.offset}, so the file should hold at least {self.offset + num_bytes} "
                f"bytes, but only {self.total_bytes} are available ({self._describe_parts()}); "
                + self._truncation_hint()
            )
        chunks = []
        remaining = num_bytes
        while remaining:
            if self._handle is None:
                self._handle = open(self._paths[self._index], "rb")
            chunk = self._handle.read(remaining)
            if not chunk:
                self._handle.close()
                self._handle = None
                self._index += 1
                continue
            chunks.append(chunk)
            remaining -= len(chunk)
        self.offset += num_bytes
        return b"".join(chunks)

    def _describe_parts(self) -> str:
        return ", ".join(f"{p.name}: {size} bytes" for p, size in zip(self._paths, self._sizes, strict=True))

    def _truncation_hint(self) -> str:
        if any(PART_NAME_PATTERN.match(path.name) for path in self._paths):
            return "a part of the split model.bin is probably missing or incomplete: pass them all"
        return "the download or copy was probably interrupted: fetch the checkpoint again"


def _read_string(reader: _ConcatenatedReader, what: str) -> str:
    (length,) = struct.unpack("<H", reader.read(2, f"the length of {what}"))
    raw = reader.read(length, what)
    if length == 0 or raw[-1] != 0:
        raise ConversionError(f"not a CTranslate2 model.bin: {what} is not NUL-terminated; {_NOT_A_MODEL_HINT}")
    try:
        return raw[:-1].decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConversionError(f"not a CTranslate2 model.bin: {what} is not UTF-8; {_NOT_A_MODEL_HINT}") from e


def _read_uint(reader: _ConcatenatedReader, fmt: str, what: str) -> int:
    return struct.unpack("<" + fmt, reader.read(struct.calcsize(fmt), what))[0]


def read_ct2_model(parts: Sequence[Path]) -> CT2Checkpoint:
    """Parse a CTranslate2 model.bin given as one file or as its split parts, in order.

    Refuses unknown binary versions and non-Whisper specs before reading any weight, so a
    foreign or random file fails fast with a message that says what it is.
    """
    import numpy as np

    with _ConcatenatedReader(parts) as reader:
        binary_version = _read_uint(reader, "I", "the binary version")
        if binary_version not in SUPPORTED_BINARY_VERSIONS:
            hint = "check the order of the parts" if len(parts) > 1 else _NOT_A_MODEL_HINT
            raise ConversionError(
                f"not a CTranslate2 model.bin this converter knows ({parts[0]}): binary version "
                f"{binary_version}, expected {SUPPORTED_BINARY_VERSIONS.start}-"
                f"{SUPPORTED_BINARY_VERSIONS.stop - 1}; {hint}"
            )
        spec_name = _read_string(reader, "the model spec name")
        spec_revision = _read_uint(reader, "I", "the spec revision")
        if spec_name != WHISPER_SPEC_NAME:
            raise ConversionError(
                f"{parts[0]} is a CTranslate2 {spec_name!r} model, not a Whisper model "
                f"({WHISPER_SPEC_NAME!r}); only Whisper checkpoints can be converted"
            )
        if spec_revision not in SUPPORTED_WHISPER_REVISIONS:
            raise ConversionError(
                f"{parts[0]} uses {WHISPER_SPEC_NAME} revision {spec_revision}; this converter "
                f"reads revision {', '.join(map(str, SUPPORTED_WHISPER_REVISIONS))}; "
                "convert the model again with a current ctranslate2"
            )

        variables: dict[str, np.ndarray] = {}
        for index in range(_read_uint(reader, "I", "the variable count")):
            name = _read_string(reader, f"the name of variable {index}")
            rank = _read_uint(reader, "B", f"the rank of {name}")
            if rank > _MAX_RANK:
                raise ConversionError(f"corrupt model.bin: {name} claims rank {rank}; {_NOT_A_MODEL_HINT}")
            shape = struct.unpack(f"<{rank}I", reader.read(4 * rank, f"the shape of {name}"))
            dtype_id = _read_uint(reader, "B", f"the dtype of {name}")
            if dtype_id not in _CT2_DTYPES:
                raise ConversionError(f"corrupt model.bin: {name} has unknown dtype {dtype_id}; {_NOT_A_MODEL_HINT}")
            num_bytes = _read_uint(reader, "I", f"the size of {name}")
            dtype = np.dtype(_CT2_DTYPES[dtype_id])
            expected_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if num_bytes != expected_bytes:
                raise ConversionError(
                    f"corrupt model.bin: {name} of shape {shape} and dtype id {dtype_id} "
                    f"should take {expected_bytes} bytes but declares {num_bytes}; {_NOT_A_MODEL_HINT}"
                )
            data = reader.read(num_bytes, f"the data of {name}")
            array = np.frombuffer(data, dtype=dtype).reshape(shape)
            if dtype_id == _BFLOAT16_ID:
                array = (array.astype(np.uint32) << 16).view(np.float32)
            variables[name] = array

        aliases: dict[str, str] = {}
        for index in range(_read_uint(reader, "I", "the alias count")):
            alias = _read_string(reader, f"alias {index}")
            aliases[alias] = _read_string(reader, f"the target of alias {alias}")

        trailing = reader.total_bytes - reader.offset
        if trailing:
            raise ConversionError(
                f"model.bin has {trailing} unexpected bytes after its last entry: the parts are "
                "probably in the wrong order, duplicated, or not from the same checkpoint: pass each part "
                "once, in order"
            )
    return CT2Checkpoint(binary_version, spec_name, spec_revision, variables, aliases)
