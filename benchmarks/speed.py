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

    python benchmarks/speed.py                         # whisper-base, batch 8, 30 s and 2 min
    python benchmarks/speed.py --model whisper-tiny.en --repeats 5
    python benchmarks/speed.py --smoke                 # CI: 3 s clip, tiny.en, 1 run, seconds

Results: benchmarks/results/speed-<timestamp>.json and speed-latest.md (smoke runs write to
benchmarks/results/tmp/ so they never replace real results).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
# Run as a script (`python benchmarks/speed.py`), where neither the repo root nor the benchmarks
# package is on sys.path.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.clips import Clip, build_clip, word_error_rate  # noqa: E402
from benchmarks.environment import (  # noqa: E402
    add_omp_wait_policy_argument,
    describe_machine,
    load_average,
    machine_info,
    omp_environment,
    usable_cpus,
)
from benchmarks.report import (  # noqa: E402
    RESULTS_DIR,
    SMOKE_RESULTS_DIR,
    fmt,
    fmt_load,
    markdown_table,
    write_results,
)

DEFAULT_MODEL = "whisper-base"
DEFAULT_BATCH_SIZE = 8  # the batch the baselines were first measured with
DEFAULT_CLIPS = "30,120"
SMOKE = {"model": "whisper-tiny.en", "clips": "smoke", "repeats": 1, "warmup": 0}
WHISPER_WINDOW_S = 30.0  # the assisted modes are compared where they apply: one window
WORKER_TIMEOUT_S = 1800  # one load or one run of one implementation on one clip
# pyannote.metrics' collar is the total width around each reference boundary: 0.5 is +-0.25 s,
# which is what NIST md-eval (and most papers) call "collar 0.25".
DER_COLLARS = {"der": 0.0, "der_collar_0.25": 0.5}

Output = dict[str, Any]  # {"text": str, "decoding": str} or {"turns": [[start, end, speaker]]}
Runner = Callable[[np.ndarray], Output]  # float32 samples, shape (n_samples,) -> output


@dataclass(frozen=True)
class Job:
    """What one worker process measures. Plain data: it travels to the worker as JSON."""

    implementation: str
    clip: str
    model_name: str
    transformers_model: str
    ct2_model: Optional[str]
    batch_size: int
    repeats: int
    warmup: int
    threads: int
    assistant: Optional[str] = None
    diarization: Optional[str] = None


@dataclass(frozen=True)
class Implementation:
    name: str
    group: str  # "asr" (the headline comparison), "assisted" or "diarization"
    description: str
    load: Callable[[Job], Runner]
    strategy: str = ""  # how it decodes: greedy, 5 beams, ...
    precision: str = ""  # weights and arithmetic on CPU (GPUs run float16)


# ---------------------------------------------------------------------------- implementations
# Each loader runs inside the worker process, so each imports only what it needs: a
# faster-whisper process never imports torch, and its peak memory shows it.


def _torch_device_and_dtype(threads: int) -> tuple[str, Any]:
    import torch

    torch.set_num_threads(threads)
    if torch.cuda.is_available():
        return "cuda:0", torch.float16
    return "cpu", torch.float32


def _whosaid_loader(
    parameters: Callable[[Job], dict[str, Any]], *, with_assistant: bool, quantization: str = "none"
) -> Callable[[Job], Runner]:
    def load(job: Job) -> Runner:
        from whosaid.audio import Audio
        from whosaid.config import ModelSettings
        from whosaid.engine import Engine

        _torch_device_and_dtype(job.threads)
        # Explicit None: ASSISTANT_MODEL / DIARIZATION_MODEL in the caller's environment must not
        # sneak extra models into the timed pipeline.
        settings = ModelSettings(
            asr_model=job.transformers_model,
            assistant_model=job.assistant if with_assistant else None,
            diarization_model=None,
            quantization=quantization,
        )
        engine = Engine.from_settings(settings)
        config, _ = engine.parse_parameters(parameters(job))

        def run(samples: np.ndarray) -> Output:
            transcript = engine.transcribe(Audio(samples), config)
            return {"text": transcript.text, "decoding": transcript.decoding}

        return run

    return load


def _transformers_pipeline_loader(num_beams: Optional[int]) -> Callable[[Job], Runner]:
    def load(job: Job) -> Runner:
        return _load_transformers_pipeline(job, num_beams)

    return load


def _load_transformers_pipeline(job: Job, num_beams: Optional[int] = None) -> Runner:
    """The original handler's call, unchanged on CPU (`num_beams` None: the pipeline's default, 5
    beams). On a GPU it gets the device and fp16, as whosaid does, so that the comparison stays
    about the pipeline and not about the hardware."""
    from transformers import GenerationConfig, pipeline

    device, dtype = _torch_device_and_dtype(job.threads)
    extra = {"device": device, "torch_dtype": dtype} if device != "cpu" else {}
    asr = pipeline("automatic-speech-recognition", model=job.transformers_model, **extra)
    # English-only checkpoints refuse a language argument; they only speak English anyway.
    multilingual = bool(getattr(GenerationConfig.from_pretrained(job.transformers_model), "is_multilingual", False))
    generate_kwargs: dict[str, Any] = {"language": "en"} if multilingual else {}
    if num_beams is not None:
        generate_kwargs["num_beams"] = num_beams

    def run(samples: np.ndarray) -> Output:
        output = asr(
            {"raw": samples, "sampling_rate": 16_000},  # a fresh dict: the pipeline pops keys
            chunk_length_s=30,
            batch_size=job.batch_size,
            return_timestamps=True,
            generate_kwargs=dict(generate_kwargs),
        )
        return {"text": output["text"]}

    return run


def _faster_whisper_loader(compute_type: str, beam_size: int = 5) -> Callable[[Job], Runner]:
    """`beam_size` 5 is faster-whisper's default; 1 is greedy."""

    def load(job: Job) -> Runner:
        import ctranslate2
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        if job.ct2_model is None:
            raise ValueError("faster-whisper needs the CTranslate2 checkpoint: pass --ct2-model DIR")
        on_gpu = ctranslate2.get_cuda_device_count() > 0
        model = WhisperModel(
            job.ct2_model,
            device="cuda" if on_gpu else "cpu",
            compute_type="int8_float16" if on_gpu and compute_type == "int8" else compute_type,
            cpu_threads=job.threads,
        )
        batched = BatchedInferencePipeline(model)

        def run(samples: np.ndarray) -> Output:
            segments, _ = batched.transcribe(samples, language="en", batch_size=job.batch_size, beam_size=beam_size)
            return {"text": "".join(segment.text for segment in segments)}  # segments are lazy

        return run

    return load


def _load_diarization(job: Job) -> Runner:
    from whosaid.audio import Audio
    from whosaid.config import ModelSettings
    from whosaid.diarization import Diarizer

    _torch_device_and_dtype(job.threads)
    diarizer = Diarizer.from_settings(
        ModelSettings(asr_model=job.transformers_model, diarization_model=job.diarization)
    )

    def run(samples: np.ndarray) -> Output:
        turns = diarizer.diarize(Audio(samples), {})
        return {"turns": [[turn.start_s, turn.end_s, turn.speaker] for turn in turns]}

    return run


GREEDY_WITH_FALLBACK = "greedy (5 beams where Whisper's checks fail)"
IMPLEMENTATIONS: dict[str, Implementation] = {
    impl.name: impl
    for impl in (
        Implementation(
            "whosaid",
            "asr",
            "this project: Engine.transcribe, default parameters, language en",
            _whosaid_loader(lambda job: {"language": "en", "batch_size": job.batch_size}, with_assistant=False),
            GREEDY_WITH_FALLBACK,
            "float32",
        ),
        Implementation(
            "whosaid-int8",
            "asr",
            "this project with QUANTIZATION=int8 (dynamic int8 linear layers), language en",
            _whosaid_loader(
                lambda job: {"language": "en", "batch_size": job.batch_size}, with_assistant=False, quantization="int8"
            ),
            GREEDY_WITH_FALLBACK,
            "int8",
        ),
        Implementation(
            "transformers",
            "asr",
            "the original handler: pipeline('automatic-speech-recognition', model=DIR)(chunk_length_s=30, "
            "batch_size, return_timestamps=True, generate_kwargs language en)",
            _transformers_pipeline_loader(None),
            "5 beams (pipeline default)",
            "float32",
        ),
        Implementation(
            "transformers-greedy",
            "asr",
            "the original handler's call with generate_kwargs num_beams=1",
            _transformers_pipeline_loader(1),
            "greedy",
            "float32",
        ),
        Implementation(
            "faster-whisper-fp32",
            "asr",
            "faster-whisper BatchedInferencePipeline, CTranslate2 original, float32, language en, default beam_size",
            _faster_whisper_loader("float32"),
            "5 beams (default)",
            "float32",
        ),
        Implementation(
            "faster-whisper-fp32-greedy",
            "asr",
            "the same with beam_size=1",
            _faster_whisper_loader("float32", beam_size=1),
            "greedy",
            "float32",
        ),
        Implementation(
            "faster-whisper-int8",
            "asr",
            "faster-whisper BatchedInferencePipeline, CTranslate2 original, int8, language en, default beam_size",
            _faster_whisper_loader("int8"),
            "5 beams (default)",
            "int8",
        ),
        Implementation(
            "faster-whisper-int8-greedy",
            "asr",
            "the same with beam_size=1",
            _faster_whisper_loader("int8", beam_size=1),
            "greedy",
            "int8",
        ),
        Implementation(
            "whosaid-assisted",
            "assisted",
            "this project with the assistant: assisted=true, batch_size=1",
            _whosaid_loader(lambda job: {"language": "en", "assisted": True, "batch_size": 1}, with_assistant=True),
        ),
        Implementation(
            "whosaid-unassisted",
            "assisted",
            "assistant loaded but not used: assisted=false, batch_size",
            _whosaid_loader(
                lambda job: {"language": "en", "assisted": False, "batch_size": job.batch_size}, with_assistant=True
            ),
        ),
        Implementation(
            "whosaid-auto",
            "assisted",
            "assistant loaded, assisted='auto' and no batch_size (assists up to ASSISTED_MAX_DURATION_S)",
            _whosaid_loader(lambda job: {"language": "en", "assisted": "auto"}, with_assistant=True),
        ),
        Implementation(
            "diarization",
            "diarization",
            "this project's Diarizer.diarize (the --diarization model: builtin or a pyannote pipeline) "
            "on the in-memory waveform",
            _load_diarization,
        ),
    )
}
ASR_IMPLEMENTATIONS = [name for name, impl in IMPLEMENTATIONS.items() if impl.group == "asr"]
ASSISTED_IMPLEMENTATIONS = [name for name, impl in IMPLEMENTATIONS.items() if impl.group == "assisted"]
# (this project's row, baseline, how they compare): like for like first, then each at its own defaults.
COMPARISONS = [
    ("whosaid", "faster-whisper-fp32-greedy", "same strategy (greedy), float32"),
    ("whosaid", "transformers-greedy", "same strategy (greedy), float32"),
    ("whosaid-int8", "faster-whisper-int8-greedy", "same strategy (greedy), int8"),
    ("whosaid", "faster-whisper-fp32", "own defaults, float32"),
    ("whosaid", "transformers", "own defaults, float32"),
    ("whosaid-int8", "faster-whisper-int8", "own defaults, int8"),
]


# ---------------------------------------------------------------------------- worker process


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


def _worker_main(job_path: str) -> int:
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
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(job_path)],
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


def score(record: dict[str, Any], clip: Clip) -> dict[str, Any]:
    """Summary numbers of one measurement: timing statistics, RTF, WER or DER."""
    if "error" in record:
        return {}
    times = record["times_s"]
    median = statistics.median(times)
    summary: dict[str, Any] = {
        "median_s": median,
        "min_s": min(times),
        "max_s": max(times),
        "rtf": median / clip.duration_s,
        "audio_s": clip.duration_s,
    }
    output = record["output"]
    if "text" in output:
        summary["wer"] = word_error_rate(clip.reference_text, output["text"])
    if "turns" in output:
        summary.update(diarization_error_rates(clip, output["turns"]))
    return summary


def diarization_error_rates(clip: Clip, turns: list[list[Any]]) -> dict[str, Any]:
    """DER against sample.rttm over the whole clip, without and with a +-0.25 s collar.
    Overlapped speech is scored (skip_overlap=False): the project's turns never overlap, so
    the second speaker of an overlap counts as missed, as a user would experience it."""
    from pyannote.core import Annotation, Segment, Timeline
    from pyannote.metrics.diarization import DiarizationErrorRate

    reference, hypothesis = Annotation(), Annotation()
    for index, turn in enumerate(clip.reference_turns):
        reference[Segment(turn.start_s, turn.end_s), index] = turn.speaker
    for index, (start_s, end_s, speaker) in enumerate(turns):
        hypothesis[Segment(start_s, end_s), index] = speaker
    uem = Timeline([Segment(0.0, clip.duration_s)])
    rates: dict[str, Any] = {"speakers_found": len(set(hypothesis.labels()))}
    for key, collar in DER_COLLARS.items():
        metric = DiarizationErrorRate(collar=collar, skip_overlap=False)
        rates[key] = float(metric(reference, hypothesis, uem=uem))
    return rates


def ratio(numerator: Optional[float], denominator: Optional[float]) -> Optional[float]:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def headline_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each clip and each of COMPARISONS measured: this project's median time and peak memory
    divided by the baseline's, with both WERs."""
    by_clip: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_clip.setdefault(row["clip"], {})[row["implementation"]] = row
    ratios = []
    for clip, measured in by_clip.items():
        for ours_name, baseline, comparison in COMPARISONS:
            ours, theirs = measured.get(ours_name), measured.get(baseline)
            if ours is None or theirs is None or "median_s" not in ours or "median_s" not in theirs:
                continue
            ratios.append(
                {
                    "clip": clip,
                    "implementation": ours_name,
                    "baseline": baseline,
                    "comparison": comparison,
                    "time_ratio": ratio(ours["median_s"], theirs["median_s"]),
                    "memory_ratio": ratio(ours.get("peak_rss_mib"), theirs.get("peak_rss_mib")),
                    "wer": ours.get("wer"),
                    "baseline_wer": theirs.get("wer"),
                }
            )
    return ratios


def render_markdown(result: dict[str, Any]) -> str:
    settings = result["settings"]
    rows = result["rows"]
    clip_label = {row["clip"]: f"{row['clip']} ({row['audio_s']:.0f} s)" for row in rows if "audio_s" in row}
    lines = [
        f"# Speed and quality: {settings['model']}, batch_size {settings['batch_size']}",
        "",
        f"Measured {result['finished']} on {describe_machine(result['machine'])}.",
        f"Median of {settings['repeats']} run(s) after {settings['warmup']} warm-up, each "
        f"implementation and clip in its own process with {settings['threads']} CPU threads "
        f"(OMP_WAIT_POLICY {settings.get('omp_wait_policy', 'default')}), the implementations of a clip "
        "run in turn, one run each per round, so that they meet the same load. "
        "RTF = wall time / audio duration (below 1 is faster than real time). Peak RSS = the "
        "process's VmHWM (model, runtime and decoding). WER: lowercase, punctuation removed, "
        "against sample.stm (repeated for repeated clips). Load average (1/5/15 min) as the "
        "process started: this machine is shared, so read the times with it.",
        "",
    ]
    asr_rows = [row for row in rows if IMPLEMENTATIONS[row["implementation"]].group != "diarization"]
    lines.append(
        markdown_table(
            [
                "clip",
                "implementation",
                "decoding",
                "precision",
                "batch",
                "threads",
                "median s",
                "min–max s",
                "RTF",
                "peak RSS MiB",
                "load s",
                "WER",
                "load avg",
            ],
            [
                [
                    clip_label.get(row["clip"], row["clip"]),
                    row["implementation"]
                    + (
                        f" ({row['decoding']})"
                        if row.get("decoding")
                        and not row["implementation"].startswith("whosaid")
                        or row.get("decoding") == "assisted"
                        else ""
                    ),
                    IMPLEMENTATIONS[row["implementation"]].strategy,
                    IMPLEMENTATIONS[row["implementation"]].precision,
                    1 if row.get("decoding") == "assisted" else settings["batch_size"],
                    settings["threads"],
                    fmt(row.get("median_s")),
                    f"{row['min_s']:.2f}–{row['max_s']:.2f}" if "min_s" in row else "failed",
                    fmt(row.get("rtf"), 3),
                    fmt(row.get("peak_rss_mib"), 0),
                    fmt(row.get("load_s"), 1),
                    fmt(row.get("wer"), 3),
                    fmt_load(row.get("load_average_before")),
                ]
                for row in asr_rows
            ],
        )
    )
    if result["ratios"]:
        lines += [
            "",
            "## This project ÷ baseline (below 1: this project is faster / smaller)",
            "",
            "Like for like (the same decoding strategy and precision) first, then each at its own defaults.",
            "",
            markdown_table(
                [
                    "clip",
                    "this project",
                    "baseline",
                    "compared at",
                    "time ratio",
                    "peak memory ratio",
                    "WER",
                    "baseline WER",
                ],
                [
                    [
                        clip_label.get(r["clip"], r["clip"]),
                        r["implementation"],
                        r["baseline"],
                        r["comparison"],
                        fmt(r["time_ratio"]),
                        fmt(r["memory_ratio"]),
                        fmt(r["wer"], 3),
                        fmt(r["baseline_wer"], 3),
                    ]
                    for r in sorted(result["ratios"], key=lambda r: (r["clip"], "defaults" in r["comparison"]))
                ],
            ),
        ]
    diarization_rows = [row for row in rows if IMPLEMENTATIONS[row["implementation"]].group == "diarization"]
    asr_median_s = {row["clip"]: row.get("median_s") for row in rows if row["implementation"] == "whosaid"}
    if diarization_rows:
        lines += [
            "",
            f"## Diarization ({settings['diarization']})",
            "",
            "DER against sample.rttm over the whole clip, overlaps scored; 'collar 0.25' forgives "
            "±0.25 s around reference boundaries (pyannote.metrics collar=0.5, NIST md-eval's 0.25).",
            "",
            markdown_table(
                [
                    "clip",
                    "median s",
                    "RTF",
                    "÷ whosaid ASR",
                    "peak RSS MiB",
                    "DER",
                    "DER collar 0.25",
                    "speakers",
                    "load avg",
                ],
                [
                    [
                        clip_label.get(row["clip"], row["clip"]),
                        fmt(row.get("median_s")),
                        fmt(row.get("rtf"), 3),
                        fmt(ratio(row.get("median_s"), asr_median_s.get(row["clip"]))),
                        fmt(row.get("peak_rss_mib"), 0),
                        fmt(row.get("der"), 3),
                        fmt(row.get("der_collar_0.25"), 3),
                        row.get("speakers_found"),
                        fmt_load(row.get("load_average_before")),
                    ]
                    for row in diarization_rows
                ],
            ),
        ]
    failures = [row for row in rows if "error" in row]
    if failures:
        lines += ["", "## Failed", ""]
        lines += [f"- {row['clip']} / {row['implementation']}: {row['error']}" for row in failures]
    used = list(dict.fromkeys(row["implementation"] for row in rows))
    lines += ["", "Implementations:", ""]
    lines += [f"- `{name}`: {IMPLEMENTATIONS[name].description}" for name in used]
    return "\n".join(lines)


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
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
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
    parser.add_argument("--worker", metavar="JOB", help=argparse.SUPPRESS)
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
    unknown = [name for name in args.implementations or [] if name not in ASR_IMPLEMENTATIONS]
    if unknown:
        raise SystemExit(
            f"unknown implementation(s) {', '.join(unknown)}; choose from {', '.join(ASR_IMPLEMENTATIONS)}"
        )
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        return _worker_main(args.worker)
    args = resolve_arguments(args)
    from benchmarks.models import resolve_model

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

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
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
                    f"peak {row['peak_rss_mib']:.0f} MiB, WER {fmt(row.get('wer'), 3)}, "
                    f"load {fmt_load(row['load_average_before'])}",
                    file=sys.stderr,
                )

    result = {
        "benchmark": "speed",
        "started": started,
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_info(),
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
