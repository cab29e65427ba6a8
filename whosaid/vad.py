"""Voice activity detection: where the speech is, and Whisper windows cut in the pauses.

Whisper only ever sees 30 s windows. Cutting audio every 30 s splits words and hands Whisper
stretches of silence, on which it invents text or loops; pyannote's sample starts with 6.7 s of
silence and greedy decoding of the plain 30 s window repeats itself (WER 0.53). Silero VAD finds
the speech; consecutive speech regions are packed into windows of at most `max_window_s`, each
cut in a pause, as faster-whisper's batched pipeline does. Unlike faster-whisper, a window keeps
the pauses inside it, so a time inside a window is the window's start plus Whisper's timestamp:
no map back from concatenated speech is needed, and chunk times stay exact for speaker alignment.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from whosaid.config import WHISPER_SAMPLE_RATE_HZ
from whosaid.errors import ModelLoadError


@dataclass(frozen=True)
class VadOptions:
    """How speech regions are found. The defaults suit Whisper windows; the built-in diarizer
    asks for tighter edges."""

    # Silero's probability above which a 32 ms frame is speech (its recommended default).
    threshold: float = 0.5
    # Speech shorter than this is a click or a breath, not words.
    min_speech_ms: int = 250
    # A pause must last this long to end a speech region (faster-whisper's batched setting: short
    # enough to find a cut between sentences inside a 30 s window).
    min_silence_ms: int = 160
    # Kept on each side of a speech region, so that soft word onsets and endings stay in the window.
    speech_pad_ms: int = 200


@dataclass(frozen=True)
class SpeechWindow:
    """A stretch of audio decoded as one Whisper window: speech, and the pauses inside it."""

    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def samples(self, samples: np.ndarray, sample_rate_hz: int = WHISPER_SAMPLE_RATE_HZ) -> np.ndarray:
        return samples[int(round(self.start_s * sample_rate_hz)) : int(round(self.end_s * sample_rate_hz))]


class VoiceActivityDetector:
    """Silero VAD through its sequence ONNX model: one ONNX Runtime call per 16 s block instead
    of a Python call per 32 ms frame (several times faster), with the same per-frame
    probabilities. ONNX Runtime runs it on one thread, so it never competes
    with torch's threads."""

    def __init__(self, model: Any) -> None:
        self._model = model

    @classmethod
    def load(cls) -> "VoiceActivityDetector":
        return cls(_load_silero_sequence_model())

    def speech_regions(
        self, samples: np.ndarray, *, max_region_s: float = float("inf"), options: VadOptions = VadOptions()
    ) -> list[tuple[float, float]]:
        """(start_s, end_s) of each speech region, in order; a region longer than `max_region_s`
        (padding included) is split at its longest pause."""
        from silero_vad import get_speech_timestamps_from_probs

        samples = np.ascontiguousarray(samples, dtype=np.float32)
        if samples.size == 0:
            return []
        probabilities = self._model.audio_forward(samples, sampling_rate=WHISPER_SAMPLE_RATE_HZ)
        regions = get_speech_timestamps_from_probs(
            probabilities.tolist(),
            sampling_rate=WHISPER_SAMPLE_RATE_HZ,
            threshold=options.threshold,
            min_speech_duration_ms=options.min_speech_ms,
            max_speech_duration_s=max_region_s,
            min_silence_duration_ms=options.min_silence_ms,
            speech_pad_ms=options.speech_pad_ms,
            audio_length_samples=samples.size,
        )
        return [
            (region["start"] / WHISPER_SAMPLE_RATE_HZ, region["end"] / WHISPER_SAMPLE_RATE_HZ)
            for region in regions
        ]

    def windows(self, samples: np.ndarray, max_window_s: float) -> list[SpeechWindow]:
        return plan_windows(self.speech_regions(samples, max_region_s=max_window_s), max_window_s)


def plan_windows(regions: Sequence[tuple[float, float]], max_window_s: float) -> list[SpeechWindow]:
    """Pack consecutive speech regions into windows of at most `max_window_s`, so that every cut
    falls in a pause. Fewer, fuller windows mean fewer encoder passes (each costs a full 30 s
    window whatever it holds). A region longer than the window (the VAD could not find a pause)
    is cut into equal pieces."""
    windows: list[SpeechWindow] = []
    start_s = end_s = None
    for region_start_s, region_end_s in regions:
        if start_s is not None and region_end_s - start_s <= max_window_s:
            end_s = region_end_s
            continue
        if start_s is not None:
            windows.append(SpeechWindow(start_s, end_s))
        pieces = max(1, int(np.ceil((region_end_s - region_start_s) / max_window_s - 1e-9)))
        step_s = (region_end_s - region_start_s) / pieces
        for piece in range(pieces - 1):
            windows.append(SpeechWindow(region_start_s + piece * step_s, region_start_s + (piece + 1) * step_s))
        start_s, end_s = region_start_s + (pieces - 1) * step_s, region_end_s
    if start_s is not None:
        windows.append(SpeechWindow(start_s, end_s))
    return windows


@functools.lru_cache(maxsize=1)
def _load_silero_sequence_model() -> Any:
    import torch

    # Importing silero_vad calls torch.set_num_threads(1) for the whole process (its model.py
    # does so at import time), which would leave Whisper on one thread: put the count back.
    threads = torch.get_num_threads()
    try:
        from silero_vad import load_silero_vad

        return load_silero_vad(sequence=True)
    except Exception as error:  # noqa: BLE001 - missing package, missing onnxruntime, bad file
        raise ModelLoadError(
            f"cannot load the Silero VAD model: {error}. Install the pinned silero-vad and "
            "onnxruntime from requirements.txt"
        ) from error
    finally:
        torch.set_num_threads(threads)
