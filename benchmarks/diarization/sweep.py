"""The built-in diarizer's DER across its cost settings: segmentation step, embedding stride and
clustering threshold, on the ten AMI snippets (aggregated), pyannote's sample and the AMI snippets
end to end.

    .venv/bin/python -m benchmarks.diarization.sweep --steps 2.5,5 --strides 1,2 --thresholds 0.75,0.85,0.95

Each step segments every file once; each stride embeds them once; each threshold only clusters
again. DER: pyannote.metrics, no collar, overlapped speech scored, no speaker count given. CPU s:
segmentation plus embeddings of all three sets, in this process (one thread by default).
"""

from __future__ import annotations

import argparse
import time

from benchmarks.common.scoring import AMI_DIR, new_metric, read_rttm, sample_wav
from benchmarks.diarization.builtin import build_clip, der


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="2.5,5", help="segmentation steps, seconds")
    parser.add_argument("--strides", default="1,2", help="embedding strides, in chunks")
    parser.add_argument("--thresholds", default="0.75,0.85,0.95", help="clustering cuts")
    parser.add_argument("--meeting", type=int, default=600, help="seconds of AMI snippets end to end")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    from whosaid.audio.loading import Audio, load_audio_file
    from whosaid.speaker_hints import SpeakerHints
    from whosaid.speakers.builtin import BuiltinDiarizer, BuiltinDiarizerOptions
    from whosaid.speakers.clustering import ClusteringOptions

    torch.set_num_threads(args.threads)
    references = read_rttm(AMI_DIR / "ami-train.rttm")
    snippets = [
        (load_audio_file(path), references[path.stem.removeprefix("ami_")])
        for path in sorted(AMI_DIR.glob("ami_*.wav"))
    ]
    sample = (load_audio_file(sample_wav()), next(iter(read_rttm(sample_wav().with_suffix(".rttm")).values())))
    meeting_samples, meeting_reference = build_clip(args.meeting)
    meeting = (Audio(meeting_samples), meeting_reference)
    loaded = BuiltinDiarizer.load("cpu")
    hints = SpeakerHints()

    print("| step | stride | threshold | AMI | sample | meeting (speakers) | CPU s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for step in [float(value) for value in args.steps.split(",")]:
        for stride in [int(value) for value in args.strides.split(",")]:
            options = BuiltinDiarizerOptions(segmentation_step_s=step, embedding_stride=stride)
            diarizer = BuiltinDiarizer(loaded.segmentation_model, loaded.embedding, options)
            started = time.process_time()
            prepared = [
                (audio, reference, segmentations, diarizer.embed(audio, segmentations))
                for audio, reference in [*snippets, sample, meeting]
                for segmentations in [diarizer.segment(audio)]
            ]
            cpu_s = time.process_time() - started
            for threshold in [float(value) for value in args.thresholds.split(",")]:
                diarizer.options = BuiltinDiarizerOptions(
                    segmentation_step_s=step, embedding_stride=stride, clustering=ClusteringOptions(threshold=threshold)
                )
                ami_metric = new_metric()
                scores, speakers = [], 0
                for index, (audio, reference, segmentations, embedded) in enumerate(prepared):
                    clusters = diarizer.cluster(segmentations, embedded, hints)
                    turns = diarizer.reconstruct(segmentations, clusters, hints, audio.duration_s).turns
                    if index < len(snippets):
                        der(reference, turns, audio.duration_s, ami_metric)
                    else:
                        scores.append(der(reference, turns, audio.duration_s))
                        speakers = len({turn.speaker for turn in turns})
                print(
                    f"| {step:g} | {stride} | {threshold:g} | {abs(ami_metric):.3f} | {scores[0]:.3f} | "
                    f"{scores[1]:.3f} ({speakers}) | {cpu_s:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
