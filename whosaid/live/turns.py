"""The input audio buffer of a live session and its turn detection (OpenAI's `server_vad`).

Audio arrives in small pieces. Every `VAD_STEP_S` of new audio, Silero VAD (the project's
VoiceActivityDetector) looks at the last few seconds only, so the cost per step stays the same
however long the session. Those seconds are the newest audio received, committed or not: what
the VAD sees at a time depends on the audio alone, not on when the turns before were committed
(which depends on how fast the server transcribes them), so a recording is cut into the same
turns on a fast or a slow machine. Only speech after the committed audio counts. A turn starts
where speech of at least `min_speech_ms` begins (minus `prefix_padding_ms`, kept for soft
onsets) and stops once `silence_duration_ms` of silence follows its last speech. A turn's audio
reaches further back than its reported start, up to `LOOKBACK_S` of the audio heard since the
turn before: quiet words the VAD does not mark as speech (a far-field voice, a murmur before the
turn) are heard by Whisper live as they are in a file, whose windows keep their pauses. Without
turn detection the client commits the buffer itself.

Times are on the session's clock: seconds of audio received since the session began.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from whosaid.audio.vad import VadOptions
from whosaid.config import WHISPER_SAMPLE_RATE_HZ

RATE = WHISPER_SAMPLE_RATE_HZ
#: How often the VAD looks at the newest audio.
VAD_STEP_S = 0.1
#: Audio the VAD sees before the newest sample, beyond the silence it waits for: enough for
#: Silero's state to settle and to find a speech region's start.
VAD_CONTEXT_S = 1.5
#: The newest audio kept for the VAD, committed or not: the longest silence_duration_ms a session
#: may ask for (10 s), and VAD_CONTEXT_S.
HEARD_S = 10.0 + VAD_CONTEXT_S
#: Kept after a turn's last speech: word endings are soft.
TURN_TAIL_S = 0.2
#: A turn longer than this (one Whisper window) is cut where it has reached, speech or not.
MAX_TURN_S = 30.0
#: The most audio before a turn's speech (its prefix padding included) that the turn's audio
#: takes, when that audio was heard after the turn before.
LOOKBACK_S = 1.0


@dataclass(frozen=True)
class TurnDetection:
    """OpenAI's server_vad settings, with its defaults."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500

    def vad_options(self) -> VadOptions:
        # No padding and short pauses: the raw regions; this class adds the turn's own margins.
        return VadOptions(threshold=self.threshold, min_speech_ms=250, min_silence_ms=100, speech_pad_ms=30)


@dataclass(frozen=True)
class BufferEvent:
    """`speech_started` at `time_s` (the speech's start minus the prefix padding) with the turn's
    audio starting at `audio_start_s` (up to LOOKBACK_S earlier), or `speech_stopped` at `time_s`
    (when the silence was heard out) with the turn's audio ending at `turn_end_s`."""

    kind: str
    time_s: float
    turn_end_s: float = 0.0
    audio_start_s: float = 0.0


class InputBuffer:
    """The session's audio not yet committed, at 16 kHz."""

    def __init__(self, vad: Any, detection: Optional[TurnDetection]) -> None:
        self.vad = vad
        self.detection = detection
        self._samples = np.zeros(0, np.float32)
        self.start_s = 0.0  # session time of the buffer's first sample
        self.speech_start_s: Optional[float] = None  # the current turn's start, while speech goes on
        self._last_speech_end_s = 0.0
        # Samples received, and received when the VAD last looked: counted, not timed, so that
        # the VAD looks at the same samples whatever has been committed (dropped) before.
        self._received = 0
        self._checked = 0
        self._heard = np.zeros(0, np.float32)  # the newest audio received, up to HEARD_S

    @property
    def end_s(self) -> float:
        return self.start_s + self._samples.size / RATE

    @property
    def duration_s(self) -> float:
        return self._samples.size / RATE

    def samples(self, start_s: Optional[float] = None, end_s: Optional[float] = None) -> np.ndarray:
        """The buffer's samples between two session times (its whole content by default)."""
        first = 0 if start_s is None else max(0, int(round((start_s - self.start_s) * RATE)))
        last = self._samples.size if end_s is None else max(first, int(round((end_s - self.start_s) * RATE)))
        return self._samples[first:last]

    def append(self, samples: np.ndarray) -> list[BufferEvent]:
        self._samples = np.concatenate([self._samples, samples])
        self._heard = np.concatenate([self._heard, samples])[-int(HEARD_S * RATE) :]
        self._received += samples.size
        if self.detection is None or self._received - self._checked < int(round(VAD_STEP_S * RATE)):
            return []
        self._checked = self._received
        return self._detect(self.detection)

    def take(self, end_s: Optional[float] = None) -> tuple[float, np.ndarray]:
        """Commit: the audio up to `end_s` (all of it by default) leaves the buffer; returns its
        session start time and samples."""
        end_s = self.end_s if end_s is None else end_s
        start_s, taken = self.start_s, self.samples(None, end_s)
        self._drop_before(end_s)
        self.speech_start_s = None
        return start_s, taken

    def clear(self) -> None:
        self._drop_before(self.end_s)
        self.speech_start_s = None

    def _drop_before(self, time_s: float) -> None:
        keep_from = min(self._samples.size, max(0, int(round((time_s - self.start_s) * RATE))))
        self._samples = self._samples[keep_from:].copy()
        self.start_s += keep_from / RATE

    def _detect(self, detection: TurnDetection) -> list[BufferEvent]:
        silence_s = detection.silence_duration_ms / 1000
        window = self._heard[-int(round((silence_s + VAD_CONTEXT_S) * RATE)) :]
        window_start_s = self.end_s - window.size / RATE
        regions = [
            (max(window_start_s + start_s, self.start_s), window_start_s + end_s)
            for start_s, end_s in self.vad.speech_regions(window, options=detection.vad_options())
            if window_start_s + end_s > self.start_s  # speech of a committed turn is that turn's
        ]
        events: list[BufferEvent] = []
        if self.speech_start_s is None:
            if not regions:
                # Nothing to keep but what a turn starting now would take before its speech.
                self._drop_before(self.end_s - self._lookback_s(detection) - VAD_CONTEXT_S)
                return events
            self.speech_start_s = max(self.start_s, regions[0][0] - detection.prefix_padding_ms / 1000)
            self._last_speech_end_s = regions[-1][1]
            audio_start_s = max(self.start_s, regions[0][0] - self._lookback_s(detection))
            events.append(BufferEvent("speech_started", self.speech_start_s, audio_start_s=audio_start_s))
        if regions:
            # The newest view wins: a region that reached the end of an earlier window ended
            # there only because the audio did.
            self._last_speech_end_s = regions[-1][1]
        heard_out = self.end_s - self._last_speech_end_s >= silence_s
        if heard_out or self.end_s - self.speech_start_s >= MAX_TURN_S:
            turn_end_s = self._last_speech_end_s + TURN_TAIL_S if heard_out else self.end_s
            events.append(BufferEvent("speech_stopped", self.end_s, turn_end_s))
        return events

    @staticmethod
    def _lookback_s(detection: TurnDetection) -> float:
        return max(LOOKBACK_S, detection.prefix_padding_ms / 1000)

    def turn_end_if_pause_s(self) -> Optional[float]:
        """While a turn is being spoken and its speech has paused for TURN_TAIL_S: where the turn
        ends if the pause lasts (the `turn_end_s` its speech_stopped would give); else None."""
        if self.speech_start_s is None or self.end_s - self._last_speech_end_s < TURN_TAIL_S:
            return None
        return self._last_speech_end_s + TURN_TAIL_S

    def paused_at(self, turn_end_s: float, tolerance_s: float) -> bool:
        """Whether the speech is still paused at the pause that would end the turn at
        `turn_end_s` (an earlier `turn_end_if_pause_s`, give or take `tolerance_s`: the VAD may
        move a region's end by a few frames), i.e. no speech followed it so far."""
        pause_end_s = self.turn_end_if_pause_s()
        return pause_end_s is not None and abs(pause_end_s - turn_end_s) <= tolerance_s

    @property
    def last_speech_end_s(self) -> float:
        return self._last_speech_end_s
