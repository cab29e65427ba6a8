"""Benchmark audio and its ground truth, all made from pyannote's 30 s two-speaker sample.

Every clip is built in memory from `sample.wav` (repeated, or cut), together with the matching
reference transcript (`sample.stm`) and speaker turns (`sample.rttm`), so that speed, word error
rate and diarization error rate are always measured against the same audio. Nothing is
downloaded: the sample ships inside the pyannote.audio wheel.
"""

from __future__ import annotations

import functools
import importlib.util
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# speed_report.py takes word_error_rate from here; it lives in benchmarks/common/wer.py, shared with the tests.
from benchmarks.common.scoring import rttm_turns
from benchmarks.common.wer import word_error_rate as word_error_rate
from whosaid.config import WHISPER_SAMPLE_RATE_HZ

SAMPLE_RATE_HZ = WHISPER_SAMPLE_RATE_HZ  # what Whisper and pyannote take; whosaid.audio.loading decodes to this rate
INT16_FULL_SCALE = 32767  # PCM16 WAV payloads: float samples in [-1, 1] scaled to int16

# Named clips. A number of seconds that is a whole multiple of the sample's length repeats the
# sample ("120": four times); "START-END" cuts it (seconds). The names below are the cuts the
# benchmarks use, chosen on utterance boundaries of sample.stm so the reference stays exact.
NAMED_CUTS: dict[str, tuple[float, float]] = {
    # CI smoke: "This is Diane in New Jersey." (12.54-14.18 s) and the edges of its neighbours.
    "smoke": (12.0, 15.0),
    # k6's short clip: 8 s from the first "Hello?" to "This is Diane in New Jersey."
    "short": (6.4, 14.4),
}


@dataclass(frozen=True)
class Utterance:
    """One line of sample.stm: who said what, when (seconds from the start of the file)."""

    start_s: float
    end_s: float
    speaker: str
    text: str


@dataclass(frozen=True)
class Turn:
    """One line of sample.rttm: a speaker talking from `start_s` to `end_s`."""

    start_s: float
    end_s: float
    speaker: str


@dataclass(frozen=True)
class Clip:
    """Audio for one benchmark case and what a perfect system would output for it."""

    name: str
    samples: np.ndarray  # shape (n_samples,), float32 mono at SAMPLE_RATE_HZ
    reference_text: str
    reference_turns: tuple[Turn, ...]

    @property
    def duration_s(self) -> float:
        return len(self.samples) / SAMPLE_RATE_HZ


def sample_dir() -> Path:
    """Where pyannote.audio keeps sample.wav, sample.stm and sample.rttm."""
    spec = importlib.util.find_spec("pyannote.audio")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "pyannote.audio is not installed; the benchmarks use its bundled sample "
            "(pip install -r requirements-dev.txt)"
        )
    return Path(spec.origin).parent / "sample"


@functools.lru_cache(maxsize=1)
def sample_samples() -> np.ndarray:
    """sample.wav decoded once by the project's own decoder (float32 mono 16 kHz)."""
    from whosaid.audio.loading import load_audio_file

    return load_audio_file(sample_dir() / "sample.wav").samples


def read_utterances(path: Path | None = None) -> tuple[Utterance, ...]:
    """sample.stm lines: `file channel speaker start end text...`."""
    path = path or sample_dir() / "sample.stm"
    utterances = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith(";;"):
            continue
        _, _, speaker, start, end, text = line.split(maxsplit=5)
        utterances.append(Utterance(float(start), float(end), speaker, text))
    return tuple(utterances)


def read_turns(path: Path | None = None) -> tuple[Turn, ...]:
    """sample.rttm SPEAKER lines: `SPEAKER file channel onset duration <NA> <NA> speaker ...`."""
    path = path or sample_dir() / "sample.rttm"
    return tuple(Turn(*turn) for turn in rttm_turns(path.read_text(encoding="utf-8")))


def build_clip(spec: str) -> Clip:
    """A clip from its spec: a name in NAMED_CUTS, "START-END" (a cut, seconds), or a number of
    seconds that is a whole multiple of the sample's length (the sample repeated)."""
    spec = spec.strip()
    if spec in NAMED_CUTS:
        return cut_clip(*NAMED_CUTS[spec], name=spec)
    if "-" in spec:
        start, _, end = spec.partition("-")
        return cut_clip(float(start), float(end), name=spec)
    samples = sample_samples()
    sample_s = len(samples) / SAMPLE_RATE_HZ
    try:
        target_s = float(spec)
    except ValueError:
        raise ValueError(
            f"unknown clip {spec!r}: use {', '.join(NAMED_CUTS)}, START-END in seconds, or a "
            f"multiple of {sample_s:g} s (the sample repeated)"
        ) from None
    times = round(target_s / sample_s)
    if times < 1 or abs(times * sample_s - target_s) > 1.0:
        raise ValueError(
            f"clip {spec!r}: a repeated clip must last a whole multiple of the sample's "
            f"{sample_s:g} s (30, 60, 120, ...); cut shorter clips with START-END"
        )
    return repeated_clip(times, name=spec)


def repeated_clip(times: int, *, name: str) -> Clip:
    """The sample played `times` times back to back; references repeat with it."""
    samples = sample_samples()
    sample_s = len(samples) / SAMPLE_RATE_HZ
    text = reference_text(read_utterances())
    turns = tuple(
        Turn(turn.start_s + k * sample_s, turn.end_s + k * sample_s, turn.speaker)
        for k in range(times)
        for turn in read_turns()
    )
    return Clip(name, np.tile(samples, times), " ".join([text] * times), turns)


def cut_clip(start_s: float, end_s: float, *, name: str) -> Clip:
    """Samples from `start_s` to `end_s`. The reference text holds the utterances whose midpoint
    lies inside the cut (an utterance cut in half counts where most of it is); speaker turns are
    clipped to the cut and shifted to start at 0."""
    samples = sample_samples()
    if not 0 <= start_s < end_s <= len(samples) / SAMPLE_RATE_HZ:
        raise ValueError(f"cut {start_s}-{end_s} s is outside the {len(samples) / SAMPLE_RATE_HZ:g} s sample")
    inside = [u for u in read_utterances() if start_s <= (u.start_s + u.end_s) / 2 < end_s]
    turns = tuple(
        Turn(max(turn.start_s, start_s) - start_s, min(turn.end_s, end_s) - start_s, turn.speaker)
        for turn in read_turns()
        if turn.end_s > start_s and turn.start_s < end_s
    )
    piece = samples[int(start_s * SAMPLE_RATE_HZ) : int(end_s * SAMPLE_RATE_HZ)]
    return Clip(name, np.ascontiguousarray(piece), reference_text(inside), turns)


def reference_text(utterances: tuple[Utterance, ...] | list[Utterance]) -> str:
    return " ".join(utterance.text for utterance in utterances)


def write_wav(path: Path, samples: np.ndarray) -> Path:
    """16-bit PCM mono WAV at 16 kHz: the smallest common format every decoder accepts, so
    request payloads stay small (base64 of it is what the load tests send)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pcm = (np.clip(samples, -1.0, 1.0) * INT16_FULL_SCALE).astype("<i2")
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(SAMPLE_RATE_HZ)
        handle.writeframes(pcm.tobytes())
    return path
