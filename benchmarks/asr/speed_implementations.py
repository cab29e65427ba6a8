"""What each row of the speed benchmark loads and runs: this project, the original handler's
transformers pipeline and faster-whisper, each named with its decoding strategy and precision.

Every loader runs inside its own worker process (benchmarks.asr.speed_worker), so each imports only
what it needs: a faster-whisper process never imports torch, and its peak memory shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

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
    # The language every implementation is told the speech is in (Whisper's code).
    language: str = "en"


@dataclass(frozen=True)
class Implementation:
    name: str
    group: str  # "asr" (the headline comparison), "assisted" or "diarization"
    description: str
    load: Callable[[Job], Runner]
    strategy: str = ""  # how it decodes: greedy, 5 beams, ...
    precision: str = ""  # weights and arithmetic on CPU (GPUs run float16)


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
        from whosaid.audio.loading import Audio
        from whosaid.config import ModelSettings
        from whosaid.engine import Engine
        from whosaid.runtime.memory import release_memory_after

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
            # As Engine.run ends every request the server and the CLI serve: after a minute of
            # audio or more, freed heap blocks go back to the OS, so a repeat's peak is its own
            # and not what the repeats before it left in glibc's arenas.
            release_memory_after(transcript.duration_s)
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
    generate_kwargs: dict[str, Any] = {"language": job.language} if multilingual else {}
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


def _faster_whisper_loader(
    compute_type: str, beam_size: int = 5, *, without_timestamps: bool = True
) -> Callable[[Job], Runner]:
    """`beam_size` 5 is faster-whisper's default; 1 is greedy. `without_timestamps` True is the
    batched pipeline's default (its segments then carry only the speech regions' times); False
    decodes Whisper's timestamp tokens, as this project does for its chunks' times."""

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
            segments, _ = batched.transcribe(
                samples,
                language=job.language,
                batch_size=job.batch_size,
                beam_size=beam_size,
                without_timestamps=without_timestamps,
            )
            return {"text": "".join(segment.text for segment in segments)}  # segments are lazy

        return run

    return load


def _load_diarization(job: Job) -> Runner:
    from whosaid.audio.loading import Audio
    from whosaid.config import ModelSettings
    from whosaid.speaker_hints import SpeakerHints
    from whosaid.speakers.diarizer import load_diarizer

    _torch_device_and_dtype(job.threads)
    diarizer = load_diarizer(ModelSettings(asr_model=job.transformers_model, diarization_model=job.diarization))

    def run(samples: np.ndarray) -> Output:
        turns = diarizer.diarize(Audio(samples), SpeakerHints()).turns
        return {"turns": [[turn.start_s, turn.end_s, turn.speaker] for turn in turns]}

    return run


GREEDY_WITH_FALLBACK = "greedy (5 beams where Whisper's checks fail)"
GREEDY_WITHOUT_TIMESTAMPS = "greedy, no timestamp tokens (5 beams where Whisper's checks fail)"
IMPLEMENTATIONS: dict[str, Implementation] = {
    impl.name: impl
    for impl in (
        Implementation(
            "whosaid",
            "asr",
            "this project: Engine.transcribe, default parameters, the job's language (en)",
            _whosaid_loader(lambda job: {"language": job.language, "batch_size": job.batch_size}, with_assistant=False),
            GREEDY_WITH_FALLBACK,
            "float32",
        ),
        Implementation(
            "whosaid-int8",
            "asr",
            "this project with QUANTIZATION=int8 (int8 linear layers, activations quantized on the fly), the job's "
            "language (en)",
            _whosaid_loader(
                lambda job: {"language": job.language, "batch_size": job.batch_size},
                with_assistant=False,
                quantization="int8",
            ),
            GREEDY_WITH_FALLBACK,
            "int8",
        ),
        Implementation(
            "whosaid-no-timestamps",
            "asr",
            "this project decoding text only (without_timestamps=true), the job's language (en)",
            _whosaid_loader(
                lambda job: {"language": job.language, "batch_size": job.batch_size, "without_timestamps": True},
                with_assistant=False,
            ),
            GREEDY_WITHOUT_TIMESTAMPS,
            "float32",
        ),
        Implementation(
            "whosaid-int8-no-timestamps",
            "asr",
            "this project decoding text only (without_timestamps=true) with QUANTIZATION=int8, the job's language (en)",
            _whosaid_loader(
                lambda job: {"language": job.language, "batch_size": job.batch_size, "without_timestamps": True},
                with_assistant=False,
                quantization="int8",
            ),
            GREEDY_WITHOUT_TIMESTAMPS,
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
            "faster-whisper-fp32-greedy-timestamps",
            "asr",
            "the same with beam_size=1 and without_timestamps=False: Whisper's timestamp tokens decoded, as this "
            "project decodes them",
            _faster_whisper_loader("float32", beam_size=1, without_timestamps=False),
            "greedy, timestamp tokens",
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
            "faster-whisper-int8-greedy-timestamps",
            "asr",
            "the same with beam_size=1 and without_timestamps=False: Whisper's timestamp tokens decoded, as this "
            "project decodes them",
            _faster_whisper_loader("int8", beam_size=1, without_timestamps=False),
            "greedy, timestamp tokens",
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
