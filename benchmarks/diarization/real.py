"""The built-in diarizer's DER on every real recording with a reference, one table per kind.

    .venv/bin/python -m benchmarks.diarization.real [--oracle] [--threshold 1.05] [--step 2.5]
    .venv/bin/python -m benchmarks.diarization.real --cost models/whisper-base --repeats 3

Kinds and scoring as `benchmarks.common.scoring` sets them (meetings: the ten AMI snippets, no collar;
conversations: ../shared/data/conversations when present, 0.25 s collar; pyannote's sample),
overlapped speech scored, no speaker count given, the diarizer's defaults (the step by
recording length on CPU). `--oracle` adds the same segmentation and reconstruction with
reference (oracle) clustering: what a perfect clustering of this segmentation reaches.
`--cost DIR` times the diarizer (2 threads, median of `--repeats` after a warm-up) beside this
project's speech recognition of the same file (the Whisper model in DIR, float32, greedy with the
beam fallback, batch 8, in the file's language) and reports their ratio, in CPU and wall seconds.
"""

from __future__ import annotations

import argparse
from typing import Optional

from benchmarks.common.scoring import Recording, as_tracks, recordings, score

LANGUAGES = {"meeting": "en", "sample": "en", "conversation": "de"}


def diarize_all(
    threshold: Optional[float] = None, oracle: bool = False, step_s: Optional[float] = None
) -> tuple[list, list]:
    """(recording, duration_s, turns) of the diarizer, and of oracle clustering when asked."""
    import torch

    from benchmarks.diarization.builtin import oracle_diarization
    from whosaid.audio.loading import load_audio_file
    from whosaid.speaker_hints import SpeakerHints
    from whosaid.speakers.builtin import BuiltinDiarizer, BuiltinDiarizerOptions
    from whosaid.speakers.clustering import ClusteringOptions

    torch.set_num_threads(1)
    options = BuiltinDiarizerOptions(segmentation_step_s=step_s, clustering=ClusteringOptions(threshold=threshold))
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


def cost(
    model_dir: str, repeats: int, step_s: Optional[float] = None, kinds: str = "meeting,conversation,sample"
) -> None:
    """The diarizer's time beside the speech recognition's, per file."""
    import torch

    from benchmarks.common.timing import median_seconds
    from benchmarks.diarization.builtin import time_asr
    from whosaid.audio.loading import load_audio_file
    from whosaid.speaker_hints import SpeakerHints
    from whosaid.speakers.builtin import BuiltinDiarizer, BuiltinDiarizerOptions

    torch.set_num_threads(2)
    diarizer = BuiltinDiarizer.load("cpu", BuiltinDiarizerOptions(segmentation_step_s=step_s))
    files = [(recording, load_audio_file(recording.path)) for recording in recordings(kinds.split(","))]
    warm = files[0][1]
    diarizer.diarize(warm, SpeakerHints())
    print("| file | length s | step s | diarization wall / CPU s | ASR wall / CPU s | diarization ÷ ASR, CPU / wall |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for recording, audio in files:
        _, wall_s, cpu_s = median_seconds(lambda audio=audio: diarizer.diarize(audio, SpeakerHints()), repeats)
        asr_wall_s, asr_cpu_s = time_asr(model_dir, audio, warm.samples, repeats, LANGUAGES[recording.kind])
        print(
            f"| {recording.name} | {audio.duration_s:.0f} | {diarizer.step_s(audio.duration_s):g} | "
            f"{wall_s:.2f} / {cpu_s:.2f} | {asr_wall_s:.2f} / {asr_cpu_s:.2f} | "
            f"{cpu_s / asr_cpu_s:.2f} / {wall_s / asr_wall_s:.2f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, help="clustering cut; default the embedder's")
    parser.add_argument("--step", type=float, help="segmentation step, s; default the diarizer's by length")
    parser.add_argument("--oracle", action="store_true", help="also the DER with reference clustering")
    parser.add_argument("--cost", metavar="DIR", help="time the diarizer beside ASR with this Whisper model")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per file with --cost (median)")
    parser.add_argument("--kinds", default="meeting,conversation,sample", help="kinds of recording timed by --cost")
    args = parser.parse_args()
    if args.cost:
        cost(args.cost, args.repeats, args.step, args.kinds)
        return
    print(table(*diarize_all(args.threshold, args.oracle, args.step)))


if __name__ == "__main__":
    main()
