"""The built-in diarizer's DER on every real recording with a reference, one table per kind.

    .venv/bin/python -m benchmarks.diarization_real [--oracle] [--threshold 1.05]

Kinds and scoring as `benchmarks.scoring` sets them (meetings: the ten AMI snippets, no collar;
conversations: ../shared/data/conversations when present, 0.25 s collar; pyannote's sample),
overlapped speech scored, no speaker count given, the diarizer's defaults (the step by
recording length on CPU). `--oracle` adds the same segmentation and reconstruction with
reference (oracle) clustering: what a perfect clustering of this segmentation reaches.
"""

from __future__ import annotations

import argparse
from typing import Optional

from benchmarks.scoring import Recording, as_tracks, recordings, score


def diarize_all(threshold: Optional[float] = None, oracle: bool = False) -> tuple[list, list]:
    """(recording, duration_s, turns) of the diarizer, and of oracle clustering when asked."""
    import torch

    from benchmarks.diarization import oracle_diarization
    from whosaid.audio.loading import load_audio_file
    from whosaid.speaker_hints import SpeakerHints
    from whosaid.speakers.builtin import BuiltinDiarizer, BuiltinDiarizerOptions
    from whosaid.speakers.clustering import ClusteringOptions

    torch.set_num_threads(1)
    options = BuiltinDiarizerOptions(clustering=ClusteringOptions(threshold=threshold))
    diarizer = BuiltinDiarizer.load("cpu", options)
    found, floor = [], []
    for recording in recordings():
        audio = load_audio_file(recording.path)
        found.append((recording, audio.duration_s, as_tracks(diarizer.diarize(audio, SpeakerHints()).turns)))
        if oracle:
            turns = oracle_diarization(diarizer, audio, list(recording.reference)).turns
            floor.append((recording, audio.duration_s, as_tracks(turns)))
    return found, floor


def table(found: list[tuple[Recording, float, list]], floor: list) -> str:
    scores, floors = score(found), score(floor) if floor else None
    lines = []
    for kind in scores.metrics:
        lines += [f"\n{kind}\n", "| file | speakers (reference) | DER |" + (" oracle clustering |" if floors else "")]
        lines.append("| --- | ---: | ---: |" + (" ---: |" if floors else ""))
        for name, (row_kind, der, speakers, expected) in scores.per_file.items():
            if row_kind == kind:
                extra = f" {floors.per_file[name][1]:.3f} |" if floors else ""
                lines.append(f"| {name} | {speakers} ({expected}) | {der:.3f} |{extra}")
        extra = f" **{floors.aggregate(kind):.3f}** |" if floors else ""
        lines.append(f"| **aggregated** | | **{scores.aggregate(kind):.3f}** |{extra}")
    lines.append(f"\nall kinds, each with its collar: {scores.aggregate():.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, help="clustering cut; default the embedder's")
    parser.add_argument("--oracle", action="store_true", help="also the DER with reference clustering")
    args = parser.parse_args()
    print(table(*diarize_all(args.threshold, args.oracle)))


if __name__ == "__main__":
    main()
