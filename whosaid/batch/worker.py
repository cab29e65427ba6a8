"""The two stages of `whosaid batch` that run on Ray workers: reading a recording's bytes (a
task, through pyarrow's filesystems), and transcribing it (`Transcriber`, a callable class: Ray
Data builds one per actor, so the models load once per actor and serve every recording it gets).

Nothing here imports Ray: these are plain functions and classes that Ray Data calls.
"""

from __future__ import annotations

import json
import os
import posixpath
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Optional

from whosaid.batch import results, storage

if TYPE_CHECKING:
    from whosaid.config import ModelSettings


@dataclass(frozen=True)
class BatchJob:
    """What every actor needs to know: the same for all recordings of a run."""

    model_settings: "ModelSettings"
    output_dir: str
    output_format: str = "json"
    #: Request parameters for every recording; a manifest row's own parameters override them.
    parameters: dict[str, Any] = field(default_factory=dict)
    #: -f html: link the audio by its path from the page, or embed it.
    html_audio: str = "link"


def read_recording(row: dict[str, Any]) -> dict[str, Any]:
    """Adds the recording's bytes (`data`), or why they could not be read (`read_error`): a file
    that cannot be read is a row with its error, not a failed job."""
    try:
        data, read_error = storage.read_bytes(row["location"]), ""
    except (OSError, ValueError) as error:
        data, read_error = b"", str(error) or type(error).__name__
    return {**row, "data": data, "read_error": read_error}


class Transcriber:
    """One per actor: loads the engine once, then transcribes its recordings one by one,
    writing each output and its results row before the next."""

    def __init__(self, job: BatchJob) -> None:
        from whosaid.engine import Engine

        self.job = job
        self.engine = Engine.from_settings(job.model_settings)
        self.worker = f"{socket.gethostname()}:{os.getpid()}"

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[str]]:
        records = []
        for index in range(len(batch["location"])):
            record = self.transcribe_one(
                location=str(batch["location"][index]),
                output_name=str(batch["output_name"][index]),
                parameters=json.loads(str(batch["parameters"][index])),
                data=bytes(batch["data"][index]),
                read_error=str(batch["read_error"][index]),
            )
            records.append(json.dumps(record, ensure_ascii=False))
        return {"record": records}

    def transcribe_one(
        self, *, location: str, output_name: str, parameters: dict[str, Any], data: bytes, read_error: str = ""
    ) -> dict[str, Any]:
        """Transcribes one recording, writes its output then its results row, and returns the
        row. Every failure becomes the row's error."""
        from whosaid.errors import InvalidAudioError, WhosaidError
        from whosaid.formats import FORMATS

        output_format = FORMATS[self.job.output_format]
        record: dict[str, Any] = {"path": location, "format": self.job.output_format}
        started = time.perf_counter()
        try:
            if read_error:
                raise InvalidAudioError(f"cannot read {location}: {read_error}")
            output_location = storage.join(self.job.output_dir, f"{output_name}{output_format.suffix}")
            text, details = self._transcribe(location, output_location, data, parameters)
            storage.write_atomically(output_location, text.encode("utf-8"))
            record.update(details, status=results.OK, output=output_location)
        except WhosaidError as error:
            record.update(status=results.ERROR, error=str(error), error_type=type(error).__name__)
        except Exception as error:  # noqa: BLE001 - one recording's failure must not fail the job
            name = type(error).__name__
            record.update(status=results.ERROR, error=f"{name}: {error}", error_type=name)
        record.update(
            elapsed_s=round(time.perf_counter() - started, 3),
            finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            worker=self.worker,
        )
        results.write_record(self.job.output_dir, output_name, output_format.suffix, record)
        return {name: record.get(name) for name in results.COLUMNS}

    def _transcribe(
        self, location: str, output_location: str, data: bytes, parameters: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """The output's text, rendered as `whosaid transcribe` renders it, and the row's details."""
        from whosaid.formats import FORMATS, Rendering, parameters_for

        parameters = parameters_for(self.job.output_format, {**self.job.parameters, **parameters})
        config, warnings = self.engine.parse_parameters(parameters)
        timing = _Timing()
        # The engine's one job: memory handed back when it fails, and after long audio.
        transcript = self.engine.run_job(data, config, warnings=warnings, listener=timing)
        finished = time.perf_counter()
        audio_src = self._audio_source(location, output_location, data)
        rendering = Rendering(config.task, _stem(location), audio_src)
        text = FORMATS[self.job.output_format].file_text(transcript, rendering)
        details = {
            "duration_s": transcript.duration_s,
            "language": transcript.language,
            "speakers": _speakers_in_order(transcript),
            "warnings": list(transcript.warnings),
            "decode_s": round(timing.accepted_at - timing.started_at, 3),
            "transcribe_s": round(finished - timing.accepted_at, 3),
        }
        return text, details

    def _audio_source(self, location: str, output_location: str, data: bytes) -> Optional[str]:
        """-f html's player: the audio embedded, or linked by its path from the page (its URI
        when either is not local), as `whosaid transcribe` links it."""
        from whosaid.formats import FORMATS

        if not FORMATS[self.job.output_format].plays_audio:
            return None
        from whosaid.ui.view import audio_source

        if self.job.html_audio == "embed":
            return audio_source(data, posixpath.basename(location), "embed")
        if storage.is_uri(location) or storage.is_uri(output_location):
            link = location
        else:
            link = os.path.relpath(location, os.path.dirname(output_location)).replace(os.sep, "/")
        return audio_source(b"", link, "link")


class _Timing:
    """`Engine.run_job`'s listener for a row's timings: the audio is accepted once decoded (and
    the request's known-speaker clips with it); recognition and diarization follow."""

    def __init__(self) -> None:
        self.started_at = time.perf_counter()
        self.accepted_at = self.started_at

    def accepted(self, duration_s: float) -> None:
        self.accepted_at = time.perf_counter()

    def text(self, delta: str) -> None:
        pass


def _stem(location: str) -> str:
    return posixpath.splitext(posixpath.basename(location.replace(os.sep, "/")))[0]


def _speakers_in_order(transcript: Any) -> list[str]:
    """The speakers' labels in order of their first turn (or first words, without turns)."""
    seen: dict[str, None] = {}
    for turn in sorted(transcript.turns, key=lambda turn: turn.start_s):
        seen.setdefault(turn.speaker, None)
    for segment in transcript.speakers:
        seen.setdefault(segment.speaker, None)
    return list(seen)
