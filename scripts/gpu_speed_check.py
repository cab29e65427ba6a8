"""The GPU speed table in one command: this project, the plain transformers pipeline (the original
handler's path) and faster-whisper, on the same Whisper base weights, fp16, for an 8 s, a 60 s
and a 10 min clip at batch size 1 and 24, and this project's assisted path with an assistant
built on the spot by `make-assistant` (tuned briefly on pyannote's sample). Every row has its
word error rate against the sample's reference, so speed is read at equal quality.

Needs nothing but the repository, its virtual environment and models/ (no hub): the weights are
models/whisper-base and the CTranslate2 checkpoint it was converted from (benchmarks/common/models.py).
Run from the repository root:

    python -m scripts.gpu_speed_check                                    # CUDA, about 3 minutes on one GPU
    python -m scripts.gpu_speed_check --device cpu --quick               # CPU smoke run: 8 s clip only
    python -m scripts.gpu_speed_check --implementations whosaid,transformers --quick

Prints a markdown table (and the same rows as JSON with --output FILE). Timings: median of
--repeats runs after one warm-up per implementation and batch size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

CLIPS = ("short", "60", "600")  # 8 s cut, the sample twice, the sample twenty times (10 min)
QUICK_CLIPS = ("short",)
BATCH_SIZES = (1, 24)
IMPLEMENTATIONS = ("whosaid", "whosaid-assisted", "transformers", "faster-whisper")
QUICK_TUNING_STEPS = 2
TUNING_STEPS = 100

Transcribe = Callable[[np.ndarray], str]


@dataclass(frozen=True)
class Row:
    implementation: str
    batch_size: int
    clip: str
    audio_s: float
    median_s: float
    wer: Optional[float]
    text: str

    @property
    def rtf(self) -> float:
        return self.median_s / self.audio_s


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def whosaid_runner(model_dir: str, device: str, batch_size: int, assistant_dir: Optional[str] = None) -> Transcribe:
    from whosaid.audio.loading import Audio
    from whosaid.config import InferenceConfig, ModelSettings
    from whosaid.engine import Engine

    settings = ModelSettings(asr_model=model_dir, assistant_model=assistant_dir, diarization_model=None, device=device)
    engine = Engine.from_settings(settings)
    parameters = {"language": "en", "assisted": assistant_dir is not None, "batch_size": batch_size}
    config = InferenceConfig.from_parameters(parameters)[0]
    return lambda samples: engine.transcribe(Audio(samples), config).text


def transformers_runner(model_dir: str, device: str, batch_size: int) -> Transcribe:
    """The original handler's call: pipeline(...)(chunk_length_s=30, batch_size, timestamps)."""
    import torch
    from transformers import pipeline

    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    asr = pipeline("automatic-speech-recognition", model=model_dir, device=device, dtype=dtype)

    def run(samples: np.ndarray) -> str:
        output = asr(
            {"raw": samples, "sampling_rate": 16_000},
            chunk_length_s=30,
            batch_size=batch_size,
            return_timestamps=True,
            generate_kwargs={"language": "en"},
        )
        return output["text"]

    return run


def faster_whisper_runner(ct2_dir: str, device: str, batch_size: int) -> Transcribe:
    """faster-whisper greedy (beam_size=1, like for like with this project's greedy decoding)."""
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    on_gpu = device.startswith("cuda")
    model = WhisperModel(ct2_dir, device="cuda" if on_gpu else "cpu", compute_type="float16" if on_gpu else "float32")
    batched = BatchedInferencePipeline(model)

    def run(samples: np.ndarray) -> str:
        segments, _ = batched.transcribe(samples, language="en", batch_size=batch_size, beam_size=1)
        return "".join(segment.text for segment in segments)

    return run


def build_assistant_on_the_spot(model_dir: str, device: str, steps: int) -> tuple[str, dict[str, Any]]:
    """`make-assistant` into a temporary directory: first and last decoder layers, tuned for
    `steps` on pyannote's sample."""
    from benchmarks.common.clips import sample_samples
    from whosaid.assistant.build import make_assistant
    from whosaid.assistant.tune import TuningOptions

    directory = Path(tempfile.mkdtemp(prefix="whosaid-assistant-"))
    info = make_assistant(
        model_dir, directory, tuning_clips=[sample_samples()], tuning=TuningOptions(steps=steps), device=device
    )
    return str(directory), info


def time_rows(
    name: str, batch_size: int, runner: Transcribe, clips: dict[str, Any], repeats: int, device: str
) -> list[Row]:
    from benchmarks.common.clips import word_error_rate

    rows = []
    runner(clips[next(iter(clips))].samples)  # warm-up: kernels, caches, lazy loading
    for spec, clip in clips.items():
        times, text = [], ""
        for _ in range(repeats):
            _synchronize(device)
            started = time.perf_counter()
            text = runner(clip.samples)
            _synchronize(device)
            times.append(time.perf_counter() - started)
        rows.append(
            Row(
                name,
                batch_size,
                spec,
                clip.duration_s,
                statistics.median(times),
                word_error_rate(clip.reference_text, text),
                text,
            )
        )
        print(f"  {name} batch {batch_size} {spec}: {rows[-1].median_s:.3f} s", file=sys.stderr, flush=True)
    return rows


def render(rows: Sequence[Row], header: str) -> str:
    from benchmarks.common.report import markdown_table

    return (
        header
        + "\n\n"
        + markdown_table(
            ["clip", "implementation", "batch", "median s", "RTF", "WER"],
            [
                [
                    f"{row.clip} ({row.audio_s:.0f} s)",
                    row.implementation,
                    row.batch_size,
                    f"{row.median_s:.3f}",
                    f"{row.rtf:.4f}",
                    "–" if row.wer is None else f"{row.wer:.3f}",
                ]
                for row in sorted(rows, key=lambda row: (row.audio_s, row.batch_size, row.implementation))
            ],
        )
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument(
        "--quick", action="store_true", help="the 8 s clip only, 1 repeat, batch 1, a 2-step assistant: a smoke run"
    )
    parser.add_argument(
        "--implementations",
        default=",".join(IMPLEMENTATIONS),
        help=f"comma-separated, from {', '.join(IMPLEMENTATIONS)}",
    )
    parser.add_argument(
        "--batch-sizes", help=f"comma-separated (default {','.join(map(str, BATCH_SIZES))}; --quick: 1)"
    )
    parser.add_argument("--repeats", type=int, help="timed runs per row (default 3; --quick: 1)")
    parser.add_argument(
        "--tuning-steps",
        type=int,
        help=f"assistant tuning steps (default {TUNING_STEPS}; --quick: {QUICK_TUNING_STEPS})",
    )
    parser.add_argument("--output", type=Path, help="also write the rows as JSON here")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    import transformers

    from benchmarks.common.clips import build_clip
    from benchmarks.common.models import resolve_model

    implementations = [name.strip() for name in args.implementations.split(",") if name.strip()]
    unknown = sorted(set(implementations) - set(IMPLEMENTATIONS))
    if unknown:
        raise SystemExit(f"unknown implementation(s) {', '.join(unknown)}; choose from {', '.join(IMPLEMENTATIONS)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            f"--device {args.device}: torch {torch.__version__} sees no CUDA GPU; "
            "use --device cpu --quick for a smoke run"
        )
    batch_sizes = (
        [int(size) for size in args.batch_sizes.split(",")]
        if args.batch_sizes
        else ([1] if args.quick else list(BATCH_SIZES))
    )
    repeats = args.repeats or (1 if args.quick else 3)
    steps = args.tuning_steps if args.tuning_steps is not None else (QUICK_TUNING_STEPS if args.quick else TUNING_STEPS)
    model = resolve_model("whisper-base")
    clips = {spec: build_clip(spec) for spec in (QUICK_CLIPS if args.quick else CLIPS)}
    device_name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    started = time.perf_counter()

    rows: list[Row] = []
    assistant_info: Optional[dict[str, Any]] = None
    for name in implementations:
        for batch_size in batch_sizes:
            if name == "whosaid-assisted" and batch_size != 1:
                continue  # speculative decoding verifies one sequence at a time
            print(f"{name}, batch {batch_size} ...", file=sys.stderr, flush=True)
            if name == "whosaid":
                runner = whosaid_runner(model.transformers_model, args.device, batch_size)
            elif name == "whosaid-assisted":
                assistant_dir, assistant_info = build_assistant_on_the_spot(
                    model.transformers_model, args.device, steps
                )
                runner = whosaid_runner(model.transformers_model, args.device, 1, assistant_dir)
            elif name == "transformers":
                runner = transformers_runner(model.transformers_model, args.device, batch_size)
            else:
                if model.ct2_model is None:
                    raise SystemExit(
                        "faster-whisper needs the CTranslate2 base checkpoint (whosaid/cli/setup_models.py's packages)"
                    )
                runner = faster_whisper_runner(model.ct2_model, args.device, batch_size)
            rows += time_rows(name, batch_size, runner, clips, repeats, args.device)
            del runner
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()

    header = (
        f"# whisper-base on {device_name}: torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{'float16' if args.device.startswith('cuda') else 'float32'}, language en, median of {repeats}; "
        f"{time.perf_counter() - started:.0f} s in all"
    )
    if assistant_info and assistant_info.get("tuning"):
        tuning = assistant_info["tuning"]
        header += (
            f"\n\nAssistant: make-assistant (decoder layers {assistant_info['decoder_layers_of_main_model']}), "
            f"{tuning['steps']} tuning steps on pyannote's sample: "
            f"agreement {tuning['agreement_before']:.3f} -> {tuning['agreement_after']:.3f}."
        )
    print(render(rows, header), flush=True)
    if args.output:
        args.output.write_text(json.dumps([{**row.__dict__, "rtf": row.rtf} for row in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
