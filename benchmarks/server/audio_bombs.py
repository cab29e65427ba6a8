"""Decompression bombs against the server, this tree against an older commit: for each bomb, the
time to its answer, the server's peak memory growth (VmHWM, reset before the request, minus VmRSS
before) and what it kept after (VmRSS after minus before), from /proc/<pid>/status.

    .venv/bin/python -m benchmarks.server.audio_bombs --before a0ffcd6

`--before COMMIT` exports that commit (`git archive`) into a temporary folder and runs its
server the same way. Two settings: MAX_AUDIO_DURATION_S=30 with ten-minute bombs (and a four-hour
FLAC that declares no length), and each version's default limit with bombs of 4 h 15 min (those
that fit in the 25 MiB upload) and the 133-hour, 24.9 MiB FLAC. The bombs are
tests/support/audio_bombs.py's. Writes benchmarks/results/bombs-<timestamp>.json and
bombs-latest.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import requests

from benchmarks.common.environment import REPO_ROOT, describe_machine, load_average, machine_info
from benchmarks.common.report import RESULTS_DIR, fmt, fmt_load, markdown_table, write_results
from benchmarks.server.local_server import LocalServer, free_port, memory_mb, reset_peak, wait_until_ready
from tests.support.audio_bombs import BOMBS, FOUR_HOURS_PLUS_S, UPLOAD_LIMIT_FLAC_S, flac_bomb

UPLOAD_LIMIT_BYTES = 25 * 2**20
LOW_LIMIT_S = 30.0
LOW_LIMIT_BOMB_S = 600.0
# Not sent to the version before: decoding it whole takes 30 GB (133 h of float32 at 16 kHz).
ALL_OF_THE_UPLOAD = "flac-silence 133 h (24.9 MiB)"


def bomb_files() -> dict[str, list[tuple[str, bytes, str]]]:
    """Setting name -> (bomb name, bytes, media type) for each bomb sent under that setting."""
    low = [(f"{bomb.name} 10 min", bomb.build(LOW_LIMIT_BOMB_S), bomb.media_type) for bomb in BOMBS]
    low.append(("flac-silence-undeclared 4 h", flac_bomb(4 * 3600, declare=False), "audio/flac"))
    default = []
    for bomb, (_, ten_minutes, _) in zip(BOMBS, low[: len(BOMBS)], strict=True):
        if bomb.name == "wav-declares-10h-holds-20s":
            continue  # its length does not follow the argument; sent under the low limit
        if len(ten_minutes) * FOUR_HOURS_PLUS_S / LOW_LIMIT_BOMB_S > UPLOAD_LIMIT_BYTES:
            continue  # noise and MP3 at 4 h 15 min are over the upload limit
        default.append((f"{bomb.name} 4 h 15 min", bomb.build(FOUR_HOURS_PLUS_S), bomb.media_type))
    default.append((ALL_OF_THE_UPLOAD, flac_bomb(UPLOAD_LIMIT_FLAC_S), "audio/flac"))
    return {f"MAX_AUDIO_DURATION_S={LOW_LIMIT_S:g}": low, "default limit": default}


@contextlib.contextmanager
def server(source: Path, model: str, limit_s: Optional[float], log_path: Path) -> Iterator[LocalServer]:
    env = dict(
        os.environ, ASR_MODEL=model, DIARIZATION_MODEL="", DEVICE="cpu", PYTHONPATH=str(source),
        PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false",
    )
    env.pop("API_KEY", None)
    env.pop("MAX_AUDIO_DURATION_S", None)
    if limit_s is not None:
        env["MAX_AUDIO_DURATION_S"] = str(limit_s)
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "whosaid", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=source, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    running = LocalServer(process, f"http://127.0.0.1:{port}", log_path)
    try:
        wait_until_ready(running)
        yield running
    finally:
        running.stop()


def measure(running: LocalServer, data: bytes, media_type: str) -> dict[str, Any]:
    pid = running.process.pid
    reset_peak(pid)
    before = memory_mb(pid)
    started = time.perf_counter()
    response = requests.post(
        f"{running.base_url}/?language=en", data=data, headers={"Content-Type": media_type}, timeout=600
    )
    answered_s = time.perf_counter() - started
    time.sleep(0.5)  # what the process keeps once the request is over
    after = memory_mb(pid)
    code = response.json().get("error", {}).get("code") if response.status_code >= 400 else None
    return {
        "status": response.status_code,
        "code": code,
        "answered_s": answered_s,
        "peak_growth_mb": after["VmHWM"] - before["VmRSS"],
        "kept_mb": after["VmRSS"] - before["VmRSS"],
    }


@contextlib.contextmanager
def exported(commit: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="whosaid-before-") as folder:
        archive = subprocess.run(["git", "archive", commit], cwd=REPO_ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        yield Path(folder)


def run_version(label: str, source: Path, model: str, files: dict, log_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for setting, bombs in files.items():
        limit_s = LOW_LIMIT_S if setting.startswith("MAX_AUDIO") else None
        with server(source, model, limit_s, log_dir / f"{label}-{len(rows)}.log") as running:
            # Warm-up: the first request pays for imports and first allocations.
            requests.post(f"{running.base_url}/", data=files[setting][0][1][:64], timeout=60)
            for name, data, media_type in bombs:
                if label == "before" and name == ALL_OF_THE_UPLOAD:
                    continue
                result = measure(running, data, media_type)
                result.update(version=label, setting=setting, bomb=name, file_mib=len(data) / 2**20)
                print(
                    f"{label:6s} {setting:24s} {name:36s} {result['status']} {result['answered_s']:7.2f} s "
                    f"peak +{result['peak_growth_mb']:6.0f} MB kept {result['kept_mb']:+6.0f} MB",
                    flush=True,
                )
                rows.append(result)
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="a commit to compare with (exported with git archive)")
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "whisper-base"), help="ASR_MODEL of both")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    files = bomb_files()
    load_before = load_average()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="whosaid-bomb-logs-") as logs:
        if args.before:
            with exported(args.before) as source:
                rows += run_version("before", source, args.model, files, Path(logs))
        rows += run_version("after", REPO_ROOT, args.model, files, Path(logs))
    by_key = {(row["version"], row["setting"], row["bomb"]): row for row in rows}
    table_rows = []
    for setting, bombs in files.items():
        for name, data, _ in bombs:
            cells: list[Any] = [setting, name, fmt(len(data) / 2**20)]
            for version in ("before", "after"):
                row = by_key.get((version, setting, name))
                if row is None:
                    cells += [None, None, None, None]
                    continue
                answer = f"{row['status']} {row['code'] or ''}".strip()
                cells += [answer, fmt(row["answered_s"]), fmt(row["peak_growth_mb"], 0), fmt(row["kept_mb"], 0)]
            table_rows.append(cells)
    headers = [
        "setting", "bomb", "MiB",
        "before: answer", "s", "peak +MB", "kept MB",
        "after: answer", "s", "peak +MB", "kept MB",
    ]
    markdown = "\n\n".join([
        f"Bombs against `python -m whosaid serve` (before: {args.before or 'not run'}; after: this tree), "
        f"{describe_machine(machine_info())}, load average {fmt_load(load_before)} at the start.",
        markdown_table(headers, table_rows),
    ])
    print("\n" + markdown)
    json_path, markdown_path = write_results(args.output_dir, "bombs", {"rows": rows, "before": args.before}, markdown)
    print(f"\nwrote {json_path} and {markdown_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
