"""Peak memory per request against recording length: the default server (`python -m whosaid
serve`, whisper-base, the built-in diarizer) on loopback, one request per point, each point's
growth read from /proc/<pid>/status: VmHWM (reset before the request) minus VmRSS before it, and
what the process still held after (VmRSS after minus before).

Two kinds of recording: silence (a FLAC of digital silence, tests/support/audio_bombs.py's) and
speech (benchmarks/memory/long_meeting.py's meeting of the AMI snippets and pyannote's sample, as MP3,
`response_format=diarized_json`). Points are KIND:MINUTES:

    .venv/bin/python -m benchmarks.memory.memory_growth                                  # the default points
    .venv/bin/python -m benchmarks.memory.memory_growth --points silence:240 speech:20 speech:60

A 4-hour speech point runs for hours on a small CPU; its MP3 is 8 kbit/s to fit the 25 MiB
upload. Writes benchmarks/results/memory-<timestamp>.json and memory-latest.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Optional

import requests

from benchmarks.common.environment import REPO_ROOT, describe_machine, machine_info
from benchmarks.common.report import RESULTS_DIR, markdown_table, write_results
from benchmarks.server.local_server import (
    LocalServer,
    free_port,
    memory_mb,
    reset_peak,
    start_server,
    wait_until_ready,
)
from tests.support.audio_bombs import flac_bomb

DEFAULT_POINTS = ("silence:1", "silence:20", "silence:60", "silence:240", "speech:1", "speech:20", "speech:60")
UPLOAD_LIMIT_BYTES = 25 * 2**20
KINDS = ("silence", "speech")


def parse_point(text: str) -> tuple[str, float]:
    kind, _, minutes = text.partition(":")
    if kind not in KINDS or not minutes:
        raise argparse.ArgumentTypeError(f"a point is KIND:MINUTES with KIND one of {', '.join(KINDS)}, not {text!r}")
    return kind, float(minutes)


def recording(kind: str, minutes: float) -> tuple[bytes, str, dict[str, str]]:
    """The file to send, its media type and the form fields of the request."""
    if kind == "silence":
        return flac_bomb(minutes * 60), "audio/flac", {"language": "en", "response_format": "verbose_json"}
    from benchmarks.memory.long_meeting import build_meeting, encode_mp3

    samples = build_meeting(minutes)
    mp3 = encode_mp3(samples)
    if len(mp3) > UPLOAD_LIMIT_BYTES:
        mp3 = encode_mp3(samples, bit_rate=8_000)
    return mp3, "audio/mpeg", {"language": "en", "response_format": "diarized_json"}


def measure(server: LocalServer, kind: str, minutes: float) -> dict[str, Any]:
    data, media_type, form = recording(kind, minutes)
    pid = server.process.pid
    reset_peak(pid)
    before = memory_mb(pid)
    started = time.monotonic()
    response = requests.post(
        f"{server.base_url}/v1/audio/transcriptions",
        files={"file": (f"{kind}.bin", data, media_type)},
        data={"model": "whisper-1", **form},
        timeout=6 * 3600,
    )
    seconds = time.monotonic() - started
    after = memory_mb(pid)
    row: dict[str, Any] = {
        "kind": kind,
        "minutes": minutes,
        "file_mb": round(len(data) / 1e6, 2),
        "status": response.status_code,
        "seconds": round(seconds, 1),
        "peak_growth_mb": round(after["VmHWM"] - before["VmRSS"]),
        "kept_mb": round(after["VmRSS"] - before["VmRSS"]),
        "rss_before_mb": round(before["VmRSS"]),
    }
    if response.status_code == 200 and kind == "speech":
        row["speakers"] = len({segment["speaker"] for segment in response.json().get("segments", [])})
    elif response.status_code != 200:
        row["body"] = response.text[:500]
    print(row, flush=True)
    return row


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", nargs="+", type=parse_point, default=[parse_point(p) for p in DEFAULT_POINTS])
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "whisper-base"))
    parser.add_argument("--diarization", default="builtin")
    args = parser.parse_args(argv)

    log_path = REPO_ROOT / "benchmarks" / "results" / "tmp" / "memory_growth_server.log"
    server = start_server(
        args.model, assistant=None, diarization=args.diarization or None, port=free_port(), log_path=log_path,
        extra_env={},
    )
    try:
        wait_until_ready(server)
        rows = [measure(server, kind, minutes) for kind, minutes in args.points]
    finally:
        server.stop()
    headers = ["kind", "minutes", "file_mb", "status", "seconds", "peak_growth_mb", "kept_mb"]
    table = markdown_table(headers, [[row[name] for name in headers] for row in rows])
    machine = machine_info()
    print(f"\n{describe_machine(machine)}\n\n{table}")
    write_results(RESULTS_DIR, "memory", {"machine": machine, "model": Path(args.model).name, "rows": rows}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
