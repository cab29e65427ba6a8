"""What bounding the recogniser's memory costs in time: the same meeting transcribed by the code as
it is (the CPU decoder takes a batch's windows in parts that fit DECODER_CROSS_BYTES_CPU, glibc's
mmap threshold fixed once models are loaded) and as it was before (the whole batch at once, glibc's
default threshold), each run in a fresh process, the two alternating round after round so that both
meet the same load. Prints each run's wall time and peak growth (VmHWM minus VmRSS after loading),
checks that both give the same text, and writes the table.

    python -m benchmarks.memory.decoder_parts --minutes 12 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common.environment import (
    add_omp_wait_policy_argument,
    describe_machine,
    load_average,
    machine_info,
    omp_environment,
    result_head,
    utc_minute,
)
from benchmarks.common.report import markdown_table, write_results

#: The named modes: what each runs, and its (DECODER_CROSS_BYTES_CPU, MMAP_THRESHOLD_BYTES), None
#: for the code's own value, 0 for the whole batch or glibc's default threshold.
NAMED_MODES: dict[str, tuple[str, int | None, int | None]] = {
    "bounded": ("decoder in parts (DECODER_CROSS_BYTES_CPU), fixed mmap threshold: the code as it is", None, None),
    "whole": ("the whole batch at once, glibc's default threshold: as before", 0, 0),
    "parts": ("decoder in parts, glibc's default threshold", None, 0),
    "threshold": ("the whole batch at once, fixed mmap threshold", 0, None),
}
MODES = tuple(NAMED_MODES)
MODE_HELP = {mode: what for mode, (what, _, _) in NAMED_MODES.items()}
#: Any other mode: "<budget MB>mb-<threshold kB>kb" (0 for whole, 0 for glibc's default), e.g. "640mb-4096kb".
CUSTOM_HELP = "<budget MB>mb-<threshold kB>kb: the decoder's budget and a fixed mmap threshold (0: whole, default)"


def mode_settings(mode: str) -> tuple[int | None, int | None]:
    """(DECODER_CROSS_BYTES_CPU, MMAP_THRESHOLD_BYTES) of a mode, as NAMED_MODES gives them."""
    if mode in NAMED_MODES:
        return NAMED_MODES[mode][1:]
    budget, threshold = mode.split("-")
    if not (budget.endswith("mb") and threshold.endswith("kb")):
        raise argparse.ArgumentTypeError(f"mode {mode!r}: expected one of {', '.join(MODES)} or {CUSTOM_HELP}")
    return int(budget[:-2]) * 2**20, int(threshold[:-2]) * 1024


def mode_argument(text: str) -> str:
    mode_settings(text)
    return text


def _vm_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


def worker(mode: str, minutes: float, model: str, batch_size: int, threads: int) -> dict[str, Any]:
    """One run in this process: load, reset the peak, transcribe the meeting once."""
    import torch

    torch.set_num_threads(threads)
    import whosaid.engine
    import whosaid.recognition.recognizer as recognizer
    import whosaid.runtime.memory as memory

    budget, threshold = mode_settings(mode)
    if budget is not None:
        recognizer.DECODER_CROSS_BYTES_CPU = budget or 2**62
    if threshold == 0:
        whosaid.engine.unmap_freed_large_blocks = lambda: False
    elif threshold is not None:
        memory.MMAP_THRESHOLD_BYTES = threshold
    from benchmarks.memory.long_meeting import build_meeting
    from whosaid.audio.loading import Audio
    from whosaid.config import ModelSettings
    from whosaid.engine import Engine

    samples = build_meeting(minutes)
    engine = Engine.from_settings(ModelSettings(asr_model=model, diarization_model=None))
    config, _ = engine.parse_parameters({"language": "en", "batch_size": batch_size})
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # VmHWM := VmRSS
    before_kb = _vm_kb("VmRSS")
    started = time.perf_counter()
    transcript = engine.transcribe(Audio(samples), config)
    seconds = time.perf_counter() - started
    return {
        "mode": mode,
        "seconds": round(seconds, 2),
        "peak_growth_mb": round((_vm_kb("VmHWM") - before_kb) / 1024),
        "text": transcript.text,
        "load": load_average(),
    }


def run_once(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.memory.decoder_parts", "--worker", mode]
    command += ["--minutes", str(args.minutes), "--model", args.model]
    command += ["--batch-size", str(args.batch_size), "--threads", str(args.threads)]
    env = {key: value for key, value in os.environ.items() if key != "MALLOC_MMAP_THRESHOLD_"}
    env.update(omp_environment(args.omp_wait_policy))
    output = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(output.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=12.0, help="length of the meeting (default 12)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each mode, alternating (default 2)")
    parser.add_argument(
        "--modes",
        nargs="+",
        type=mode_argument,
        default=list(MODES[:2]),
        help="what to compare, the first against the others (default: bounded whole); "
        + "; ".join(f"{mode}: {what}" for mode, what in {**MODE_HELP, "other": CUSTOM_HELP}.items()),
    )
    parser.add_argument("--model", default="models/whisper-base")
    parser.add_argument("--batch-size", type=int, default=24, help="windows per batch (default 24, the default)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output-dir", default="benchmarks/results")
    add_omp_wait_policy_argument(parser, "the worker processes")
    parser.add_argument("--worker", type=mode_argument, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.minutes, args.model, args.batch_size, args.threads)))
        return 0

    started = utc_minute()
    runs: list[dict[str, Any]] = []
    for round_index in range(args.rounds):
        order = args.modes if round_index % 2 == 0 else args.modes[::-1]
        for mode in order:
            run = run_once(args, mode)
            peak = run["peak_growth_mb"]
            print(f"round {round_index + 1} {mode}: {run['seconds']} s, peak +{peak} MB, load {run['load']}")
            runs.append(run)
    texts = {run["text"] for run in runs}
    rows = []
    for mode in args.modes:
        mine = [run for run in runs if run["mode"] == mode]
        rows.append(
            [
                mode,
                MODE_HELP.get(mode, CUSTOM_HELP),
                round(statistics.median(run["seconds"] for run in mine), 2),
                " / ".join(str(run["seconds"]) for run in mine),
                max(run["peak_growth_mb"] for run in mine),
            ]
        )
    ratios = {row[0]: round(rows[0][2] / row[2], 3) for row in rows[1:]}
    info = machine_info()
    table = markdown_table(["mode", "what", "median s", "runs s", "peak +MB"], rows)
    summary = (
        f"{args.minutes:g} minutes of meeting speech, {args.model}, batch {args.batch_size}, "
        f"{args.threads} threads, OMP_WAIT_POLICY {args.omp_wait_policy}, greedy float32, ASR only, "
        f"{args.rounds} alternating rounds; time of {args.modes[0]} against "
        f"{ratios}; same text: {len(texts) == 1}\n\n{describe_machine(info)}\n\n{table}\n"
    )
    print(summary)
    data = {**result_head("decoder_parts", started), "args": vars(args), "runs": runs, "ratios": ratios}
    write_results(Path(args.output_dir), "decoder-parts", data, summary)
    return 0 if len(texts) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
