"""How far QUANTIZATION=int8's transcripts stray from float32's on real meeting speech: the ten AMI
snippets of tests/data/ami (no reference transcripts), each alone and all ten joined (5 minutes,
8 windows, batched), decoded by whisper-base in float32 and in int8 (greedy with the beam
fallback, batch 8, language en); the word error rate of int8's text against float32's. A measure
of what quantization changes, on about 430 words (alone or joined), where pyannote's sample
holds 81: read beside the WER tables, not instead of them.

    python -m benchmarks.asr.int8_agreement
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.common.wer import normalise_text
from benchmarks.server.local_server import REPO_ROOT
from benchmarks.server.stream_latency import AMI_DIR


def transcripts(model: str, quantization: str, audios: list) -> tuple[list[str], str]:
    """(each snippet's text, the joined snippets' text) under `quantization`."""
    from whosaid.audio.loading import Audio
    from whosaid.config import ModelSettings
    from whosaid.engine import Engine

    engine = Engine.from_settings(ModelSettings(asr_model=model, diarization_model=None, quantization=quantization))
    config, _ = engine.parse_parameters({"language": "en", "batch_size": 8})
    alone = [engine.transcribe(audio, config).text for audio in audios]
    joined = engine.transcribe(Audio(np.concatenate([audio.samples for audio in audios])), config).text
    return alone, joined


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "whisper-base"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import jiwer
    import torch

    from whosaid.audio.loading import load_audio_file

    torch.set_num_threads(args.threads)
    audios = [load_audio_file(path) for path in sorted(AMI_DIR.glob("ami_trn*.wav"))]
    float32_alone, float32_joined = transcripts(args.model, "none", audios)
    int8_alone, int8_joined = transcripts(args.model, "int8", audios)
    # Snippets where float32 hears no words (far-field trn01) have no rate of their own.
    pairs = [(normalise_text(f), normalise_text(i)) for f, i in zip(float32_alone, int8_alone, strict=True)]
    pairs = [(f, i) for f, i in pairs if f]
    alone = jiwer.wer([f for f, _ in pairs], [i for _, i in pairs])
    joined = jiwer.wer(normalise_text(float32_joined), normalise_text(int8_joined))
    words = sum(len(f.split()) for f, _ in pairs)
    print("| text | float32 words | int8 against float32 (WER) |")
    print("| --- | ---: | ---: |")
    print(f"| each snippet alone ({len(pairs)} with words) | {words} | {alone:.3f} |")
    print(f"| the ten joined | {len(normalise_text(float32_joined).split())} | {joined:.3f} |")


if __name__ == "__main__":
    main()
