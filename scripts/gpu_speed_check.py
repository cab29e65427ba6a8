"""CUDA check of the fast ASR path (issue 7): fp16 + SDPA, VAD windows, the lean greedy loop,
the beam fallback and the assisted path, on whatever transformers the GPU image has.

Random weights (a whisper-base sized main model and a distil-style assistant) with the real
tokenizer, so it needs only a converted model's small tokenizer files and the audio as float32
samples (no weights, no audio decoder):

    python scripts/gpu_speed_check.py --tokenizer-dir TOKENIZER_DIR --samples sample.npy

Prints JSON: whether the lean loop picks transformers' greedy tokens on CUDA (alone and batched),
whether the assisted and batched paths give the same transcript, and median wall times. Timings
with random weights show that each path runs on the device, not real speed-ups.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

RATE = 16_000


def build_model(directory: Path, tokenizer_dir: str, *, seed: int, decoder_layers: int, encoder_of: Any = None) -> str:
    import torch
    from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration, WhisperProcessor

    base = WhisperConfig.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    config = WhisperConfig(
        vocab_size=base.vocab_size, num_mel_bins=base.num_mel_bins, d_model=512, encoder_layers=6,
        decoder_layers=decoder_layers, encoder_attention_heads=8, decoder_attention_heads=8,
        encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_source_positions=1500, max_target_positions=448,
        decoder_start_token_id=base.decoder_start_token_id, pad_token_id=base.pad_token_id,
        bos_token_id=base.bos_token_id, eos_token_id=base.eos_token_id,
    )
    model = WhisperForConditionalGeneration(config).eval()
    if encoder_of is not None:
        model.model.encoder.load_state_dict(WhisperForConditionalGeneration.from_pretrained(encoder_of).model.encoder.state_dict())
    generation = GenerationConfig.from_pretrained(tokenizer_dir)
    generation.max_length = 96  # random weights rarely say end-of-text
    model.generation_config = generation
    model.save_pretrained(directory)
    WhisperProcessor.from_pretrained(tokenizer_dir).save_pretrained(directory)
    return str(directory)


def median_time(run: Callable[[], Any], repeats: int = 3) -> tuple[Any, float]:
    import torch

    def synchronize() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    output = run()
    times = []
    for _ in range(repeats):
        synchronize()
        started = time.perf_counter()
        output = run()
        synchronize()
        times.append(time.perf_counter() - started)
    return output, round(statistics.median(times), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer-dir", required=True)
    parser.add_argument("--samples", required=True, help="float32 16 kHz mono samples (.npy) of a ~30 s speech clip")
    options = parser.parse_args()

    import torch
    import transformers

    import whosaid.decoding as decoding
    from whosaid.config import InferenceConfig, ModelSettings
    from whosaid.engine import Engine

    report: dict[str, Any] = {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
    }
    samples = np.load(options.samples).astype(np.float32)
    root = Path(tempfile.mkdtemp())
    main_dir = build_model(root / "main", options.tokenizer_dir, seed=0, decoder_layers=6)
    distil_dir = build_model(root / "distil", options.tokenizer_dir, seed=1, decoder_layers=2, encoder_of=main_dir)
    engine = Engine.from_settings(ModelSettings(asr_model=main_dir, assistant_model=distil_dir))
    recognizer = engine.recognizer
    model = recognizer.model
    report["model"] = f"{model.device} {model.dtype} {model.config._attn_implementation}"

    # The lean loop against transformers' greedy generate, window by window and batched.
    from whosaid.audio import Audio

    audio = Audio(np.concatenate([samples, samples[: 15 * RATE]]))
    windows = recognizer.vad.windows(audio.samples, 12.0)
    features = recognizer._features([window.samples(audio.samples) for window in windows])
    prompt = recognizer.decoder.prompt("en", "transcribe")
    with torch.inference_mode():
        states = model.get_encoder()(features).last_hidden_state
        batched = recognizer.decoder.decode(states, prompt)
        alone_same = batched_same = 0
        for index in range(len(windows)):
            (alone,) = recognizer.decoder.decode(states[index : index + 1], prompt)
            (reference,) = recognizer._generate_tokens(features[index : index + 1], states[index : index + 1], "en", "transcribe")
            alone_same += list(alone.tokens) == reference
            batched_same += batched[index].tokens == alone.tokens
    report["windows"] = len(windows)
    report["lean_equals_generate_alone"] = f"{alone_same}/{len(windows)}"
    report["batched_equals_alone"] = f"{batched_same}/{len(windows)}"

    def config(**parameters: Any) -> InferenceConfig:
        return InferenceConfig.from_parameters({"language": "en", **parameters})[0]

    # Random weights are never confident: the checks are switched off, then forced on every window.
    thresholds = {"greedy": (float("-inf"), float("inf"), 0.6), "fallback": (float("inf"), 2.4, float("inf"))}
    for name, (logprob, compression, no_speech) in thresholds.items():
        decoding.LOGPROB_THRESHOLD, decoding.COMPRESSION_RATIO_THRESHOLD, decoding.NO_SPEECH_THRESHOLD = (
            logprob, compression, no_speech
        )
        assisted, assisted_s = median_time(lambda: engine.transcribe(audio, config(assisted=True, batch_size=1, chunk_length_s=12)))
        batched_t, batched_s = median_time(lambda: engine.transcribe(audio, config(assisted=False, batch_size=8, chunk_length_s=12)))
        report[f"{name}_assisted_equals_batched"] = assisted.chunks == batched_t.chunks
        report[f"{name}_chunks"] = len(batched_t.chunks)
        report[f"{name}_assisted_s"], report[f"{name}_batched_s"] = assisted_s, batched_s
    long_audio = Audio(np.tile(samples, 4))
    _, report["greedy_120s_batched_s"] = median_time(lambda: engine.transcribe(long_audio, config(assisted=False, batch_size=8)))
    if torch.cuda.is_available():
        report["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    print(json.dumps(report, indent=1), flush=True)


if __name__ == "__main__":
    main()
