"""Speculative decoding with assistants made by `python -m whosaid make-assistant`, against
batched greedy decoding, same process, same machine, rows interleaved.

For each assistant (untuned: the main model's first and last decoder layers; tuned: the same,
distilled for --steps on the tuning audio) and each clip, the table gives the median wall time of
`assisted=true` and of the batched path (`assisted=false`, --batch-size), the acceptance rate
(drafted tokens the main model kept / tokens drafted, counted inside transformers' assisted
generation), the WER of each row against sample.stm, and whether the assisted transcript equals
the batched one (it must: the main model verifies every drafted token). Rows are interleaved
(each repeat runs every clip and every mode once) so that a shared machine's load falls on all of
them alike. Then, per assistant, the crossover: the longest clip on which assisted was faster,
the value for ASSISTED_MAX_DURATION_S.

    python -m benchmarks.asr.assisted                                  # whisper-base, 8 s / 30 s / 60 s, 3 repeats
    python -m benchmarks.asr.assisted --tune espeak --steps 200         # tuned on espeak-ng speech (not the clips)
    python -m benchmarks.asr.assisted --tune sample                     # tuned on the benchmark's own sample
    python -m benchmarks.asr.assisted --assistants DIR1,DIR2 --clips short,30

Results: benchmarks/results/assisted-<timestamp>.json and assisted-latest.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from benchmarks.common.clips import build_clip, sample_samples, word_error_rate
from benchmarks.common.environment import REPO_ROOT, describe_machine, load_average, result_head, utc_minute
from benchmarks.common.report import RESULTS_DIR, fmt, fmt_load, markdown_table, write_results

ASSISTANT_CACHE_DIR = REPO_ROOT / "benchmarks" / ".cache" / "assistants"
DEFAULT_CLIPS = "short,30,60"
# Tuning speech that is not in any benchmark clip: read by espeak-ng voices, one line each.
ESPEAK_LINES = (
    ("en-us+f3", "The train to Boston leaves at half past nine from platform four."),
    ("en-gb+m3", "Could you send me the report before the meeting on Thursday afternoon?"),
    ("en-us+m1", "We planted tomatoes and beans in the garden behind the house last spring."),
    ("en-gb-scotland+f4", "I think the weather will clear up by the weekend, so we can go hiking."),
    ("en-us+f2", "My brother moved to Denver because he found a job at a hospital there."),
    ("en-gb+m2", "Please remember to lock the back door and turn off the lights when you leave."),
    ("en-us+m3", "The library downtown is open until eight in the evening on weekdays."),
    ("en-gb+f3", "She said the new software update fixed most of the problems with the printer."),
    ("en-us+f4", "How much does a ticket cost if I buy it at the station instead of online?"),
    ("en-gb+m1", "Our team finished the project two weeks early and under budget."),
    ("en-us+m2", "I grew up in a small town in Ohio, but I have lived in California for years."),
    ("en-gb-scotland+m3", "The doctor told me to drink more water and to walk every day."),
    ("en-us+f3", "Well, to be honest, I never really liked cold weather very much."),
    ("en-gb+m3", "Do you remember the name of the restaurant where we had dinner in May?"),
    ("en-us+m1", "The kids are playing soccer in the park until their parents pick them up."),
    ("en-gb+f4", "Yes, I agree with you. It is a lot cheaper to cook at home."),
)


# ---------------------------------------------------------------------------- assistants


def espeak_speech() -> np.ndarray:
    """ESPEAK_LINES spoken one after the other with short pauses, 16 kHz float32."""
    from whosaid.audio.loading import load_audio_file

    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise SystemExit(
            "--tune espeak needs espeak-ng (apt-get install espeak-ng); or pass --tune sample or audio files"
        )
    pieces = []
    with tempfile.TemporaryDirectory() as folder:
        for number, (voice, text) in enumerate(ESPEAK_LINES):
            wav = Path(folder) / f"{number}.wav"
            subprocess.run([espeak, "-v", voice, "-s", "160", "-w", str(wav), text], check=True, capture_output=True)
            pieces += [load_audio_file(wav).samples, np.zeros(8000, np.float32)]
    return np.concatenate(pieces)


def tuning_clips(spec: str) -> tuple[str, list[np.ndarray]]:
    """(label, clips) for --tune: 'espeak', 'sample', or audio files separated by commas."""
    if spec == "espeak":
        return "espeak-ng speech (not in the clips)", [espeak_speech()]
    if spec == "sample":
        return "pyannote's sample (the clips' own audio)", [sample_samples()]
    from whosaid.audio.loading import load_audio_file

    paths = [Path(part) for part in spec.split(",") if part.strip()]
    return ", ".join(path.name for path in paths), [load_audio_file(path).samples for path in paths]


def build_assistants(model_dir: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The assistants to compare: --assistants as given, else an untuned one and one tuned on
    --tune, built into benchmarks/.cache/assistants/."""
    from whosaid.assistant.build import make_assistant
    from whosaid.assistant.tune import TuningOptions

    if args.assistants:
        return [{"name": Path(path).name, "path": path, "info": None} for path in args.assistants.split(",")]
    name = Path(model_dir).name
    built = []
    untuned = ASSISTANT_CACHE_DIR / f"{name}-untuned"
    print(f"building {untuned} ...", file=sys.stderr, flush=True)
    built.append({"name": "untuned", "path": str(untuned), "info": make_assistant(model_dir, untuned)})
    if args.tune != "none":
        label, clips = tuning_clips(args.tune)
        tuned = ASSISTANT_CACHE_DIR / f"{name}-tuned-{args.tune if args.tune in ('espeak', 'sample') else 'files'}"
        print(f"building {tuned}: {args.steps} steps on {label} ...", file=sys.stderr, flush=True)
        info = make_assistant(model_dir, tuned, tuning_clips=clips, tuning=TuningOptions(steps=args.steps))
        info["tuning"]["audio"] = label
        print(
            f"  tuned in {info['tuning']['seconds']:.0f} s: agreement on the tuning windows "
            f"{info['tuning']['agreement_before']:.3f} -> {info['tuning']['agreement_after']:.3f}",
            file=sys.stderr,
            flush=True,
        )
        built.append({"name": f"tuned ({args.tune}, {args.steps} steps)", "path": str(tuned), "info": info})
    return built


# ---------------------------------------------------------------------------- acceptance


@contextlib.contextmanager
def counting_drafts(counts: dict[str, int]) -> Iterator[None]:
    """Count, inside transformers' assisted generation, the tokens the assistant drafts and the
    ones the main model keeps (`update_candidate_strategy` receives that number each round)."""
    from transformers.generation.candidate_generator import AssistedCandidateGenerator

    get_candidates = AssistedCandidateGenerator.get_candidates
    update = AssistedCandidateGenerator.update_candidate_strategy

    def counted_get_candidates(self: Any, input_ids: Any) -> Any:
        candidates, logits = get_candidates(self, input_ids)
        counts["drafted"] += candidates.shape[-1] - input_ids.shape[-1]
        counts["rounds"] += 1
        return candidates, logits

    def counted_update(self: Any, input_ids: Any, scores: Any, num_matches: int) -> Any:
        counts["accepted"] += int(num_matches)
        return update(self, input_ids, scores, num_matches)

    AssistedCandidateGenerator.get_candidates = counted_get_candidates
    AssistedCandidateGenerator.update_candidate_strategy = counted_update
    try:
        yield
    finally:
        AssistedCandidateGenerator.get_candidates = get_candidates
        AssistedCandidateGenerator.update_candidate_strategy = update


# ---------------------------------------------------------------------------- measuring


def measure(args: argparse.Namespace, model_dir: str, assistants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from whosaid.audio.loading import Audio
    from whosaid.config import InferenceConfig, ModelSettings
    from whosaid.engine import Engine

    clips = {spec: build_clip(spec) for spec in args.clips.split(",") if spec.strip()}
    engines = {
        "batched": Engine.from_settings(
            ModelSettings(asr_model=model_dir, assistant_model=None, diarization_model=None)
        )
    }
    for assistant in assistants:
        settings = ModelSettings(asr_model=model_dir, assistant_model=assistant["path"], diarization_model=None)
        engines[assistant["name"]] = Engine.from_settings(settings)
    parameters = {"language": "en", "return_timestamps": True}
    configs = {
        "batched": InferenceConfig.from_parameters({**parameters, "assisted": False, "batch_size": args.batch_size})[0],
        "assisted": InferenceConfig.from_parameters({**parameters, "assisted": True, "batch_size": 1})[0],
    }
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for spec, clip in clips.items():
        for name in engines:
            rows[(spec, name)] = {
                "clip": spec,
                "audio_s": clip.duration_s,
                "mode": name,
                "times_s": [],
                "loads": [],
                "counts": {"drafted": 0, "accepted": 0, "rounds": 0},
            }
    for repeat in range(args.warmup + args.repeats):
        timed = repeat >= args.warmup
        for spec, clip in clips.items():
            audio = Audio(clip.samples)
            for name, engine in engines.items():
                row = rows[(spec, name)]
                counts = {"drafted": 0, "accepted": 0, "rounds": 0}
                load = load_average()
                with counting_drafts(counts):
                    started = time.perf_counter()
                    transcript = engine.transcribe(audio, configs["batched" if name == "batched" else "assisted"])
                    elapsed = time.perf_counter() - started
                if timed:
                    row["times_s"].append(elapsed)
                    row["loads"].append(load)
                    row["counts"] = counts  # the same every run: decoding is deterministic
                row["text"], row["decoding"] = transcript.text, transcript.decoding
                row["chunks"] = [(chunk.start_s, chunk.end_s, chunk.text) for chunk in transcript.chunks]
                print(
                    f"[{'run' if timed else 'warm-up'} {repeat + 1}] {spec} {name}: {elapsed:.2f} s "
                    f"(load {fmt_load(load)})",
                    file=sys.stderr,
                    flush=True,
                )
    results = []
    for (spec, _), row in rows.items():
        batched = rows[(spec, "batched")]
        counts = row.pop("counts")
        median = statistics.median(row["times_s"])
        results.append(
            {
                **row,
                "median_s": median,
                "min_s": min(row["times_s"]),
                "max_s": max(row["times_s"]),
                "vs_batched": median / statistics.median(batched["times_s"]),
                "wer": word_error_rate(clips[spec].reference_text, row["text"]),
                "same_as_batched": row["chunks"] == batched["chunks"],
                "drafted": counts["drafted"],
                "accepted": counts["accepted"],
                "acceptance": counts["accepted"] / counts["drafted"] if counts["drafted"] else None,
            }
        )
    return results


def crossovers(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per assistant: the longest clip on which assisted beat batched (0 when it never did), what
    ASSISTED_MAX_DURATION_S should say for this pair on this machine."""
    result: dict[str, float] = {}
    for row in rows:
        if row["mode"] == "batched":
            continue
        result.setdefault(row["mode"], 0.0)
        if row["vs_batched"] < 1.0:
            result[row["mode"]] = max(result[row["mode"]], row["audio_s"])
    return result


def render_markdown(result: dict[str, Any]) -> str:
    settings = result["settings"]
    lines = [
        f"# Assisted vs batched: {settings['model']}, {settings['threads']} threads, greedy",
        "",
        f"Measured {result['finished']} on {describe_machine(result['machine'])}.",
        f"Median of {settings['repeats']} run(s) after {settings['warmup']} warm-up, rows interleaved in one "
        f"process. Batched: assisted=false, batch_size {settings['batch_size']}. Assisted: assisted=true, "
        "batch_size 1. Acceptance: drafted tokens the main model kept / tokens drafted. WER against "
        "sample.stm. Both paths fall back to 5 beams on the same windows.",
        "",
        markdown_table(
            ["clip", "mode", "median s", "min–max s", "÷ batched", "acceptance", "WER", "same text", "load avg"],
            [
                [
                    f"{row['clip']} ({row['audio_s']:.0f} s)",
                    row["mode"],
                    fmt(row["median_s"]),
                    f"{row['min_s']:.2f}–{row['max_s']:.2f}",
                    fmt(row["vs_batched"]),
                    None
                    if row["acceptance"] is None
                    else f"{row['acceptance']:.2f} ({row['accepted']}/{row['drafted']})",
                    fmt(row["wer"], 3),
                    "yes" if row["same_as_batched"] else "NO",
                    fmt_load(row["loads"][0]),
                ]
                for row in result["rows"]
            ],
        ),
        "",
        "Crossover (longest clip assisted beat batched; ASSISTED_MAX_DURATION_S for this pair here):",
        "",
    ]
    lines += [f"- {name}: {seconds:.0f} s" for name, seconds in result["crossovers"].items()]
    for assistant in result["assistants"]:
        tuning = (assistant.get("info") or {}).get("tuning")
        if tuning:
            lines.append(
                f"- {assistant['name']}: tuned on {tuning.get('audio')}, {tuning['windows']} windows, "
                f"{tuning['steps']} steps in {tuning['seconds']:.0f} s; agreement on those windows "
                f"{tuning['agreement_before']:.3f} -> {tuning['agreement_after']:.3f}"
            )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default="whisper-base", help="whisper-base, whisper-tiny.en or a transformers directory"
    )
    parser.add_argument(
        "--clips",
        default=DEFAULT_CLIPS,
        help=f"comma-separated clip specs (benchmarks/common/clips.py; default {DEFAULT_CLIPS})",
    )
    parser.add_argument(
        "--assistants", help="comma-separated assistant directories to compare (default: build untuned and tuned)"
    )
    parser.add_argument(
        "--tune",
        default="espeak",
        help="tuning audio: espeak, sample, none, or audio files separated by commas (default espeak)",
    )
    parser.add_argument("--steps", type=int, default=200, help="tuning steps (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=8, help="the batched path's batch size (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default %(default)s)")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    # Before torch starts its OpenMP threads: spinning idle threads distort timings on a shared machine.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch

    from benchmarks.common.models import resolve_model

    torch.set_num_threads(args.threads)
    model = resolve_model(args.model)
    started = utc_minute()
    assistants = build_assistants(model.transformers_model, args)
    rows = measure(args, model.transformers_model, assistants)
    result = {
        **result_head("assisted", started),
        "settings": {
            "model": model.name,
            "clips": args.clips,
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "threads": args.threads,
            "tune": args.tune,
            "steps": args.steps,
        },
        "assistants": assistants,
        "rows": rows,
        "crossovers": crossovers(rows),
    }
    markdown = render_markdown(result)
    json_path, markdown_path = write_results(args.output_dir, "assisted", result, markdown)
    print(markdown)
    print(f"\nwrote {json_path} and {markdown_path}", file=sys.stderr)
    return 0 if all(row["same_as_batched"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
