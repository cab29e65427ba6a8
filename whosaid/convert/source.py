"""Finding a CTranslate2 Whisper checkpoint's files: model.bin or its numbered parts (possibly in
several folders, as split packages ship them), config.json, tokenizer.json and the vocabulary."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

from whosaid.convert.errors import ConversionError
from whosaid.convert.model_bin import PART_NAME_PATTERN

_VOCABULARY_FILES = ("vocabulary.json", "vocabulary.txt")


@dataclass(frozen=True)
class CT2WhisperSource:
    """The files of one CTranslate2 Whisper checkpoint, possibly split over several folders."""

    model_parts: tuple[Path, ...]  # model.bin, or model.bin.part1, .part2, ... in order
    config: Path
    tokenizer: Path
    vocabulary: Path

    def files(self) -> tuple[Path, ...]:
        return (*self.model_parts, self.config, self.tokenizer, self.vocabulary)


def _part_number(path: Path) -> Optional[int]:
    match = PART_NAME_PATTERN.match(path.name)
    return int(match.group(1)) if match else None


def _model_files_in(directory: Path) -> list[Path]:
    whole = directory / "model.bin"
    parts = [path for path in directory.iterdir() if _part_number(path) is not None]
    if whole.is_file() and parts:
        raise ConversionError(f"{directory} holds both model.bin and split parts; keep one of them")
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
        raise ConversionError("no source given: pass a CTranslate2 Whisper checkpoint directory")

    model_files: list[Path] = []
    directories: list[Path] = []
    for item in items:
        if not item.exists():
            raise ConversionError(f"source {item} does not exist; pass a CTranslate2 Whisper checkpoint directory")
        directories.append(item if item.is_dir() else item.parent)
        model_files.extend(_model_files_in(item) if item.is_dir() else [item])
    if not model_files:
        folders = ", ".join(map(str, items))
        raise ConversionError(f"no model.bin or model.bin.partN in {folders}; pass the checkpoint's folder")

    numbers = [_part_number(path) for path in model_files]
    if len(model_files) > 1 or numbers[0] is not None:
        if None in numbers:
            names = ", ".join(path.name for path in model_files)
            raise ConversionError(f"cannot mix model.bin with split parts ({names}); pass one or the other")
        present = sorted(number for number in numbers if number is not None)
        if present != list(range(1, len(present) + 1)):
            missing = sorted(set(range(1, max(present) + 1)) - set(present))
            detail = f"part(s) {missing} missing" if missing else f"parts {present} given"
            raise ConversionError(
                f"split model.bin is incomplete: {detail}; pass the folders of all parts "
                f"(got {', '.join(map(str, model_files))})"
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
            "model.bin, config.json, tokenizer.json and vocabulary.txt"
        )

    return CT2WhisperSource(
        model_parts=tuple(model_files),
        config=find(["config.json"], "the CTranslate2 config"),
        tokenizer=find(["tokenizer.json"], "the tokenizer"),
        vocabulary=find(_VOCABULARY_FILES, "the vocabulary"),
    )
