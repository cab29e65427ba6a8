"""A multi-speaker conversation with exact reference turns, spoken by espeak-ng voices.

Each line is synthesised alone, its leading and trailing silence trimmed, and placed on the time
line after a short gap, so every reference turn is exactly where its speech is. The script mixes
long turns with one-word replies and fast turn-taking (gaps of 0.15-0.4 s), what meetings and
calls look like and what segment-level speaker attribution gets wrong.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from whosaid.config import WHISPER_SAMPLE_RATE_HZ as SAMPLE_RATE_HZ

_SILENCE_THRESHOLD = 0.01  # |sample| below this, at either end of a clip, is trimmed away


@dataclass(frozen=True)
class Voice:
    """An espeak-ng voice: `name` as `espeak-ng -v` takes it, pitch 0-99, speed in words/min."""

    name: str
    pitch: int
    speed_wpm: int


@dataclass(frozen=True)
class Line:
    speaker: str
    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Conversation:
    samples: np.ndarray  # float32 mono at SAMPLE_RATE_HZ
    lines: tuple[Line, ...]

    @property
    def duration_s(self) -> float:
        return len(self.samples) / SAMPLE_RATE_HZ

    @property
    def speakers(self) -> tuple[str, ...]:
        return tuple(sorted({line.speaker for line in self.lines}))

    def text(self) -> str:
        return " ".join(line.text for line in self.lines)

    def rttm(self, uri: str = "conversation") -> str:
        return "".join(
            f"SPEAKER {uri} 1 {line.start_s:.3f} {line.end_s - line.start_s:.3f} <NA> <NA> "
            f"{line.speaker} <NA> <NA>\n"
            for line in self.lines
        )

    def wav_bytes(self) -> bytes:
        import io
        import wave

        pcm = (np.clip(self.samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(SAMPLE_RATE_HZ)
            wav.writeframes(pcm)
        return buffer.getvalue()


VOICES = {
    "alice": Voice("en-us+f3", pitch=70, speed_wpm=165),
    "bob": Voice("en-gb+m3", pitch=30, speed_wpm=150),
    "carol": Voice("en-gb-scotland+f4", pitch=55, speed_wpm=175),
}

# (speaker, text, gap before the line in seconds)
MEETING_SCRIPT: tuple[tuple[str, str, float], ...] = (
    ("alice", "Good morning everyone, thanks for joining the weekly planning call.", 0.3),
    ("bob", "Morning.", 0.25),
    ("carol", "Hi Alice.", 0.2),
    ("alice", "First item is the hardware order. Bob, did it arrive?", 0.3),
    ("bob", "Yes, it arrived two days ago and everything was in the box.", 0.2),
    ("alice", "Great.", 0.15),
    ("carol", "Did you check the power supplies as well?", 0.25),
    ("bob", "Right.", 0.2),
    ("bob", "I tested all four of them yesterday afternoon.", 0.6),
    ("carol", "Okay, got it.", 0.15),
    ("alice", "Second item is the budget for next quarter.", 0.35),
    ("carol", "I sent the spreadsheet on Friday, the numbers are on the second page.", 0.2),
    ("bob", "No.", 0.15),
    ("bob", "Sorry, I meant I have not opened it yet.", 0.3),
    ("alice", "Please read it before Thursday.", 0.2),
    ("bob", "Sure.", 0.2),
    ("carol", "We also need a decision on the new office chairs.", 0.3),
    ("alice", "Let us keep that for next week.", 0.15),
    ("carol", "Fine with me.", 0.2),
    ("bob", "Same here.", 0.15),
    ("alice", "Thank you all, that is everything for today.", 0.4),
)

# Fast turn-taking: one- and two-word replies 50-200 ms after the other speaker's words, many in
# the middle of that speaker's sentence (a listener's "right" while the speaker goes on), spoken
# quickly, so that a reply's turn and its gaps together last under half a second: no part of it
# lies farther than a diarizer's boundary tolerance (0.25 s) from the other speaker's turns.
FAST_VOICES = {
    "alice": Voice("en-us+f3", pitch=70, speed_wpm=175),
    "bob": Voice("en-gb+m3", pitch=30, speed_wpm=210),
    "carol": Voice("en-gb-scotland+f4", pitch=55, speed_wpm=210),
}
FAST_EXCHANGE_SCRIPT: tuple[tuple[str, str, float], ...] = (
    ("alice", "So we ship the laptops on Monday", 0.3),
    ("bob", "yes", 0.06),
    ("alice", "and the chargers go out on Friday.", 0.05),
    ("carol", "Okay", 0.1),
    ("bob", "but who packs the boxes?", 0.05),
    ("alice", "I will do it, with", 0.08),
    ("carol", "right", 0.05),
    ("alice", "some help from Carol.", 0.06),
    ("carol", "The printer is", 0.15),
    ("alice", "right", 0.05),
    ("carol", "next to the door.", 0.06),
    ("bob", "I think we", 0.12),
    ("carol", "yeah", 0.05),
    ("bob", "should order more paper.", 0.07),
    ("alice", "Please put it", 0.15),
    ("bob", "okay", 0.05),
    ("alice", "over there by the wall.", 0.06),
    ("bob", "We can", 0.1),
    ("alice", "all right", 0.05),
    ("bob", "start at ten then.", 0.08),
    ("alice", "Good, so that is settled", 0.12),
    ("bob", "great", 0.05),
    ("alice", "and we meet again next week.", 0.15),
)

def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def synthesize(text: str, voice: Voice) -> np.ndarray:
    """One line spoken by `voice`, at 16 kHz, with its leading and trailing silence removed."""
    from whosaid.audio.loading import load_audio_file

    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise RuntimeError("espeak-ng is not installed: `apt-get install espeak-ng` (make system-deps)")
    with tempfile.TemporaryDirectory() as folder:
        wav = Path(folder) / "line.wav"
        subprocess.run(
            [espeak, "-v", voice.name, "-p", str(voice.pitch), "-s", str(voice.speed_wpm), "-w", str(wav), text],
            check=True,
            capture_output=True,
        )
        samples = load_audio_file(wav).samples
    loud = np.flatnonzero(np.abs(samples) >= _SILENCE_THRESHOLD)
    # Resampling espeak's 22.05 kHz output can overshoot full scale by a hair.
    return np.clip(samples[loud[0] : loud[-1] + 1], -1.0, 1.0).astype(np.float32)


def build_conversation(
    script: Sequence[tuple[str, str, float]] = MEETING_SCRIPT,
    voices: Optional[dict[str, Voice]] = None,
    *,
    tail_s: float = 0.5,
) -> Conversation:
    """Speak `script` line by line; the reference turns are where each trimmed line lies."""
    voices = voices or VOICES
    pieces: list[np.ndarray] = []
    lines: list[Line] = []
    position = 0
    for speaker, text, gap_s in script:
        gap = int(round(gap_s * SAMPLE_RATE_HZ))
        speech = synthesize(text, voices[speaker])
        pieces += [np.zeros(gap, np.float32), speech]
        start = position + gap
        position = start + len(speech)
        lines.append(Line(speaker, text, start / SAMPLE_RATE_HZ, position / SAMPLE_RATE_HZ))
    pieces.append(np.zeros(int(tail_s * SAMPLE_RATE_HZ), np.float32))
    return Conversation(np.concatenate(pieces), tuple(lines))
