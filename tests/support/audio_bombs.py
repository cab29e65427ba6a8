"""Decompression bombs: small files that decode to hours of audio (silence or low-level noise),
made in a fraction of a second.

FLAC and WAV are written byte by byte: a FLAC frame of silence is a constant subframe (about 14
bytes for 4096 samples), so only the frame numbers and checksums change from frame to frame, and
those are computed for all frames at once with numpy. The lossy codecs (Opus in Ogg, Opus in live
WebM, MP3, AAC in M4A) encode one short block with PyAV and mux its packets again and again with
later timestamps. Each builder takes the duration in seconds and returns the file's bytes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable

import av
import numpy as np

RATE_HZ = 16_000
# The two FLACs the default limit (4 hours) must refuse at once: just over four hours of silence
# (0.7 MB), and the most silence that fits in a 25 MiB upload (133 hours, 24.8 MiB).
FOUR_HOURS_PLUS_S = 4.25 * 3600
UPLOAD_LIMIT_FLAC_S = 133 * 3600
FLAC_BLOCK = 4096  # samples per FLAC frame: block size code 0b1100
NOISE_PEAK = 0.003  # about -50 dBFS: low-level noise, louder than the engine's silence threshold


def _crc_table(bits: int, poly: int) -> np.ndarray:
    top, mask = 1 << (bits - 1), (1 << bits) - 1
    table = np.zeros(256, np.uint32)
    for byte in range(256):
        crc = byte << (bits - 8)
        for _ in range(8):
            crc = ((crc << 1) ^ poly) & mask if crc & top else (crc << 1) & mask
        table[byte] = crc
    return table


_CRC8 = _crc_table(8, 0x07)  # FLAC frame header
_CRC16 = _crc_table(16, 0x8005)  # FLAC frame
_CRC32_OGG = _crc_table(32, 0x04C11DB7)  # Ogg page


def _crc8_rows(rows: np.ndarray) -> np.ndarray:
    crc = np.zeros(len(rows), np.uint32)
    for column in rows.T:
        crc = _CRC8[crc ^ column]
    return crc


def _crc16_rows(rows: np.ndarray, crc: np.ndarray) -> np.ndarray:
    for column in rows.T:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ column]
    return crc


def _crc16_after(crc: np.ndarray, body: bytes) -> np.ndarray:
    """CRC-16 of each row's prefix (state `crc`) followed by the same `body`. The CRC is linear,
    so crc(s, body) = crc(0, body) ^ crc(s, zeros): the second term is a linear map of the 16 bits
    of s, found once by running each bit through the body's length of zeros."""
    rows = np.zeros((17, len(body)), np.uint8)
    rows[0] = np.frombuffer(body, np.uint8)
    starts = np.array([0] + [1 << bit for bit in range(16)], np.uint32)
    constant, *basis = (int(value) for value in _crc16_rows(rows, starts))
    result = np.full(len(crc), constant, np.uint32)
    for bit, value in enumerate(basis):
        result ^= np.where((crc >> bit) & 1, np.uint32(value), np.uint32(0))
    return result


def _utf8_numbers(numbers: np.ndarray, length: int) -> np.ndarray:
    """FLAC's UTF-8-like coding of frame numbers that all take `length` bytes."""
    if length == 1:
        return numbers[:, None].astype(np.uint8)
    lead = {2: 0xC0, 3: 0xE0, 4: 0xF0, 5: 0xF8}[length]
    columns = [(lead | (numbers >> (6 * (length - 1)))) & 0xFF]
    columns += [0x80 | ((numbers >> (6 * shift)) & 0x3F) for shift in range(length - 2, -1, -1)]
    return np.stack(columns, axis=1).astype(np.uint8)


def flac_bomb(duration_s: float, *, noise: bool = False, declare: bool = True) -> bytes:
    """16 kHz mono 16-bit FLAC. Silence: constant subframes; noise: one verbatim block of
    low-level noise, repeated. `declare=False` leaves STREAMINFO's total samples at 0 (unknown)."""
    n_frames = max(1, int(np.ceil(duration_s * RATE_HZ / FLAC_BLOCK)))
    total_samples = n_frames * FLAC_BLOCK
    if noise:
        rng = np.random.default_rng(7)
        block = np.round(rng.uniform(-NOISE_PEAK, NOISE_PEAK, FLAC_BLOCK) * 32767).astype(">i2")
        body = bytes([0x02]) + block.tobytes()  # verbatim subframe
    else:
        body = bytes([0x00, 0x00, 0x00])  # constant subframe, value 0
    streaminfo = (
        FLAC_BLOCK.to_bytes(2, "big") * 2
        + bytes(6)  # frame sizes: unknown
        + ((RATE_HZ << 44) | (0 << 41) | (15 << 36) | (total_samples if declare else 0)).to_bytes(8, "big")
        + bytes(16)  # MD5: unknown
    )
    parts = [b"fLaC", bytes([0x80, 0, 0, 34]), streaminfo]
    numbers = np.arange(n_frames, dtype=np.int64)
    for length, low, high in ((1, 0, 0x80), (2, 0x80, 0x800), (3, 0x800, 0x10000), (4, 0x10000, 0x200000)):
        group = numbers[(numbers >= low) & (numbers < high)]
        if not len(group):
            continue
        fixed = np.tile(np.array([0xFF, 0xF8, 0xC5, 0x08], np.uint8), (len(group), 1))
        header = np.concatenate([fixed, _utf8_numbers(group, length)], axis=1)
        header = np.concatenate([header, _crc8_rows(header)[:, None].astype(np.uint8)], axis=1)
        crc = _crc16_after(_crc16_rows(header, np.zeros(len(group), np.uint32)), body)
        body_rows = np.tile(np.frombuffer(body, np.uint8), (len(group), 1))
        frames = np.concatenate(
            [header, body_rows, (crc >> 8)[:, None].astype(np.uint8), (crc & 0xFF)[:, None].astype(np.uint8)],
            axis=1,
        )
        parts.append(frames.tobytes())
    return b"".join(parts)


def wav_bomb(duration_s: float, *, declared_s: float | None = None, noise: bool = False) -> bytes:
    """16 kHz mono 16-bit PCM WAV holding `duration_s` of audio whose header declares `declared_s`
    (None: the data chunk's size is 0, "until the end", as streamed WAVs write it)."""
    n_samples = int(duration_s * RATE_HZ)
    if noise:
        samples = np.round(np.random.default_rng(7).uniform(-NOISE_PEAK, NOISE_PEAK, n_samples) * 32767)
        data = samples.astype("<i2").tobytes()
    else:
        data = bytes(2 * n_samples)
    declared_bytes = 0 if declared_s is None else 2 * int(declared_s * RATE_HZ)
    fmt = (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + RATE_HZ.to_bytes(4, "little")
    fmt += (2 * RATE_HZ).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    riff_size = min(4 + 24 + 8 + max(declared_bytes, len(data)), 0xFFFFFFFF)
    return (
        b"RIFF" + riff_size.to_bytes(4, "little") + b"WAVE"
        + b"fmt " + (16).to_bytes(4, "little") + fmt
        + b"data" + min(declared_bytes, 0xFFFFFFFF).to_bytes(4, "little") + data
    )


# container format, codec, options of the muxer
_LOSSY = {
    "ogg": ("ogg", "libopus", {}),
    "webm": ("webm", "libopus", {"live": "1"}),  # a live recording: no duration in the header
    "mp3": ("mp3", "libmp3lame", {}),
    "m4a": ("ipod", "aac", {}),
}


def lossy_bomb(kind: str, duration_s: float, *, noise: bool = False) -> bytes:
    """Encode 2 s of silence (or low-level noise), then mux its steady-state packets (the encoder's
    first and last ones left out) until the stream lasts `duration_s`."""
    container_format, codec, options = _LOSSY[kind]
    rng = np.random.default_rng(7)
    block_s = 2.0
    n_samples = int(block_s * RATE_HZ)
    samples = rng.uniform(-NOISE_PEAK, NOISE_PEAK, n_samples) if noise else np.zeros(n_samples)
    scratch = io.BytesIO()
    with av.open(scratch, mode="w", format=container_format) as container:
        stream = container.add_stream(codec, rate=48_000 if codec == "libopus" else RATE_HZ, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples.astype(np.float32).reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = RATE_HZ
        codec_format = stream.codec_context.codec.audio_formats[0].name
        resampler = av.AudioResampler(format=codec_format, layout="mono", rate=stream.codec_context.sample_rate)
        packets = []
        for converted in [*resampler.resample(frame), *resampler.resample(None)]:
            packets += stream.encode(converted)
        packets += stream.encode(None)
        time_base = packets[0].time_base
        extradata = stream.codec_context.extradata
    steady = [(bytes(packet), packet.duration) for packet in packets[2:-2]]
    per_block = sum(duration for _, duration in steady)
    repeats = int(np.ceil(duration_s / float(per_block * time_base)))
    output = io.BytesIO()
    with av.open(output, mode="w", format=container_format, options=options) as container:
        stream = container.add_stream(codec, rate=48_000 if codec == "libopus" else RATE_HZ, layout="mono")
        stream.codec_context.extradata = extradata
        stream.time_base = time_base
        pts = 0
        for _ in range(repeats):
            for payload, duration in steady:
                packet = av.Packet(payload)
                packet.stream = stream
                packet.time_base = time_base
                packet.pts = packet.dts = pts
                packet.duration = duration
                container.mux(packet)
                pts += duration
    return output.getvalue()


def ogg_with_lying_duration(data: bytes, granule: int = 48_000) -> bytes:
    """The last Ogg page's granule position (the end time a demuxer reads as the duration) set to
    `granule` (1 s of Opus), its checksum fixed: the header declares 1 s, the pages hold hours."""
    last = data.rfind(b"OggS")
    page = bytearray(data[last:])
    page[6:14] = granule.to_bytes(8, "little")
    page[22:26] = bytes(4)
    crc = 0
    for byte in page:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ int(_CRC32_OGG[(crc >> 24) ^ byte])
    page[22:26] = crc.to_bytes(4, "little")
    return data[:last] + bytes(page)


@dataclass(frozen=True)
class Bomb:
    name: str
    build: Callable[[float], bytes]  # duration in seconds -> the file's bytes
    media_type: str


BOMBS = (
    Bomb("flac-silence", lambda s: flac_bomb(s), "audio/flac"),
    Bomb("flac-silence-undeclared", lambda s: flac_bomb(s, declare=False), "audio/flac"),
    Bomb("flac-noise-undeclared", lambda s: flac_bomb(s, noise=True, declare=False), "audio/flac"),
    Bomb("ogg-opus-silence", lambda s: lossy_bomb("ogg", s), "audio/ogg"),
    Bomb("ogg-opus-noise-lying", lambda s: ogg_with_lying_duration(lossy_bomb("ogg", s, noise=True)), "audio/ogg"),
    Bomb("webm-opus-live-silence", lambda s: lossy_bomb("webm", s), "audio/webm"),
    Bomb("mp3-silence", lambda s: lossy_bomb("mp3", s), "audio/mpeg"),
    Bomb("mp3-noise", lambda s: lossy_bomb("mp3", s, noise=True), "audio/mpeg"),
    Bomb("m4a-silence", lambda s: lossy_bomb("m4a", s), "audio/mp4"),
    Bomb("wav-size-unknown-noise", lambda s: wav_bomb(s, noise=True), "audio/wav"),
    Bomb("wav-declares-10h-holds-20s", lambda s: wav_bomb(20.0, declared_s=36_000.0), "audio/wav"),
)
