"""CAM++ embedding speed on CPU: batches of 10 s windows, as pyannote's diarization pipeline hands
them over, whole or cut by per-speaker masks.

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python -m benchmarks.diarization.campplus_speed --threads 2

Rows: the whole window embedded (no mask), and three speakers per window, each active on its own
third (three rows per window, each about 3.3 s of frames). Times are the median of `--repeats`
runs after one warm-up, fbank included.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path
from typing import Optional

import torch

from benchmarks.common.timing import median_seconds
from whosaid.audio.loading import load_audio_file
from whosaid.speakers.campplus.embedding import CamPlusPlusEmbedding

SAMPLE_RATE_HZ = 16_000
WINDOW_S = 10
MASK_FRAMES = 589  # segmentation-3.0's frames per 10 s window


def windows(count: int) -> torch.Tensor:
    """`count` 10 s windows of pyannote's sample.wav, 1 s apart: (count, 1, 160000)."""
    spec = importlib.util.find_spec("pyannote.audio")
    assert spec is not None and spec.origin is not None, "pyannote.audio is not installed"
    samples = torch.from_numpy(load_audio_file(Path(spec.origin).parent / "sample" / "sample.wav").samples)
    length = WINDOW_S * SAMPLE_RATE_HZ
    starts = [(index * SAMPLE_RATE_HZ) % (len(samples) - length) for index in range(count)]
    return torch.stack([samples[start : start + length] for start in starts]).unsqueeze(1)


def seconds(
    embedder: CamPlusPlusEmbedding, waveforms: torch.Tensor, masks: Optional[torch.Tensor], repeats: int
) -> tuple[float, float]:
    """Median wall-clock and CPU seconds of one call, after one call to warm up."""
    embedder(waveforms, masks)
    _, wall_s, cpu_s = median_seconds(lambda: embedder(waveforms, masks), repeats)
    return wall_s, cpu_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16, help="10 s windows per call")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    embedder = CamPlusPlusEmbedding.load("cpu")
    batch = windows(args.batch)

    thirds = torch.zeros(3 * args.batch, MASK_FRAMES)
    for row in range(3 * args.batch):
        speaker = row % 3
        thirds[row, speaker * MASK_FRAMES // 3 : (speaker + 1) * MASK_FRAMES // 3] = 1.0
    cases = {
        "whole window": (batch, None),
        "3 speakers, a third each": (batch.repeat_interleave(3, dim=0), thirds),
    }
    print(f"torch {torch.__version__}, {args.threads} threads, batch of {args.batch} windows of {WINDOW_S} s")
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print(
        "| rows per window | ms per call | ms per 10 s window | s per minute of audio "
        "| × real time | CPU ms per window |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (waveforms, masks) in cases.items():
        elapsed, cpu = seconds(embedder, waveforms, masks, args.repeats)
        per_window_s = elapsed / args.batch
        print(
            f"| {name} | {elapsed * 1000:.0f} | {per_window_s * 1000:.0f} "
            f"| {per_window_s * 60 / WINDOW_S:.2f} | {per_window_s / WINDOW_S:.3f} | {cpu * 1000 / args.batch:.0f} |"
        )


if __name__ == "__main__":
    main()
