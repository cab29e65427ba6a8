"""The conversion itself: read, map, build the transformers model and write it atomically (a
sibling staging directory moved into place), with a marker that says what it was made from."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal, Sequence, Union

from whosaid.config import WHISPER_SAMPLE_RATE_HZ
from whosaid.convert.errors import ConversionError
from whosaid.convert.model_bin import read_ct2_model
from whosaid.convert.source import CT2WhisperSource, resolve_source
from whosaid.convert.tokenizer import (
    generation_config_dict,
    load_json,
    read_tokenizer_json,
    read_vocabulary,
    save_tokenizer,
    whisper_token_ids,
)
from whosaid.convert.weights import whisper_dims, whisper_state_dict

OutputDtype = Literal["float32", "float16", "bfloat16"]
OUTPUT_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
# Written into every converted directory; `conversion_is_current` compares it with the source.
MARKER_FILE = "whosaid_conversion.json"
# Bump when the converter's output changes, so set-up scripts convert again.
CONVERTER_VERSION = 1


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
        raise ConversionError(f"unsupported dtype {dtype!r}; choose from {choices}")
    output_dir = Path(output_dir)
    resolved = resolve_source(source)
    source_folders = {
        folder
        for path in resolved.files()
        for folder in (*path.absolute().parents, *path.resolve().parents)
    }
    if output_dir.resolve() in source_folders or output_dir.absolute() in source_folders:
        raise ConversionError(f"{output_dir} holds the source checkpoint; choose another output")
    if output_dir.exists() and any(output_dir.iterdir()) and not overwrite:
        raise ConversionError(f"{output_dir} is not empty; pass overwrite=True (--overwrite) or choose another output")

    checkpoint = read_ct2_model(resolved.model_parts)
    dims = whisper_dims(checkpoint)
    state = whisper_state_dict(checkpoint, dims)
    del checkpoint
    tokenizer_json = read_tokenizer_json(resolved.tokenizer)
    ids = whisper_token_ids(tokenizer_json, read_vocabulary(resolved.vocabulary), dims)
    generation = generation_config_dict(load_json(resolved.config), dims, ids)

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
        raise ConversionError(f"mapping error: missing {missing}, unexpected {unexpected}; the converter does not "
            "know this checkpoint's layout")
    model.tie_weights()
    model.generation_config = GenerationConfig(**generation)
    model.eval()

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        _apply_umask(staging, is_dir=True)
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer = save_tokenizer(resolved.tokenizer, tokenizer_json, dims, staging)
        feature_extractor = WhisperFeatureExtractor(
            feature_size=dims.num_mel_bins, sampling_rate=WHISPER_SAMPLE_RATE_HZ
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
