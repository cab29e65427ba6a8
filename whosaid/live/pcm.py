"""Raw 16-bit PCM as live clients send it, resampled as one continuous stream into the 16 kHz
float samples Whisper, the VAD and the speaker encoder take.

The resampler keeps its filter state between messages: resampling each message on its own would
put an edge (a click) at every message boundary, a few per second.
"""

from __future__ import annotations

import numpy as np

from whosaid.config import WHISPER_SAMPLE_RATE_HZ
from whosaid.errors import InvalidAudioError

PCM16_BYTES_PER_SAMPLE = 2
PCM16_FULL_SCALE = 32768.0


class Pcm16Stream:
    """Little-endian 16-bit mono PCM at `sample_rate_hz` in, 16 kHz float32 in [-1, 1] out."""

    def __init__(self, sample_rate_hz: int) -> None:
        self.sample_rate_hz = sample_rate_hz
        self._resampler = None
        if sample_rate_hz != WHISPER_SAMPLE_RATE_HZ:
            import av

            self._resampler = av.AudioResampler(format="flt", layout="mono", rate=WHISPER_SAMPLE_RATE_HZ)

    def feed(self, pcm: bytes) -> np.ndarray:
        """The 16 kHz samples of `pcm` (a little less or more than its share while the
        resampler's filter fills); InvalidAudioError for a byte count that is not whole samples."""
        if len(pcm) % PCM16_BYTES_PER_SAMPLE:
            raise InvalidAudioError(
                f"the audio holds {len(pcm)} bytes, which is not a whole number of 16-bit samples; "
                "send little-endian 16-bit mono PCM (audio/pcm)"
            )
        samples = np.frombuffer(pcm, dtype="<i2")
        if samples.size == 0:
            return np.zeros(0, np.float32)
        if self._resampler is None:
            return (samples / PCM16_FULL_SCALE).astype(np.float32)
        import av

        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.sample_rate_hz
        pieces = [out.to_ndarray().reshape(-1) for out in self._resampler.resample(frame)]
        return np.concatenate(pieces).astype(np.float32) if pieces else np.zeros(0, np.float32)
