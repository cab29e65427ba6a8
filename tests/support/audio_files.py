"""Encode test audio into real container formats with PyAV (FFmpeg's encoders)."""

from __future__ import annotations

import io

import av
import numpy as np

# container format, codec, file suffix
FORMATS = {
    "wav": ("wav", "pcm_s16le"),
    "flac": ("flac", "flac"),
    "mp3": ("mp3", "libmp3lame"),
    "ogg": ("ogg", "libopus"),
    "m4a": ("ipod", "aac"),
    "webm": ("webm", "libopus"),
}


def encode(samples: np.ndarray, sample_rate_hz: int, kind: str, *, channels: int = 1) -> bytes:
    """`samples`: float32 mono in [-1, 1]; with channels=2 the same signal goes to both sides."""
    container_format, codec = FORMATS[kind]
    buffer = io.BytesIO()
    layout = "mono" if channels == 1 else "stereo"
    with av.open(buffer, mode="w", format=container_format) as container:
        stream = container.add_stream(codec, rate=sample_rate_hz, layout=layout)
        sample_format = stream.codec_context.codec.audio_formats[0].name
        frame_size = 1024
        pcm = np.repeat(samples[None, :], channels, axis=0).astype(np.float32)
        resampler = av.AudioResampler(format=sample_format, layout=layout, rate=stream.codec_context.sample_rate)
        for start in range(0, pcm.shape[1], frame_size):
            block = np.ascontiguousarray(pcm[:, start : start + frame_size].T.reshape(1, -1))
            frame = av.AudioFrame.from_ndarray(block, format="flt", layout=layout)
            frame.sample_rate = sample_rate_hz
            frame.pts = None
            for converted in resampler.resample(frame):
                for packet in stream.encode(converted):
                    container.mux(packet)
        for converted in resampler.resample(None):
            for packet in stream.encode(converted):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


def resample(samples: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    from math import gcd

    from scipy.signal import resample_poly

    common = gcd(from_hz, to_hz)
    return resample_poly(samples, to_hz // common, from_hz // common).astype(np.float32)


def channels_wav(channels: np.ndarray, sample_rate_hz: int = 16_000) -> bytes:
    """A 16-bit PCM WAV of `channels` (channels x samples, float32 in [-1, 1]), each kept apart."""
    import wave

    pcm = np.clip(np.round(np.asarray(channels).T * 32767), -32768, 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as file:
        file.setnchannels(pcm.shape[1])
        file.setsampwidth(2)
        file.setframerate(sample_rate_hz)
        file.writeframes(pcm.tobytes())
    return buffer.getvalue()
