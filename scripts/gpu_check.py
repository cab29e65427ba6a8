"""GPU check: the core on CUDA (fp16 + SDPA, whatever transformers the GPU image has): the batched
path, speculative decoding with both assistant kinds (still token-identical in fp16?), routing.

Models are random (a base-sized main model, a distil-style and a seq2seq assistant) with the real
tokenizer, so it needs only the small tokenizer files of a converted model, no weights:

    python -m scripts.gpu_check --tokenizer-dir models/whisper-base --audio sample.wav

Timings with random weights say nothing about speculative decoding's gain (a random assistant's
drafts are all rejected); they show that every path runs on the device.
"""
import argparse
import json
import statistics
import time
from typing import Any, Callable

import numpy as np
import torch
import transformers

from tests.support.reference import transcribe_with_generate
from tests.support.tiny_whisper import build_random_whisper
from whosaid.audio.loading import Audio, audio_from_array, load_audio_file
from whosaid.config import WHISPER_SAMPLE_RATE_HZ, InferenceConfig, ModelSettings
from whosaid.engine import Engine

CLIP_STARTS_S = (0, 7, 14, 21)  # four 8 s clips of the 30 s sample, each decoded both ways
CLIP_S = 8


def timed(run: Callable[[], Any], repeats: int = 5) -> tuple[Any, float]:
    """The last output and the median seconds of `repeats` runs after one warm-up."""
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        output = run()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return output, statistics.median(times)


def request(**parameters: Any) -> InferenceConfig:
    return InferenceConfig.from_parameters(dict(language="en", **parameters))[0]


def check_assistant(kind: str, main_dir: str, assistant_dir: str, sample: np.ndarray, results: dict) -> None:
    engine = Engine.from_settings(ModelSettings(asr_model=main_dir, assistant_model=assistant_dir))
    recognizer = engine.recognizer
    # No silent fall-back: DEVICE=auto must have put the model on the GPU, in float16.
    assert engine.runtime.device.startswith("cuda") and engine.runtime.dtype == "float16", engine.runtime
    print(kind, "runtime", engine.runtime.as_labels(), flush=True)
    model = recognizer.model
    print(kind, "device", model.device, model.dtype, model.config._attn_implementation,
          type(recognizer.assistant).__name__, flush=True)
    same = 0
    for start_s in CLIP_STARTS_S:
        clip = sample[start_s * WHISPER_SAMPLE_RATE_HZ:(start_s + CLIP_S) * WHISPER_SAMPLE_RATE_HZ]
        audio = audio_from_array(clip, WHISPER_SAMPLE_RATE_HZ)
        task = {"language": "en", "task": "transcribe"}
        greedy = transcribe_with_generate(recognizer, audio, task)
        assisted = transcribe_with_generate(recognizer, audio, task, assistant=recognizer.assistant)
        same += greedy == assisted
    results[f"{kind}_identical_clips"] = f"{same}/{len(CLIP_STARTS_S)}"
    short = audio_from_array(sample[: CLIP_S * WHISPER_SAMPLE_RATE_HZ], WHISPER_SAMPLE_RATE_HZ)
    long60 = audio_from_array(np.concatenate([sample, sample]), WHISPER_SAMPLE_RATE_HZ)
    clips: tuple[tuple[str, Audio], ...] = (("short8s", short), ("long60s", long60))
    modes = (("assisted", {"assisted": True}), ("not_assisted_b24", {"assisted": False, "batch_size": 24}),
             ("auto", {}))
    for clip_name, audio in clips:
        for mode, parameters in modes:
            config = request(**parameters)
            output, seconds = timed(lambda audio=audio, config=config: engine.transcribe(audio, config))
            results[f"{kind}_{clip_name}_{mode}_s"] = round(seconds, 4)
            results[f"{kind}_{clip_name}_{mode}_decoding"] = output.decoding
    print(json.dumps(results, indent=1), flush=True)


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    arguments.add_argument("--tokenizer-dir", default="models/whisper-base")
    arguments.add_argument("--audio", required=True, help="a 30 s speech file, e.g. pyannote's sample.wav")
    arguments.add_argument("--models-dir", default="/tmp/gpu-check-models")
    options = arguments.parse_args()
    print("torch", torch.__version__, "CUDA build", torch.version.cuda, "transformers", transformers.__version__,
          torch.cuda.get_device_name(0), flush=True)

    def build(name: str, seed: int, d_model: int, layers: tuple[int, int], heads: int, encoder_of: Any = None) -> str:
        encoder_layers, decoder_layers = layers
        path = build_random_whisper(
            f"{options.models_dir}/{name}", options.tokenizer_dir, seed=seed, d_model=d_model,
            encoder_layers=encoder_layers, decoder_layers=decoder_layers, attention_heads=heads, max_length=96,
            encoder_of=encoder_of,
        )
        return str(path)

    main_dir = build("main", 0, 512, (6, 6), 8)  # whisper-base sized, random
    assistants = {
        "distil": build("distil", 1, 512, (6, 2), 8, encoder_of=main_dir),
        "seq2seq": build("s2s", 2, 256, (2, 2), 4),
    }
    sample = load_audio_file(options.audio).samples
    results: dict[str, Any] = {}
    for kind, assistant_dir in assistants.items():
        check_assistant(kind, main_dir, assistant_dir, sample, results)
        torch.cuda.empty_cache()  # the engine is gone with the call: hand its memory back before the next
    print("peak GPU memory GiB", torch.cuda.max_memory_allocated() / 2**30)


if __name__ == "__main__":
    main()
