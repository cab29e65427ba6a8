"""The results table of `whosaid batch`: one row per recording, ok or failed.

Each worker writes its recording's row, as a small JSON record, right after the recording's
output (both atomically), under `OUTPUT/.whosaid-batch/`; these records are the table's durable
form, so a run killed at any point keeps every row it finished. At the end of a run the driver
gathers every record of the folder into `OUTPUT/results.parquet` and `OUTPUT/results.jsonl`
(the same rows, sorted by path). A later run skips the recordings whose record says `ok` and
whose output is there; a failed recording is tried again.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any, Iterable

from whosaid.batch import storage

RECORDS_FOLDER = ".whosaid-batch"
RECORD_SUFFIX = ".json"
PARQUET_NAME = "results.parquet"
JSONL_NAME = "results.jsonl"
OK = "ok"
ERROR = "error"

#: column -> (pyarrow type name, meaning). The one list of the table's columns.
COLUMNS: dict[str, tuple[str, str]] = {
    "path": ("string", "the recording: local absolute path or URI"),
    "output": ("string", "its output file (null when it failed)"),
    "format": ("string", "the output format"),
    "status": ("string", "'ok' or 'error'"),
    "error": ("string", "what went wrong, for a failed recording"),
    "error_type": ("string", "the error's class, e.g. InvalidAudioError"),
    "duration_s": ("float64", "audio duration in seconds (null when it could not be decoded)"),
    "language": ("string", "the language spoken (given or detected)"),
    "speakers": ("list<string>", "the speakers' labels, in order of first speech (empty without a diarizer)"),
    "warnings": ("list<string>", "the transcript's warnings"),
    "decode_s": ("float64", "seconds spent decoding the audio"),
    "transcribe_s": ("float64", "seconds spent on recognition and diarization"),
    "elapsed_s": ("float64", "seconds from the recording's bytes to its written output"),
    "finished_at": ("string", "UTC time the row was written, ISO 8601"),
    "worker": ("string", "host:pid of the worker that ran it"),
}


def record_key(output_name: str, suffix: str) -> str:
    """The record's path below the records folder: the output's own relative path, so each
    output format has its own records."""
    return f"{output_name}{suffix}{RECORD_SUFFIX}"


def record_location(output_dir: str, output_name: str, suffix: str) -> str:
    return storage.join(storage.join(output_dir, RECORDS_FOLDER), record_key(output_name, suffix))


def write_record(output_dir: str, output_name: str, suffix: str, record: dict[str, Any]) -> None:
    text = json.dumps({name: record.get(name) for name in COLUMNS}, ensure_ascii=False)
    storage.write_atomically(record_location(output_dir, output_name, suffix), text.encode("utf-8"))


def read_records(output_dir: str) -> dict[str, dict[str, Any]]:
    """Every record under `output_dir`, by key. A record that cannot be parsed (written by
    something else) is left out: its recording runs again."""
    folder = storage.join(output_dir, RECORDS_FOLDER)
    records = {}
    for key in storage.list_files(folder):
        if not key.endswith(RECORD_SUFFIX):
            continue
        try:
            records[key] = json.loads(storage.read_bytes(storage.join(folder, key)))
        except (OSError, ValueError):
            continue
    return records


def done_keys(output_dir: str, records: dict[str, dict[str, Any]]) -> set[str]:
    """Keys of the records whose recording is done: status ok, and its output is there."""
    outputs = set(storage.list_files(output_dir))
    done = set()
    for key, record in records.items():
        output_relative = key[: -len(RECORD_SUFFIX)]
        if record.get("status") == OK and output_relative in outputs:
            done.add(key)
    return done


def arrow_schema() -> Any:
    import pyarrow as pa

    types = {"string": pa.string(), "float64": pa.float64(), "list<string>": pa.list_(pa.string())}
    return pa.schema([(name, types[kind]) for name, (kind, _) in COLUMNS.items()])


def write_table(output_dir: str, records: Iterable[dict[str, Any]]) -> None:
    """results.parquet and results.jsonl, each written atomically, rows sorted by path."""
    import io

    import pyarrow as pa
    import pyarrow.parquet

    rows = sorted(({name: record.get(name) for name in COLUMNS} for record in records), key=_order)
    table = pa.Table.from_pylist(rows, schema=arrow_schema())
    buffer = io.BytesIO()
    pyarrow.parquet.write_table(table, buffer)
    storage.write_atomically(storage.join(output_dir, PARQUET_NAME), buffer.getvalue())
    lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    storage.write_atomically(storage.join(output_dir, JSONL_NAME), lines.encode("utf-8"))


def _order(row: dict[str, Any]) -> tuple[str, str]:
    return (row.get("path") or "", row.get("format") or "")


def output_relative(output_name: str, suffix: str) -> str:
    return posixpath.normpath(f"{output_name}{suffix}")
