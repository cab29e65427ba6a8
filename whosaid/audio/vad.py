"""Voice activity detection: where the speech is, and Whisper windows cut in the pauses.

Whisper only ever sees 30 s windows. Cutting audio every 30 s splits words and hands Whisper
stretches of silence, on which it invents text or loops: pyannote's sample starts with seconds
of silence, and greedy decoding of its plain 30 s window repeats itself (benchmarks/CHANGELOG.md,
"Numbers behind the code's choices"). Silero VAD finds
the speech; consecutive speech regions are packed into windows of at most `max_window_s`, each
cut in a pause, as faster-whisper's batched pipeline does. By default a window keeps the pauses
inside it, so a time inside a window is the window's start plus Whisper's timestamp. With
SPEECH_WINDOWS=joined, speech regions are joined with each pause cut to JOINED_WINDOW_PAUSE_S,
as faster-whisper joins them, and every time is mapped back (SpeechWindow.to_audio_s).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from whosaid.audio.store import Samples, SpilledSamples
from whosaid.config import WHISPER_SAMPLE_RATE_HZ
from whosaid.errors import ModelLoadError

#: The silence left between joined speech regions (SPEECH_WINDOWS=joined): a boundary Whisper
#: still sees between sentences (benchmarks/CHANGELOG.md, "Speech-only windows", for the lengths tried).
JOINED_WINDOW_PAUSE_S = 0.5


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
    """A stretch of audio decoded as one Whisper window. A contiguous window (no `pieces`) is the
    audio from `start_s` to `end_s`, pauses and all: a time inside it is `start_s` plus Whisper's
    timestamp. A joined window is its `pieces` of speech (audio times) one after the other with
    `gap_s` of silence between them instead of each pause; `to_audio_s` maps its times back."""

    start_s: float
    end_s: float
    pieces: tuple[tuple[float, float], ...] = ()
    gap_s: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def joined(self) -> bool:
        return bool(self.pieces)

    @property
    def offset_s(self) -> float:
        """What is added to Whisper's timestamps: the audio time of a contiguous window's start;
        a joined window's times stay its own until `to_audio_s`."""
        return 0.0 if self.joined else self.start_s

    @property
    def end_offset_s(self) -> float:
        """The window's end in the times `offset_s` gives."""
        if not self.joined:
            return self.end_s
        return sum(end_s - start_s for start_s, end_s in self.pieces) + self.gap_s * (len(self.pieces) - 1)

    def samples(self, samples: Samples, sample_rate_hz: int = WHISPER_SAMPLE_RATE_HZ) -> np.ndarray:
        if not self.joined:
            return samples[_index(self.start_s, sample_rate_hz) : _index(self.end_s, sample_rate_hz)]
        gap = np.zeros(_index(self.gap_s, sample_rate_hz), dtype=samples.dtype)
        parts = []
        for number, (start_s, end_s) in enumerate(self.pieces):
            if number:
                parts.append(gap)
            parts.append(samples[_index(start_s, sample_rate_hz) : _index(end_s, sample_rate_hz)])
        return np.concatenate(parts)

    def to_audio_s(self, time_s: float, *, is_end: bool) -> float:
        """The audio time of a time given as `offset_s` plus Whisper's timestamp. A time in a gap
        is no time of the audio: an end goes back to the speech before it, a start forward to the
        speech after it, so that no chunk or word spans a pause its speech does not."""
        if not self.joined:
            return min(max(time_s, self.start_s), self.end_s)
        piece_start_s = 0.0
        for number, (start_s, end_s) in enumerate(self.pieces):
            piece_end_s = piece_start_s + end_s - start_s
            if time_s <= piece_end_s or number == len(self.pieces) - 1:
                if time_s < piece_start_s and number:  # in the gap before this piece
                    return start_s if not is_end else self.pieces[number - 1][1]
                return min(max(start_s + time_s - piece_start_s, start_s), end_s)
            piece_start_s = piece_end_s + self.gap_s
        raise AssertionError("unreachable: the last piece takes every later time")


def _index(time_s: float, sample_rate_hz: int) -> int:
    return int(round(time_s * sample_rate_hz))


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
        self, samples: Samples, *, max_region_s: float = float("inf"), options: VadOptions = VadOptions()
    ) -> list[tuple[float, float]]:
        """(start_s, end_s) of each speech region, in order; a region longer than `max_region_s`
        (padding included) is split at its longest pause."""
        from silero_vad import get_speech_timestamps_from_probs

        if not isinstance(samples, SpilledSamples):
            samples = np.ascontiguousarray(samples, dtype=np.float32)
        if samples.size == 0:
            return []
        # Silero reads its input a block of 512 frames at a time, by slices: a spilled recording
        # is read from its file block by block.
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

    def windows(
        self, samples: Samples, max_window_s: float, *, pause_s: Optional[float] = None
    ) -> list[SpeechWindow]:
        """Windows of at most `max_window_s`: contiguous, or with `pause_s`, speech joined with
        its pauses shortened to `pause_s` (plan_joined_windows)."""
        regions = self.speech_regions(samples, max_region_s=max_window_s)
        if pause_s is None:
            return plan_windows(regions, max_window_s)
        return plan_joined_windows(regions, max_window_s, pause_s)


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


def plan_joined_windows(
    regions: Sequence[tuple[float, float]], max_window_s: float, pause_s: float
) -> list[SpeechWindow]:
    """Consecutive speech regions joined into windows of at most `max_window_s`, each pause cut
    to `pause_s` (a shorter pause is kept as it is, inside its piece), as faster-whisper's
    batched pipeline joins speech: Whisper decodes no long silence, and a recording with pauses
    needs fewer windows, never more than plan_windows. A window of one piece is a contiguous
    window; a region longer than the window is cut into equal contiguous windows."""
    windows: list[SpeechWindow] = []
    pieces: list[tuple[float, float]] = []
    length_s = 0.0

    def close_window() -> None:
        if len(pieces) == 1:
            windows.append(SpeechWindow(*pieces[0]))
        elif pieces:
            windows.append(SpeechWindow(pieces[0][0], pieces[-1][1], tuple(pieces), pause_s))
        pieces.clear()

    for start_s, end_s in regions:
        if pieces:
            pause = max(start_s - pieces[-1][1], 0.0)
            added_s = end_s - start_s + min(pause, pause_s)
            if length_s + added_s <= max_window_s:
                if pause <= pause_s:
                    pieces[-1] = (pieces[-1][0], max(end_s, pieces[-1][1]))
                else:
                    pieces.append((start_s, end_s))
                length_s += added_s
                continue
            close_window()
        if end_s - start_s > max_window_s:
            windows += plan_windows([(start_s, end_s)], max_window_s)
            continue
        pieces.append((start_s, end_s))
        length_s = end_s - start_s
    close_window()
    return windows


def plan_fewest_windows(
    regions: Sequence[tuple[float, float]], max_window_s: float, pause_s: float
) -> list[SpeechWindow]:
    """Contiguous windows (plan_windows), unless joining the speech across its pauses
    (plan_joined_windows) takes fewer: each window costs a whole encoder pass, so sparse speech
    (one party's turns on its channel of a call) is joined, and speech that fills its windows
    anyway keeps its pauses."""
    windows = plan_windows(regions, max_window_s)
    joined = plan_joined_windows(regions, max_window_s, pause_s)
    return joined if len(joined) < len(windows) else windows


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
