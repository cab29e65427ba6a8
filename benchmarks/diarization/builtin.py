"""The built-in diarizer's time, peak memory and DER on real meeting audio, one clip per process.

    .venv/bin/python -m benchmarks.diarization.builtin --threads 2 --clips 30,120,1200,3600
    .venv/bin/python -m benchmarks.diarization.builtin --clips 30,120,1200 --asr models/whisper-base --step 5

Run it with OpenMP threads as users get them (OMP_WAIT_POLICY unset): PASSIVE threads sleep after
every operation, which slows the decoder's many small ones in `--asr`.

Clips: `30` is pyannote's sample; longer clips are the ten AMI snippets of tests/data/ami laid end
to end (repeated as needed and cut to length), scored against their RTTM shifted the same way
(AMI speaker ids are global, so a person in two snippets is one speaker). DER: pyannote.metrics,
no collar, overlapped speech scored, no speaker count given. Each clip runs in a fresh process
after one warm-up run on the sample: the peak RSS (`ru_maxrss`) is that process's, model
included. `--step` sets the segmentation step (DIARIZATION_STEP_S; by default the diarizer's own, 2.5 s
up to 60 s and 5 s beyond on CPU). `--floor` adds the DER with
reference (oracle) clustering of the same segmentation. `--asr DIR` adds this project's speech
recognition of the same clip in the same process (the Whisper model in DIR, float32, greedy with
the beam fallback, batch 8, English, after its own warm-up), and the diarizer's time as a share of
it, in CPU seconds (what other processes on a shared machine inflate
least) and wall seconds. `--repeats N` times each N times in its process and reports the medians
(one run of a short clip varies by a quarter from run to run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from typing import Optional

import numpy as np

from benchmarks.common import scoring
from benchmarks.common.scoring import AMI_DIR, REPO, read_rttm, sample_wav
from benchmarks.common.timing import median_seconds

SAMPLE_RATE_HZ = 16_000


def build_clip(seconds: int) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    """Samples and reference turns of a clip of `seconds`."""
    from whosaid.audio.loading import load_audio_file

    if seconds <= 30:
        reference = next(iter(read_rttm(sample_wav().with_suffix(".rttm")).values()))
        return load_audio_file(sample_wav()).samples[: seconds * SAMPLE_RATE_HZ], reference
    references = read_rttm(AMI_DIR / "ami-train.rttm")
    pieces, reference, offset_s = [], [], 0.0
    paths = sorted(AMI_DIR.glob("ami_*.wav"))
    while offset_s < seconds:
        for path in paths:
            samples = load_audio_file(path).samples
            pieces.append(samples)
            reference += [(s + offset_s, e + offset_s, who) for s, e, who in references[path.stem.removeprefix("ami_")]]
            offset_s += samples.size / SAMPLE_RATE_HZ
    samples = np.concatenate(pieces)[: seconds * SAMPLE_RATE_HZ]
    return samples, [(s, min(e, seconds), who) for s, e, who in reference if s < seconds]


def der(reference: list[tuple[float, float, str]], turns, duration_s: float, metric=None) -> float:
    """DER of the SpeakerTurns `turns` on [0, duration_s], no collar; `metric` accumulates over
    files when given."""
    return scoring.der(reference, scoring.as_tracks(turns), duration_s, metric)


def measure(
    seconds: int,
    threads: int,
    floor: bool,
    asr: Optional[str] = None,
    step_s: Optional[float] = None,
    repeats: int = 1,
) -> dict:
    import torch

    from whosaid.audio.loading import Audio
    from whosaid.speaker_hints import SpeakerHints
    from whosaid.speakers.builtin import BuiltinDiarizer, BuiltinDiarizerOptions

    torch.set_num_threads(threads)
    diarizer = BuiltinDiarizer.load("cpu", BuiltinDiarizerOptions(segmentation_step_s=step_s))
    warm, _ = build_clip(30)
    diarizer.diarize(Audio(warm), SpeakerHints())
    samples, reference = build_clip(seconds)
    audio = Audio(samples)
    diarization, wall_s, cpu_s = median_seconds(lambda: diarizer.diarize(audio, SpeakerHints()), repeats)
    row = {
        "clip_s": seconds,
        "step_s": diarizer.step_s(audio.duration_s),
        "wall_s": round(wall_s, 2),
        "cpu_s": round(cpu_s, 2),
        "rtf": round(wall_s / audio.duration_s, 4),
        "s_per_min": round(60 * wall_s / audio.duration_s, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "der": round(der(reference, diarization.turns, audio.duration_s), 3),
        "speakers": len({turn.speaker for turn in diarization.turns}),
        "reference_speakers": len({speaker for _, _, speaker in reference}),
    }
    if floor:
        row["der_oracle_clustering"] = round(oracle_der(diarizer, audio, reference), 3)
    if asr:
        asr_wall_s, asr_cpu_s = time_asr(asr, audio, warm, repeats)
        row.update(
            asr_wall_s=round(asr_wall_s, 2),
            asr_cpu_s=round(asr_cpu_s, 2),
            share_cpu=round(cpu_s / asr_cpu_s, 3),
            share_wall=round(wall_s / asr_wall_s, 3),
        )
    return row


def time_asr(model_dir: str, audio, warm: np.ndarray, repeats: int = 1, language: str = "en") -> tuple[float, float]:
    """Median wall and CPU seconds of this project's transcription of `audio` in `language` (no
    diarizer) over `repeats` runs, after one transcription of `warm`."""
    from whosaid.audio.loading import Audio
    from whosaid.config import ModelSettings
    from whosaid.engine import Engine

    engine = Engine.from_settings(ModelSettings(asr_model=model_dir, diarization_model=None))
    config, _ = engine.parse_parameters({"language": language, "batch_size": 8})
    engine.transcribe(Audio(warm), config)
    _, wall_s, cpu_s = median_seconds(lambda: engine.transcribe(audio, config), repeats)
    return wall_s, cpu_s


def oracle_der(diarizer, audio, reference) -> float:
    """DER of the same segmentation and reconstruction with reference (oracle) clustering."""
    return der(reference, oracle_diarization(diarizer, audio, reference).turns, audio.duration_s)


def oracle_diarization(diarizer, audio, reference):
    """The built-in diarizer's segmentation and reconstruction with each local speaker given the
    reference speaker it overlaps most (pyannote's OracleClustering): what a perfect clustering
    of this segmentation gives. Its labels are SPEAKER_NN, not the reference's names."""
    import torch
    from pyannote.audio.pipelines.clustering import OracleClustering

    from whosaid.speaker_hints import SpeakerHints

    segmentations = diarizer.segment(audio)
    file = {
        "waveform": torch.from_numpy(audio.samples)[None],
        "sample_rate": SAMPLE_RATE_HZ,
        "annotation": scoring.annotation(reference),
    }
    clusters, _, _ = OracleClustering()(
        segmentations=segmentations, file=file, frames=diarizer.segmentation_model.receptive_field
    )
    return diarizer.reconstruct(segmentations, clusters, SpeakerHints(), audio.duration_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", default="30,120,1200,3600", help="comma-separated clip lengths in seconds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--step", type=float, help="segmentation step, seconds (DIARIZATION_STEP_S); default: the diarizer's own"
    )
    parser.add_argument("--floor", action="store_true", help="also the DER with reference clustering")
    parser.add_argument("--asr", metavar="DIR", help="also time speech recognition with this Whisper model")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per clip; the table gives their median")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the worker: one clip, JSON out
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one, args.threads, args.floor, args.asr, args.step, args.repeats)))
        return
    print(
        "| clip | step s | wall s | CPU s | × real time | s per minute | peak RSS MB | DER | DER, oracle clustering "
        "| speakers (reference) |"
        + (" ASR wall s | ASR CPU s | diarization ÷ ASR, CPU | ÷ ASR, wall |" if args.asr else "")
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|---:|" if args.asr else ""))
    for seconds in [int(spec) for spec in args.clips.split(",")]:
        command = [sys.executable, "-m", "benchmarks.diarization.builtin", "--one", str(seconds)]
        command += ["--threads", str(args.threads)] + (["--step", str(args.step)] if args.step else [])
        command += ["--asr", args.asr] if args.asr else []
        command += ["--repeats", str(args.repeats)]
        output = subprocess.run(
            command + (["--floor"] if args.floor else []),
            cwd=REPO,
            env={**os.environ, "PYANNOTE_METRICS_ENABLED": "false"},
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        row = json.loads(output.strip().splitlines()[-1])
        print(
            f"| {seconds} s | {row['step_s']:g} | {row['wall_s']} | {row['cpu_s']} | {row['rtf']} | "
            f"{row['s_per_min']} | "
            f"{row['peak_rss_mb']} | {row['der']} | {row.get('der_oracle_clustering', '')} | "
            f"{row['speakers']} ({row['reference_speakers']}) |"
            + (
                f" {row['asr_wall_s']} | {row['asr_cpu_s']} | {row['share_cpu']} | {row['share_wall']} |"
                if args.asr
                else ""
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
