"""The speed benchmark's worker processes: one implementation on one clip, loaded in its own
process (so that its peak memory is its own) and run on request, and the interleaved rounds that
drive them.

The parent starts each worker as `python -m benchmarks.asr.speed_worker JOB.json` from the repository
root; the worker answers on stdout with single JSON lines.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from benchmarks.asr.speed_implementations import IMPLEMENTATIONS, Job
from benchmarks.common.clips import build_clip
from benchmarks.common.environment import REPO_ROOT, load_average, omp_environment


def _memory_mib(field: str) -> Optional[float]:
    """VmRSS (now) or VmHWM (peak) of this process from /proc, in MiB; the peak falls back to
    getrusage where /proc is missing."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    if field == "VmHWM":
        import resource

        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1024**2, 1)
    return None


PROTOCOL_PREFIX = "@@speed-worker@@ "


def worker_main(job_path: str) -> int:
    """Load, say so, then run the clip once per "run" line on stdin; "finish" reports the peak
    memory and exits. Replies are single JSON lines on the original stdout; whatever the
    libraries print goes to stderr. Runs in a fresh process, so the peak memory is this job's alone."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def reply(message: dict[str, Any]) -> None:
        protocol.write(PROTOCOL_PREFIX + json.dumps(message) + "\n")

    job = Job(**json.loads(Path(job_path).read_text()))
    clip = build_clip(job.clip)
    started = time.perf_counter()
    run = IMPLEMENTATIONS[job.implementation].load(job)
    reply({"load_s": time.perf_counter() - started, "rss_after_load_mib": _memory_mib("VmRSS")})
    for line in sys.stdin:
        if line.strip() == "run":
            started = time.perf_counter()
            output = run(clip.samples)
            reply({"time_s": time.perf_counter() - started, "output": output})
        elif line.strip() == "finish":
            break
    reply({"peak_rss_mib": _memory_mib("VmHWM")})
    return 0


class WorkerError(RuntimeError):
    pass


class Worker:
    """One implementation on one clip, loaded in its own process and run on request."""

    def __init__(self, job: Job, scratch: Path, env: dict[str, str], verbose: bool) -> None:
        self.job = job
        job_path = scratch / f"{job.implementation}-{job.clip}.json"
        job_path.write_text(json.dumps(dataclasses.asdict(job)))
        self.log_path = scratch / f"{job.implementation}-{job.clip}.log"
        self._log = None if verbose else open(self.log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.asr.speed_worker", str(job_path)],
            cwd=REPO_ROOT,  # where `-m benchmarks...` finds the package
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )

    def request(self, command: Optional[str], timeout_s: float) -> dict[str, Any]:
        """Send `command` (None: only wait, for the load) and read the reply."""
        import select

        assert self.process.stdin is not None and self.process.stdout is not None
        if command is not None:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerError(f"no reply within {timeout_s:.0f} s")
            readable, _, _ = select.select([self.process.stdout], [], [], remaining)
            if not readable:
                continue
            line = self.process.stdout.readline()
            if not line:
                raise WorkerError(f"worker exited with {self.process.wait()}")
            if line.startswith(PROTOCOL_PREFIX):
                return json.loads(line[len(PROTOCOL_PREFIX) :])

    def log_tail(self) -> str:
        return self.log_path.read_text()[-4000:] if self.log_path.is_file() else ""

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self._log is not None:
            self._log.close()


def measure_interleaved(
    jobs: Sequence[Job], *, warmup: int, repeats: int, timeout_s: float, verbose: bool, omp_wait_policy: str
) -> list[dict[str, Any]]:
    """Every job of one clip loaded in its own process (one after another, so loads do not
    overlap), then run in rounds: one run of each implementation per round, so that all of them
    meet the same load on a shared machine. The first `warmup` rounds are not timed. One record
    per job: the times, the last output, load and peak memory, or the error and the log's tail."""
    env = dict(
        os.environ, TRANSFORMERS_VERBOSITY="error", PYANNOTE_METRICS_ENABLED="false", **omp_environment(omp_wait_policy)
    )
    records: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="whosaid-speed-") as scratch:
        workers: dict[int, Worker] = {}
        try:
            for index, job in enumerate(jobs):
                started = time.perf_counter()
                workers[index] = Worker(job, Path(scratch), env, verbose)
                records[index] = {"job": dataclasses.asdict(job), "warmup_s": [], "times_s": []}
                try:
                    records[index].update(workers[index].request(None, timeout_s))
                except WorkerError as error:
                    records[index].update(error=f"loading: {error}", log_tail=workers.pop(index).log_tail())
                records[index]["process_s"] = time.perf_counter() - started
            for record in records.values():
                record["load_average_before"] = load_average()
            for round_number in range(warmup + repeats):
                for index, worker in list(workers.items()):
                    try:
                        reply = worker.request("run", timeout_s)
                    except WorkerError as error:
                        records[index].update(error=f"run {round_number + 1}: {error}", log_tail=worker.log_tail())
                        workers.pop(index).close()
                        continue
                    key = "warmup_s" if round_number < warmup else "times_s"
                    records[index][key].append(reply["time_s"])
                    records[index]["output"] = reply["output"]
            for index, worker in workers.items():
                records[index]["load_average_after"] = load_average()
                try:
                    records[index].update(worker.request("finish", timeout_s))
                except WorkerError as error:
                    records[index].update(error=f"finishing: {error}", log_tail=worker.log_tail())
        finally:
            for worker in workers.values():
                worker.close()
    return [records[index] for index in range(len(jobs))]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m benchmarks.asr.speed_worker JOB.json (started by benchmarks.asr.speed)")
    sys.exit(worker_main(sys.argv[1]))
