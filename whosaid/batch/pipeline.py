"""`whosaid batch` on Ray Data: recordings -> bytes (Ray tasks) -> transcripts (a pool of actors,
each with its own engine) -> outputs and results rows, streamed: a recording's bytes are read
shortly before an actor is free for it, and each output is written as soon as it is done.

Ray is imported here only, when a batch runs: nothing else of the package needs it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from whosaid.batch import results
from whosaid.batch.inputs import Recording
from whosaid.batch.worker import BatchJob, Transcriber, read_recording

#: Reads in flight at once per actor: enough to have the next recording ready when an actor
#: finishes one, without holding many recordings' bytes in the object store.
READS_PER_ACTOR = 2


@dataclass(frozen=True)
class ClusterOptions:
    #: None: a local cluster on this machine; "auto" or "ray://host:10001": an existing one.
    address: Optional[str] = None
    #: Actors, each with its own engine.
    actors: int = 1
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    progress: bool = True


@dataclass
class Summary:
    """What a run did; `describe()` is the line the CLI prints at the end."""

    files: int = 0
    done: int = 0
    failed: int = 0
    skipped: int = 0
    audio_s: float = 0.0
    wall_s: float = 0.0

    def describe(self) -> str:
        hours = self.audio_s / 3600
        line = (
            f"{self.files} files: done {self.done}, failed {self.failed}, skipped {self.skipped} (done before); "
            f"{hours:.4f} audio hours in {self.wall_s:.1f} s wall"
        )
        if self.wall_s > 0 and self.audio_s > 0:
            speed = self.audio_s / self.wall_s
            line += f": {speed:.2f} audio hours per hour (real-time factor {1 / speed:.3f})"
        return line


def pending(recordings: Sequence[Recording], job: BatchJob) -> tuple[list[Recording], dict[str, dict[str, Any]]]:
    """The recordings still to do (resume: the others' results rows say ok and their outputs are
    there), and every results row of the output folder."""
    from whosaid.formats import FORMATS

    suffix = FORMATS[job.output_format].suffix
    records = results.read_records(job.output_dir)
    done = results.done_keys(job.output_dir, records)
    todo = [r for r in recordings if results.record_key(r.output_name, suffix) not in done]
    return todo, records


def run_batch(
    recordings: Sequence[Recording],
    job: BatchJob,
    options: ClusterOptions,
    *,
    on_row: Optional[Callable[[dict[str, Any]], None]] = None,
) -> Summary:
    """Transcribes the recordings not done yet, then writes the results table. `on_row` hears
    each finished row, on the driver, as it arrives."""
    started = time.perf_counter()
    todo, _ = pending(recordings, job)
    summary = Summary(files=len(recordings), skipped=len(recordings) - len(todo))
    if todo:
        for row in _transcribe_on_ray(todo, job, options):
            if row["status"] == results.OK:
                summary.done += 1
                summary.audio_s += row.get("duration_s") or 0.0
            else:
                summary.failed += 1
            if on_row is not None:
                on_row(row)
    results.write_table(job.output_dir, results.read_records(job.output_dir).values())
    summary.wall_s = time.perf_counter() - started
    return summary


def _transcribe_on_ray(todo: Sequence[Recording], job: BatchJob, options: ClusterOptions) -> Any:
    import json

    import ray

    if not ray.is_initialized():
        ray.init(address=options.address, log_to_driver=True)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = options.progress
    context.enable_operator_progress_bars = options.progress
    rows = [recording.as_row() for recording in todo]
    dataset = (
        ray.data.from_items(rows, override_num_blocks=len(rows))
        # Reading is I/O: it takes no CPU from the actors' reservations.
        .map(read_recording, num_cpus=0, compute=ray.data.TaskPoolStrategy(size=options.actors * READS_PER_ACTOR))
        .map_batches(
            Transcriber,
            fn_constructor_args=(job,),
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=options.actors, max_tasks_in_flight_per_actor=READS_PER_ACTOR),
            num_cpus=options.num_cpus,
            num_gpus=options.num_gpus,
        )
    )
    for row in dataset.iter_rows():
        yield json.loads(row["record"])
