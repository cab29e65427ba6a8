"""Speed and quality of this project's pipeline beside its baselines, same machine, same run.

For each clip (default: pyannote's 30 s sample, and the sample four times = 2 min) every
implementation is loaded in its own Python process; then they run in rounds, one run of each per
round (one warm-up round, then `--repeats` timed ones), so that on a shared machine all of them meet
the same load. Reported: median wall time, real-time factor, peak resident memory of that process
(VmHWM: what the implementation needs, model included), and word error rate against sample.stm.
Implementations, each named with its decoding strategy and precision:

  whosaid                     this project: Engine, default parameters (greedy, 5 beams where
                              Whisper's checks fail), language "en", float32
  whosaid-int8                the same with QUANTIZATION=int8
  transformers                the original handler: pipeline("automatic-speech-recognition", model=DIR)
                              with chunk_length_s=30, batch_size, return_timestamps=True, language "en"
                              (the pipeline's default: 5 beams)
  transformers-greedy         the same call with num_beams=1
  faster-whisper-fp32[-greedy] faster-whisper's BatchedInferencePipeline on the original CTranslate2
  faster-whisper-int8[-greedy] checkpoint the transformers weights were converted from: its default
                              beam_size=5, or beam_size=1

All get the same decoded float32 samples (file decoding is not timed), the same batch size and
the same number of CPU threads. With --assistant, this project's assisted / unassisted / auto
modes are timed on clips of one Whisper window (<= 30 s); with --diarization, the diarization
pipeline's time and diarization error rate against sample.rttm.

    python -m benchmarks.asr.speed                         # whisper-base, batch 8, 30 s and 2 min
    python -m benchmarks.asr.speed --model whisper-tiny.en --repeats 5
    python -m benchmarks.asr.speed --smoke                 # CI: 3 s clip, tiny.en, 1 run, seconds

Results: benchmarks/results/speed-<timestamp>.json and speed-latest.md (smoke runs write to
benchmarks/results/tmp/ so they never replace real results). Run from the repository root.
This module is the command line and the run loop; the rows are in speed_implementations, the worker
processes in speed_worker, the numbers and tables in speed_report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from benchmarks.asr.speed_implementations import ASR_IMPLEMENTATIONS, ASSISTED_IMPLEMENTATIONS, Job
from benchmarks.asr.speed_report import added_mib, headline_ratios, render_markdown, score
from benchmarks.asr.speed_worker import measure_interleaved
from benchmarks.common.clips import Clip, build_clip
from benchmarks.common.environment import REPO_ROOT, add_omp_wait_policy_argument, result_head, usable_cpus, utc_minute
from benchmarks.common.report import RESULTS_DIR, SMOKE_RESULTS_DIR, fmt, fmt_load, write_results

DEFAULT_MODEL = "whisper-base"
DEFAULT_BATCH_SIZE = 8  # the batch the baselines were first measured with
DEFAULT_CLIPS = "30,120"
SMOKE = {"model": "whisper-tiny.en", "clips": "smoke", "repeats": 1, "warmup": 0}
WHISPER_WINDOW_S = 30.0  # the assisted modes are compared where they apply: one window
WORKER_TIMEOUT_S = 1800  # one load or one run of one implementation on one clip


def comma_separated(text: str) -> list[str]:
    """The names of an option such as --implementations: comma-separated, blanks dropped."""
    return [name.strip() for name in text.split(",") if name.strip()]


def refuse_unknown_implementations(names: Sequence[str]) -> None:
    """Exit with a message naming each of `names` that is no ASR implementation, and the choices."""
    unknown = [name for name in names if name not in ASR_IMPLEMENTATIONS]
    if unknown:
        raise SystemExit(
            f"unknown implementation(s) {', '.join(unknown)}; choose from {', '.join(ASR_IMPLEMENTATIONS)}"
        )


def plan_jobs(args: argparse.Namespace, model: Any, clips: dict[str, Clip]) -> list[Job]:
    """Clip by clip, the implementations back to back, so that the load they meet is similar."""

    def job(implementation: str, clip: str) -> Job:
        return Job(
            implementation=implementation,
            clip=clip,
            model_name=model.name,
            transformers_model=model.transformers_model,
            ct2_model=model.ct2_model,
            batch_size=args.batch_size,
            repeats=args.repeats,
            warmup=args.warmup,
            threads=args.threads,
            assistant=args.assistant,
            diarization=args.diarization,
        )

    jobs = []
    for spec, clip in clips.items():
        jobs += [job(name, spec) for name in args.implementations]
        if args.assistant and clip.duration_s <= WHISPER_WINDOW_S + 0.5:
            jobs += [job(name, spec) for name in ASSISTED_IMPLEMENTATIONS]
        if args.diarization:
            jobs.append(job("diarization", spec))
    return jobs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", help=f"whisper-base, whisper-tiny.en or a transformers directory (default {DEFAULT_MODEL})"
    )
    parser.add_argument("--ct2-model", help="CTranslate2 checkpoint matching a --model directory (for faster-whisper)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="default %(default)s")
    parser.add_argument("--repeats", type=int, help="timed runs per implementation and clip (default 3)")
    parser.add_argument("--warmup", type=int, help="untimed runs first (default 1)")
    parser.add_argument(
        "--clips", help=f"comma-separated: seconds (multiples of 30), START-END cuts, 'smoke' (default {DEFAULT_CLIPS})"
    )
    parser.add_argument(
        "--implementations",
        type=comma_separated,
        help=f"comma-separated, from {', '.join(ASR_IMPLEMENTATIONS)} (default all)",
    )
    parser.add_argument("--assistant", help="assistant model: also time assisted / unassisted / auto on clips <= 30 s")
    parser.add_argument(
        "--diarization",
        help=(
            "'builtin' (the built-in diarizer) or a pyannote pipeline (Hub id or directory): "
            "also time diarization and DER"
        ),
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=usable_cpus(),
        help="CPU threads for every implementation (default: usable CPUs, %(default)s)",
    )
    add_omp_wait_policy_argument(parser, "every implementation")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny run for CI: 3 s clip, whisper-tiny.en, 1 run, no warm-up"
    )
    parser.add_argument("--output", type=Path, help="JSON results path (default <output-dir>/speed-<timestamp>.json)")
    parser.add_argument(
        "--output-dir",
        type=Path,
        help=(
            f"where speed-latest.md goes (default {RESULTS_DIR.relative_to(REPO_ROOT)}, "
            f"smoke: {SMOKE_RESULTS_DIR.relative_to(REPO_ROOT)})"
        ),
    )
    parser.add_argument(
        "--worker-timeout",
        type=float,
        default=WORKER_TIMEOUT_S,
        help="seconds for one load or one run (default %(default)s)",
    )
    parser.add_argument("--verbose", action="store_true", help="show the workers' own output")
    return parser


def resolve_arguments(args: argparse.Namespace) -> argparse.Namespace:
    """Fill defaults: smoke's where the option was not given, the normal ones otherwise."""
    defaults = SMOKE if args.smoke else {"model": DEFAULT_MODEL, "clips": DEFAULT_CLIPS, "repeats": 3, "warmup": 1}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.output_dir is None:
        args.output_dir = SMOKE_RESULTS_DIR if args.smoke else RESULTS_DIR
    if args.repeats < 1 or args.warmup < 0 or args.batch_size < 1 or args.threads < 1:
        raise SystemExit("--repeats, --batch-size and --threads must be at least 1, --warmup at least 0")
    refuse_unknown_implementations(args.implementations or [])
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = resolve_arguments(build_parser().parse_args(argv))
    from benchmarks.common.models import resolve_model

    try:
        model = resolve_model(args.model, args.ct2_model)
    except ValueError as error:
        raise SystemExit(str(error)) from error
    if args.implementations is None:
        args.implementations = [
            name for name in ASR_IMPLEMENTATIONS if model.ct2_model is not None or not name.startswith("faster-whisper")
        ]
        if model.ct2_model is None:
            print(
                "note: no CTranslate2 checkpoint for this model (--ct2-model): faster-whisper skipped", file=sys.stderr
            )
    elif model.ct2_model is None and any(name.startswith("faster-whisper") for name in args.implementations):
        raise SystemExit("faster-whisper needs the CTranslate2 checkpoint of --model: pass --ct2-model DIR")
    clips = {spec: build_clip(spec) for spec in args.clips.split(",") if spec.strip()}

    started = utc_minute()
    rows = []
    jobs = plan_jobs(args, model, clips)
    for spec, clip in clips.items():
        clip_jobs = [job for job in jobs if job.clip == spec]
        names = ", ".join(job.implementation for job in clip_jobs)
        print(f"[{spec}, {clip.duration_s:.0f} s] {names} ...", file=sys.stderr, flush=True)
        records = measure_interleaved(
            clip_jobs,
            warmup=args.warmup,
            repeats=args.repeats,
            timeout_s=args.worker_timeout,
            verbose=args.verbose,
            omp_wait_policy=args.omp_wait_policy,
        )
        for job, record in zip(clip_jobs, records, strict=True):
            row = {
                "clip": job.clip,
                "implementation": job.implementation,
                **{key: value for key, value in record.items() if key != "job"},
                **score(record, clip),
            }
            row["decoding"] = record.get("output", {}).get("decoding")
            rows.append(row)
            if "error" in row:
                print(
                    f"  {job.implementation} FAILED: {row['error']}\n{row.get('log_tail', '')[-1500:]}", file=sys.stderr
                )
            else:
                print(
                    f"  {job.implementation}: median {row['median_s']:.2f} s, RTF {row['rtf']:.3f}, "
                    f"peak {row['peak_rss_mib']:.0f} MiB (added {fmt(added_mib(row), 0)}), "
                    f"WER {fmt(row.get('wer'), 3)}, "
                    f"load {fmt_load(row['load_average_before'])}",
                    file=sys.stderr,
                )

    result = {
        **result_head("speed", started),
        "settings": {
            "model": model.name,
            "transformers_model": model.transformers_model,
            "ct2_model": model.ct2_model,
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "threads": args.threads,
            "omp_wait_policy": args.omp_wait_policy,
            "clips": {
                spec: {"duration_s": clip.duration_s, "reference": clip.reference_text} for spec, clip in clips.items()
            },
            "assistant": args.assistant,
            "diarization": args.diarization,
            "smoke": args.smoke,
        },
        "rows": rows,
        "ratios": headline_ratios(rows),
    }
    markdown = render_markdown(result)
    json_path, markdown_path = write_results(args.output_dir, "speed", result, markdown, args.output)
    print(markdown)
    print(f"\nwrote {json_path} and {markdown_path}", file=sys.stderr)
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
