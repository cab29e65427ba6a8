"""Word error rate under shifts of the audio that change no word: each clip with 0, 20, ... 140 ms
of silence put before it, for each implementation of benchmarks.asr.speed (same loaders, same
parameters). No timing: quality only.

Why: every system cuts its Whisper windows at speech edges found on a grid of frames (Silero VAD's
32 ms, the encoder's 20 ms; they line up again every 160 ms), so a few milliseconds of silence
before a recording moves every cut and every frame by a fraction of a frame. On an 81-word clip
one word is 0.012 of WER, and which words a window yields turns on such details: one figure per
clip says little about the difference between two systems. The mean over the shifts is the
figure to compare; the spread shows how far one figure may land from it.

    python -m benchmarks.asr.shifted_wer                      # whisper-base, 30 s and 2 min, five rows each
    python -m benchmarks.asr.shifted_wer --clips 30 --shifts-ms 0,20 --implementations whosaid

Results: benchmarks/results/shifted-wer-<timestamp>.json and shifted-wer-latest.md (or
--output-dir). Run from the repository root.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from benchmarks.asr.speed import DEFAULT_BATCH_SIZE, DEFAULT_MODEL, comma_separated, refuse_unknown_implementations
from benchmarks.asr.speed_implementations import ASR_IMPLEMENTATIONS, IMPLEMENTATIONS, Job
from benchmarks.common.clips import SAMPLE_RATE_HZ, build_clip, word_error_rate
from benchmarks.common.environment import result_head, usable_cpus, utc_minute
from benchmarks.common.report import RESULTS_DIR, markdown_table, write_results

DEFAULT_IMPLEMENTATIONS = (
    "whosaid",
    "faster-whisper-fp32-greedy",
    "faster-whisper-fp32-greedy-timestamps",
    "whosaid-int8",
    "faster-whisper-int8-greedy",
)
# One period of the two grids (32 ms VAD frames, 20 ms encoder frames: 160 ms), in 20 ms steps.
DEFAULT_SHIFTS_MS = (0, 20, 40, 60, 80, 100, 120, 140)


def shifted(samples: np.ndarray, shift_ms: int) -> np.ndarray:
    """`samples` with `shift_ms` of digital silence before them."""
    silence = np.zeros(round(SAMPLE_RATE_HZ * shift_ms / 1000), dtype=samples.dtype)
    return np.concatenate([silence, samples])


def summarise(wers: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(wers), "min": min(wers), "max": max(wers)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="whisper-base, whisper-tiny.en or a directory")
    parser.add_argument("--ct2-model", help="CTranslate2 checkpoint matching a --model directory (for faster-whisper)")
    parser.add_argument("--clips", default="30,120", help="comma-separated clip names of benchmarks.common.clips")
    parser.add_argument(
        "--shifts-ms",
        type=lambda text: [int(value) for value in text.split(",")],
        default=list(DEFAULT_SHIFTS_MS),
        help="comma-separated milliseconds of silence put first (default %(default)s)",
    )
    parser.add_argument(
        "--implementations",
        type=comma_separated,
        default=list(DEFAULT_IMPLEMENTATIONS),
        help=f"comma-separated, from {', '.join(ASR_IMPLEMENTATIONS)}",
    )
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="default %(default)s")
    parser.add_argument("--threads", type=int, default=usable_cpus(), help="default: usable CPUs, %(default)s")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    refuse_unknown_implementations(args.implementations)
    if not args.shifts_ms or min(args.shifts_ms) < 0:
        raise SystemExit("--shifts-ms takes one or more milliseconds, none negative")
    from benchmarks.common.models import resolve_model

    try:
        model = resolve_model(args.model, args.ct2_model)
    except ValueError as error:
        raise SystemExit(str(error)) from error
    clips = {spec: build_clip(spec) for spec in args.clips.split(",") if spec.strip()}
    started = utc_minute()
    rows = []
    for name in args.implementations:
        implementation = IMPLEMENTATIONS[name]
        job = Job(
            implementation=name,
            clip=",".join(clips),
            model_name=model.name,
            transformers_model=model.transformers_model,
            ct2_model=model.ct2_model,
            batch_size=args.batch_size,
            repeats=len(args.shifts_ms),
            warmup=0,
            threads=args.threads,
        )
        run = implementation.load(job)
        for spec, clip in clips.items():
            runs = []
            for shift_ms in args.shifts_ms:
                text = run(shifted(clip.samples, shift_ms))["text"]
                runs.append({"shift_ms": shift_ms, "wer": word_error_rate(clip.reference_text, text), "text": text})
            summary = summarise([each["wer"] for each in runs])
            rows.append({"clip": spec, "implementation": name, **summary, "runs": runs})
            print(f"  {spec} {name}: mean WER {summary['mean']:.3f}", file=sys.stderr, flush=True)
        del run
        gc.collect()

    table = markdown_table(
        ["clip", "implementation", "strategy", "precision", "mean WER", "min", "max", "WER at each shift"],
        [
            [
                row["clip"],
                row["implementation"],
                IMPLEMENTATIONS[row["implementation"]].strategy,
                IMPLEMENTATIONS[row["implementation"]].precision,
                f"{row['mean']:.3f}",
                f"{row['min']:.3f}",
                f"{row['max']:.3f}",
                " ".join(f"{each['wer']:.3f}" for each in row["runs"]),
            ]
            for row in sorted(rows, key=lambda row: (list(clips).index(row["clip"]), row["implementation"]))
        ],
    )
    shifts = ", ".join(str(shift) for shift in args.shifts_ms)
    markdown = (
        f"WER with {shifts} ms of silence first; {model.name}, batch {args.batch_size}, "
        f"{args.threads} threads\n\n{table}\n"
    )
    result = {
        **result_head("shifted-wer", started),
        "settings": {
            "model": model.name,
            "batch_size": args.batch_size,
            "threads": args.threads,
            "shifts_ms": args.shifts_ms,
            "clips": {
                spec: {"duration_s": clip.duration_s, "reference": clip.reference_text} for spec, clip in clips.items()
            },
        },
        "rows": rows,
    }
    json_path, markdown_path = write_results(args.output_dir, "shifted-wer", result, markdown)
    print(markdown)
    print(f"wrote {json_path} and {markdown_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
