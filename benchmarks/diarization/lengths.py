"""The built-in diarizer's DER by recording length, at each segmentation step: meetings of k
consecutive AMI snippets (tests/data/ami) end to end, one starting at each of the ten snippets
(wrapping round), scored together.

    .venv/bin/python -m benchmarks.diarization.lengths --snippets 1,2,3,4,6 --steps 2.5,5

DER: pyannote.metrics, no collar, overlapped speech scored, no speaker count given, aggregated
over the ten meetings of each length. AMI speaker ids are global, so a person heard in two
snippets is one speaker of the meeting.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.common.scoring import AMI_DIR, new_metric, read_rttm
from benchmarks.diarization.builtin import SAMPLE_RATE_HZ, der


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snippets", default="1,2,3,4,6", help="snippets per meeting (30 s each)")
    parser.add_argument("--steps", default="2.5,5", help="segmentation steps, seconds")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    from whosaid.audio.loading import Audio, load_audio_file
    from whosaid.speaker_hints import SpeakerHints
    from whosaid.speakers.builtin import BuiltinDiarizer, BuiltinDiarizerOptions

    torch.set_num_threads(args.threads)
    references = read_rttm(AMI_DIR / "ami-train.rttm")
    snippets = [
        (load_audio_file(path).samples, references[path.stem.removeprefix("ami_")])
        for path in sorted(AMI_DIR.glob("ami_*.wav"))
    ]
    loaded = BuiltinDiarizer.load("cpu")
    steps = [float(value) for value in args.steps.split(",")]
    diarizers = {
        step: BuiltinDiarizer(
            loaded.segmentation_model, loaded.embedding, BuiltinDiarizerOptions(segmentation_step_s=step)
        )
        for step in steps
    }
    print("| meeting | " + " | ".join(f"DER, step {step:g} s" for step in steps) + " |")
    print("| --- |" + " ---: |" * len(steps))
    for count in [int(value) for value in args.snippets.split(",")]:
        metrics = {step: new_metric() for step in steps}
        for first in range(len(snippets)):
            pieces, reference, offset_s = [], [], 0.0
            for samples, turns in (snippets[(first + index) % len(snippets)] for index in range(count)):
                pieces.append(samples)
                reference += [(start_s + offset_s, end_s + offset_s, who) for start_s, end_s, who in turns]
                offset_s += samples.size / SAMPLE_RATE_HZ
            audio = Audio(np.concatenate(pieces))
            for step, diarizer in diarizers.items():
                der(reference, diarizer.diarize(audio, SpeakerHints()).turns, audio.duration_s, metrics[step])
        row = " | ".join(f"{abs(metrics[step]):.3f}" for step in steps)
        print(f"| {30 * count} s (x{len(snippets)}) | {row} |", flush=True)


if __name__ == "__main__":
    main()
