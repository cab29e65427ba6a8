"""`whosaid batch` on Ray Data against `whosaid transcribe` in one process: the same files, the
same models, each command as a user runs it (a fresh process; `batch` starts its own local Ray
cluster), so the wall time includes starting Ray and loading the models.

Prints, per run: wall seconds, audio hours per wall hour, and the peak memory (VmHWM) of the
process that held the models: the `transcribe` process, or each Ray actor. For `batch` it also
prints each actor's own throughput while busy (audio seconds over the seconds its results rows
say it spent), the per-actor figure a cluster's capacity can be projected from.

    python -m benchmarks.server.batch_ray                          # the ten AMI snippets, 1 and 2 actors
    python -m benchmarks.server.batch_ray --actors 1,2,4 --asr-model models/whisper-tiny.en FILE...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common.environment import REPO_ROOT, load_average, result_head, usable_cpus, utc_minute
from benchmarks.server.local_server import memory_mb

AMI_DIR = REPO_ROOT / "tests" / "data" / "ami"
#: Ray's process title of a `whosaid batch` actor.
ACTOR_TITLE = "MapBatches(Transcriber)"


class PeakMemory:
    """Samples the peak RSS (VmHWM) of matching processes until stopped: `pid` itself, or every
    process whose command line holds `title`."""

    def __init__(self, *, pid: int | None = None, title: str | None = None, interval_s: float = 0.5) -> None:
        self.pid, self.title, self.interval_s = pid, title, interval_s
        self.peaks_mib: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _pids(self) -> list[int]:
        if self.pid is not None:
            return [self.pid]
        import psutil

        found = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            if any(self.title in part for part in process.info["cmdline"] or ()):
                found.append(process.info["pid"])
        return found

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in self._pids():
                try:
                    peak = memory_mb(pid).get("VmHWM", 0.0)
                except OSError:
                    continue
                self.peaks_mib[pid] = max(self.peaks_mib.get(pid, 0.0), peak)
            self._stop.wait(self.interval_s)

    def stop(self) -> dict[int, float]:
        self._stop.set()
        self._thread.join()
        return self.peaks_mib


def run_command(command: list[str], *, title: str | None = None) -> tuple[float, dict[int, float]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    # Spinning OpenMP threads steal each other's time on a shared machine (see the README).
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sampler = PeakMemory(pid=None if title else process.pid, title=title)
    _, err = process.communicate()
    wall_s = time.perf_counter() - started
    peaks = sampler.stop()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{err.decode()[-3000:]}")
    return wall_s, peaks


def per_actor(results_jsonl: Path) -> dict[str, dict[str, float]]:
    """Per worker: recordings, audio seconds, busy seconds, audio hours per busy hour."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: {"files": 0, "audio_s": 0.0, "busy_s": 0.0})
    for line in results_jsonl.read_text().splitlines():
        row = json.loads(line)
        if row["status"] == "ok":
            worker = totals[row["worker"]]
            worker["files"] += 1
            worker["audio_s"] += row["duration_s"]
            worker["busy_s"] += row["elapsed_s"]
    for worker in totals.values():
        worker["audio_hours_per_hour"] = round(worker["audio_s"] / worker["busy_s"], 2)
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path, help="audio files (default: the ten AMI snippets)")
    parser.add_argument("--actors", default="1,2", help="comma-separated actor counts (default: 1,2)")
    parser.add_argument("--asr-model", default=str(REPO_ROOT / "models" / "whisper-base"))
    parser.add_argument("--diarization-model", default="builtin")
    parser.add_argument("--output", type=Path, help="write the results as JSON here too")
    args = parser.parse_args()
    files = [str(path.resolve()) for path in (args.files or sorted(AMI_DIR.glob("ami_*.wav")))]
    actor_counts = [int(value) for value in args.actors.split(",")]
    cpus = usable_cpus()
    models = ["--asr-model", args.asr_model, "--diarization-model", args.diarization_model, "--device", "cpu"]
    started = utc_minute()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="batch-ray-") as scratch:
        command = [sys.executable, "-m", "whosaid", "transcribe", *files, "-o", f"{scratch}/plain", "--no-progress"]
        wall_s, peaks = run_command([*command, *models])
        audio_s = sum(json.loads(path.read_text())["duration"] for path in Path(scratch, "plain").glob("*.json"))
        rows.append({"run": "transcribe, one process", "actors": 0, "wall_s": round(wall_s, 1), "load": load_average(),
                     "audio_hours_per_hour": round(audio_s / wall_s, 2), "peak_mib": [round(max(peaks.values()))]})
        for actors in actor_counts:
            out = Path(scratch, f"ray-{actors}")
            command = [sys.executable, "-m", "whosaid", "batch", *files, "-o", str(out), "--no-progress",
                       "--actors", str(actors), "--num-cpus", f"{max(cpus / actors, 1):g}"]
            wall_s, peaks = run_command([*command, *models], title=ACTOR_TITLE)
            workers = per_actor(out / "results.jsonl")
            rows.append({"run": f"batch, {actors} actor(s) x {max(cpus / actors, 1):g} CPU", "actors": actors,
                         "wall_s": round(wall_s, 1), "audio_hours_per_hour": round(audio_s / wall_s, 2),
                         "load": load_average(), "peak_mib": sorted(round(peak) for peak in peaks.values()),
                         "per_actor_busy_audio_hours_per_hour": [w["audio_hours_per_hour"] for w in workers.values()]})
    print(f"{len(files)} files, {audio_s / 3600:.4f} audio hours, {cpus} CPUs, load average {load_average()}")
    print("| run | wall s | audio hours per hour | peak RSS per model-holding process (MiB) | per actor, while busy "
          "| load average after |")
    print("|---|---:|---:|---|---|---|")
    for row in rows:
        busy = ", ".join(map(str, row.get("per_actor_busy_audio_hours_per_hour", []))) or "-"
        peaks = ", ".join(map(str, row["peak_mib"]))
        load = ", ".join(map(str, row["load"]))
        print(f"| {row['run']} | {row['wall_s']} | {row['audio_hours_per_hour']} | {peaks} | {busy} | {load} |")
    if args.output:
        named = [os.path.relpath(path, REPO_ROOT) if path.startswith(str(REPO_ROOT)) else path for path in files]
        result = {**result_head("batch_ray", started), "files": named, "audio_s": audio_s, "runs": rows,
                  "load_average_after": load_average()}
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
