"""The packaged CTranslate2 checkpoints as folders faster-whisper can load."""

from __future__ import annotations

import shutil
from pathlib import Path


def faster_whisper_dir(name: str, into: Path) -> Path:
    """The packaged CTranslate2 checkpoint `name` (e.g. "whisper-base") in a folder faster-whisper
    loads: it needs one model.bin, so a checkpoint split over packages is joined into `into`."""
    import whosaid.cli.setup_models as setup_models
    from whosaid.convert.source import resolve_source

    resolved = resolve_source(setup_models.checkpoint_sources(name))
    if len(resolved.model_parts) == 1:
        return resolved.model_parts[0].parent
    into.mkdir(parents=True, exist_ok=True)
    with open(into / "model.bin", "wb") as out:
        for part in resolved.model_parts:
            with open(part, "rb") as handle:
                shutil.copyfileobj(handle, out)
    for path in (resolved.config, resolved.tokenizer, resolved.vocabulary):
        (into / path.name).symlink_to(path)
    return into
