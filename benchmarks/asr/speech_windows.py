"""Contiguous windows against speech-only (joined) windows, and which pause to leave between
joined speech: windows, decoded tokens and WER (deterministic), and seconds (indicative on a
shared machine), whisper-base float32, batch 8, greedy, language en, one process, each
configuration once after a warm-up. Clips: those of benchmarks/common/clips.py, and `ami`, the ten AMI
snippets of tests/data/ami joined (5 minutes, long pauses; no reference text: its "WER" column
is the joined text against the contiguous one).

    python -m benchmarks.asr.speech_windows                       # 30 s and ami; pauses 0.2, 0.5, 1.0 s
    python -m benchmarks.asr.speech_windows --clips 120 1200 --pauses 0.5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.common.clips import build_clip, word_error_rate
from benchmarks.server.local_server import REPO_ROOT
from benchmarks.server.stream_latency import AMI_DIR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "whisper-base"))
    parser.add_argument("--clips", nargs="+", default=["30", "ami"])
    parser.add_argument("--pauses", nargs="+", type=float, default=[0.2, 0.5, 1.0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from whosaid.audio.loading import Audio, load_audio_file
    from whosaid.config import InferenceConfig, ModelSettings
    from whosaid.engine import Engine

    torch.set_num_threads(args.threads)
    engine = Engine.from_settings(ModelSettings(asr_model=args.model, diarization_model=None))
    recognizer = engine.recognizer
    config, _ = InferenceConfig.from_parameters({"language": "en", "batch_size": 8})
    decoded_tokens = [0]
    decode = recognizer.decoder.decode

    def counting_decode(*decode_args, **decode_kwargs):  # type: ignore[no-untyped-def]
        results = decode(*decode_args, **decode_kwargs)
        decoded_tokens[0] += sum(len(result.tokens) for result in results)
        return results

    recognizer.decoder.decode = counting_decode  # type: ignore[method-assign]
    engine.transcribe(Audio(build_clip("30").samples), config)  # warm-up
    print("| clip | planning | pause | windows | decoded tokens | WER | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for name in args.clips:
        if name == "ami":
            samples = np.concatenate([load_audio_file(path).samples for path in sorted(AMI_DIR.glob("ami_trn*.wav"))])
            reference = None
        else:
            clip = build_clip(name)
            samples, reference = clip.samples, clip.reference_text
        for pause_s in [None, *args.pauses]:
            recognizer.window_pause_s = pause_s
            windows = recognizer._windows(Audio(samples), 30.0, multilingual=False)
            decoded_tokens[0] = 0
            started = time.perf_counter()
            transcript = engine.transcribe(Audio(samples), config)
            seconds = time.perf_counter() - started
            if pause_s is None and reference is None:
                reference = transcript.text
            wer = word_error_rate(reference, transcript.text)
            kind = "contiguous" if pause_s is None else "joined"
            pause = "kept" if pause_s is None else f"{pause_s:.1f} s"
            row = f"| {name} | {kind} | {pause} | {len(windows)} | {decoded_tokens[0]} | {wer:.3f} | {seconds:.1f} |"
            print(row, flush=True)


if __name__ == "__main__":
    main()
