"""`whosaid batch`'s inputs: files, folders, globs and manifests, local or behind a URI, as one
list of recordings, each with the name of its output and its own parameters.

- a file: its output is named after its stem;
- a folder: the audio files below it (the suffixes `whosaid transcribe` takes from a folder),
  named by their path below it, so that same-named files in different subfolders stay apart;
- a glob (`calls/*.wav`, `'calls/**/*.flac'`, `s3://bucket/calls/*.wav`): every file it matches,
  named by its path below the glob's folder (the part before the first wildcard);
- a manifest, a `.csv`, `.jsonl` or `.parquet` table with a `path` column: one recording per
  row; a relative path is read from the manifest's folder, and a row's other columns that are
  request parameters (`language`, `num_speakers`, ...) apply to that recording only. Other
  columns are ignored.
"""

from __future__ import annotations

import glob as globbing
import json
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from whosaid.batch import storage

#: Manifest suffix -> pyarrow reader name.
MANIFEST_SUFFIXES = {".csv": "csv", ".jsonl": "json", ".parquet": "parquet"}
_GLOB_MAGIC = re.compile(r"[*?[]")


class InputError(ValueError):
    """An input that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Recording:
    """One recording to transcribe."""

    #: Local absolute path or URI.
    location: str
    #: Its output's POSIX path below the output folder, without a suffix.
    output_name: str
    #: Request parameters for this recording alone (from a manifest row).
    parameters: dict[str, Any] = field(default_factory=dict)

    def as_row(self) -> dict[str, str]:
        """A Ray Data row: plain strings, so that rows of different parameters share a schema."""
        return {
            "location": self.location,
            "output_name": self.output_name,
            "parameters": json.dumps(self.parameters, sort_keys=True),
        }


def audio_suffixes() -> frozenset[str]:
    from whosaid.cli.transcribe import AUDIO_SUFFIXES

    return AUDIO_SUFFIXES


def parameter_names() -> frozenset[str]:
    from whosaid.config import InferenceConfig

    return frozenset(InferenceConfig.model_fields)


def expand_inputs(specs: Sequence[str], *, warnings: Optional[list[str]] = None) -> list[Recording]:
    """The recordings named by `specs`, in order, each once. Raises InputError for an input that
    does not exist or holds no audio, and when two recordings would get the same output name."""
    recordings: list[Recording] = []
    for spec in specs:
        suffix = posixpath.splitext(spec.rstrip("/"))[1].lower()
        if suffix in MANIFEST_SUFFIXES and not _GLOB_MAGIC.search(spec):
            recordings.extend(read_manifest(spec, warnings=warnings))
        elif _GLOB_MAGIC.search(spec):
            recordings.extend(_glob(spec))
        else:
            recordings.extend(_file_or_folder(spec))
    return _checked(recordings)


def _file_or_folder(spec: str) -> list[Recording]:
    from pyarrow import fs

    location = storage.normalise(spec)
    files, path = storage.filesystem(location)
    kind = files.get_file_info(path).type
    if kind == fs.FileType.File:
        return [Recording(location, _stem(location))]
    if kind != fs.FileType.Directory:
        raise InputError(f"{spec}: no such file or folder")
    suffixes = audio_suffixes()
    found = [name for name in storage.list_files(location) if posixpath.splitext(name)[1].lower() in suffixes]
    if not found:
        raise InputError(f"{spec} holds no audio file ({', '.join(sorted(suffixes))})")
    return [Recording(storage.join(location, name), posixpath.splitext(name)[0]) for name in found]


def _glob(spec: str) -> list[Recording]:
    """Local globs as Python's glob (`**` spans folders); on a URI the pattern is matched with
    fnmatch against the paths below the folder before the first wildcard."""
    import fnmatch

    parts = spec.split("/")
    first_magic = next(index for index, part in enumerate(parts) if _GLOB_MAGIC.search(part))
    base = storage.normalise("/".join(parts[:first_magic]) or ".")
    if storage.is_uri(spec):
        pattern = "/".join(parts[first_magic:])
        matched = [storage.join(base, name) for name in storage.list_files(base) if fnmatch.fnmatch(name, pattern)]
    else:
        matched = sorted(
            storage.normalise(path) for path in globbing.glob(spec, recursive=True) if _is_local_file(path)
        )
    if not matched:
        raise InputError(f"{spec} matches no file")
    return [Recording(location, posixpath.splitext(storage.relative_to(location, base))[0]) for location in matched]


def _is_local_file(path: str) -> bool:
    return os.path.isfile(path)


def read_manifest(spec: str, *, warnings: Optional[list[str]] = None) -> list[Recording]:
    """The recordings a manifest lists, with their parameters. Columns that are neither `path`
    nor a request parameter are listed in `warnings` (once per manifest) and ignored."""
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.parquet
    from pyarrow import ArrowException

    location = storage.normalise(spec)
    files, path = storage.filesystem(location)
    reader = MANIFEST_SUFFIXES[posixpath.splitext(location)[1].lower()]
    try:
        if reader == "parquet":
            table = pyarrow.parquet.read_table(path, filesystem=files)
        else:
            with files.open_input_stream(path) as stream:
                table = (pyarrow.csv.read_csv if reader == "csv" else pyarrow.json.read_json)(stream)
    except FileNotFoundError as error:
        raise InputError(f"manifest {spec}: no such file") from error
    except (ArrowException, OSError) as error:
        raise InputError(f"manifest {spec} cannot be read as {reader}: {error}") from error
    if "path" not in table.column_names:
        raise InputError(f"manifest {spec} has no 'path' column (columns: {', '.join(table.column_names)})")
    known = parameter_names()
    ignored = [name for name in table.column_names if name != "path" and name not in known]
    if ignored and warnings is not None:
        warnings.append(f"manifest {spec}: columns {', '.join(ignored)} are not parameters and were ignored")
    folder = posixpath.dirname(location) if storage.is_uri(location) else os.path.dirname(location)
    recordings = []
    for number, row in enumerate(table.to_pylist(), start=2 if reader == "csv" else 1):
        given = row["path"]
        if not isinstance(given, str) or not given.strip():
            raise InputError(f"manifest {spec}, row {number}: 'path' is empty")
        file_location = _resolve(given.strip(), folder)
        if storage.is_inside(file_location, folder):
            name = posixpath.splitext(storage.relative_to(file_location, folder))[0]
        else:
            name = _stem(file_location)
        parameters = {key: value for key, value in row.items() if key in known and value not in (None, "")}
        recordings.append(Recording(file_location, name, parameters))
    if not recordings:
        raise InputError(f"manifest {spec} lists no recording")
    return recordings


def _resolve(given: str, folder: str) -> str:
    if storage.is_uri(given):
        return storage.normalise(given)
    if storage.is_uri(folder):
        scheme, folder_path = folder.split("://", 1)
        return f"{scheme}://{posixpath.normpath(posixpath.join(folder_path, given))}"
    return storage.normalise(os.path.join(folder, given))


def _stem(location: str) -> str:
    return posixpath.splitext(posixpath.basename(location.replace("\\", "/")))[0]


def _checked(recordings: list[Recording]) -> list[Recording]:
    """Each recording once (the first mention wins); two recordings with one output name are
    refused, as `whosaid transcribe -o` refuses them."""
    by_location: dict[str, Recording] = {}
    by_name: dict[str, str] = {}
    for recording in recordings:
        if recording.location in by_location:
            continue
        other = by_name.get(recording.output_name)
        if other is not None:
            raise InputError(
                f"{other} and {recording.location} would both be written as {recording.output_name}.*; rename one"
            )
        by_location[recording.location] = recording
        by_name[recording.output_name] = recording.location
    return list(by_location.values())
