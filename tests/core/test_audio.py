"""Decoding: every common container and rate ends as 16 kHz mono float32; bad input is a typed
error with a message the user can act on."""

from __future__ import annotations

import base64
import io
import wave

import numpy as np
import pytest

from tests.support.audio_files import encode, resample
from whosaid.audio.loading import Audio, audio_from_array, load_audio
from whosaid.errors import InvalidAudioError

CLIP_S = 5.0


@pytest.fixture(scope="module")
def clip(sample_audio: Audio) -> np.ndarray:
    return sample_audio.samples[: int(CLIP_S * 16000)]


@pytest.mark.parametrize(
    "kind, rate_hz, channels",
    [
        ("wav", 16000, 1),
        ("wav", 44100, 2),
        ("mp3", 44100, 2),
        ("mp3", 16000, 1),
        ("flac", 16000, 1),
        ("flac", 48000, 2),
        ("ogg", 48000, 1),  # Opus runs at 48 kHz
        ("ogg", 16000, 2),
    ],
)
def test_containers_decode_to_the_same_duration(clip, kind, rate_hz, channels) -> None:
    source = clip if rate_hz == 16000 else resample(clip, 16000, rate_hz)
    audio = load_audio(encode(source, rate_hz, kind, channels=channels))
    assert audio.sample_rate_hz == 16000
    assert audio.samples.dtype == np.float32 and audio.samples.ndim == 1
    assert abs(audio.duration_s - CLIP_S) <= 0.020


@pytest.mark.parametrize("kind, rate_hz", [("m4a", 44100), ("webm", 48000)])
def test_m4a_and_webm_decode(clip, kind, rate_hz) -> None:
    audio = load_audio(encode(resample(clip, 16000, rate_hz), rate_hz, kind))
    # AAC adds encoder priming that this test's bare muxing does not mark as skippable.
    assert abs(audio.duration_s - CLIP_S) <= 0.15


def test_resampling_keeps_the_signal(clip) -> None:
    """44.1 kHz stereo decodes to (almost) the same 16 kHz waveform as the original."""
    audio = load_audio(encode(resample(clip, 16000, 44100), 44100, "wav", channels=2))
    n = min(len(audio.samples), len(clip))
    correlation = np.corrcoef(audio.samples[:n], clip[:n])[0, 1]
    assert correlation > 0.99


def test_base64_text_bytes_and_urlsafe_are_all_accepted(clip) -> None:
    data = encode(clip, 16000, "wav")
    expected = load_audio(data).samples
    for inputs in (
        base64.b64encode(data).decode(),
        base64.b64encode(data),
        base64.urlsafe_b64encode(data).decode().rstrip("="),
        data,
    ):
        np.testing.assert_array_equal(load_audio(inputs).samples, expected)


def test_a_path_is_a_file_on_disk_and_a_string_is_base64(clip, tmp_path) -> None:
    """The CLI's files go through load_audio (Engine.run_job) as Paths; a str stays base64 text,
    so no request names a file to read."""
    data = encode(clip, 16000, "wav")
    (tmp_path / "clip.wav").write_bytes(data)
    from_file = load_audio(tmp_path / "clip.wav", max_duration_s=60.0)
    assert np.array_equal(from_file.samples, load_audio(data).samples)
    with pytest.raises(InvalidAudioError, match="cannot read audio file"):
        load_audio(tmp_path / "missing.wav")
    with pytest.raises(InvalidAudioError) as not_a_file:  # base64 text that is not audio
        load_audio(str(tmp_path / "clip.wav"))
    assert "cannot read audio file" not in str(not_a_file.value)


def test_float_arrays_with_their_rate(clip) -> None:
    at_8k = resample(clip, 16000, 8000)
    audio = load_audio({"array": at_8k.tolist(), "sampling_rate": 8000})
    assert abs(audio.duration_s - CLIP_S) < 0.001
    bare = load_audio(at_8k, sampling_rate_hz=8000)
    np.testing.assert_allclose(bare.samples, audio.samples, atol=1e-6)
    stereo = audio_from_array(np.stack([clip, clip]), 16000)
    np.testing.assert_allclose(stereo.samples, clip, atol=1e-6)


def truncated_wav(clip: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(16000)
        wav.writeframes((clip * 32767).astype("<i2").tobytes())
    data = buffer.getvalue()
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    "make_inputs, message",
    [
        (lambda clip: b"\x00\x01garbage\xff" * 50, "could not decode the audio"),
        (lambda clip: "this is not base64!", "inputs is not valid base64"),
        (lambda clip: "", "empty input"),
        (lambda clip: b"", "empty input"),
        (lambda clip: [], "empty input"),
        (lambda clip: truncated_wav(clip), "the WAV file is truncated: its header declares 160000 bytes"),
        (lambda clip: encode(clip, 16000, "wav")[:30], "the WAV file is truncated: it ends before its audio data"),
        (lambda clip: encode(clip, 16000, "mp3")[:200], "could not decode the audio"),
        (lambda clip: base64.b64encode(b"hello world, plain text").decode(), "could not decode the audio"),
        (lambda clip: {"sampling_rate": 16000}, "under 'array'"),
        (lambda clip: {"array": [0.0] * 100, "sampling_rate": "fast"}, "sampling_rate must be a number of Hz"),
        (lambda clip: {"array": ["a", "b"], "sampling_rate": 16000}, "the audio array must hold numbers"),
        (lambda clip: [float("nan")] * 100, "NaN or infinite"),
        (lambda clip: 12345, "inputs of type int is not audio"),
        (lambda clip: None, "no audio"),
    ],
)
def test_bad_input_is_a_typed_error(clip, make_inputs, message) -> None:
    with pytest.raises(InvalidAudioError) as raised:
        load_audio(make_inputs(clip))
    assert message in str(raised.value)


@pytest.mark.parametrize("kind", ["wav", "flac", "mp3", "ogg", "m4a", "webm"])
@pytest.mark.parametrize("kept", [0.25, 0.5, 0.9])
def test_every_container_cut_short_is_refused(clip, kind, kept) -> None:
    # Ogg/Opus and WebM cuts used to decode to the first part of the audio: a 200 with half the text.
    data = encode(clip, 16000, kind)
    with pytest.raises(InvalidAudioError, match="truncated"):
        load_audio(data[: int(len(data) * kept)])


def with_wav_format(data: bytes, **fields: int) -> bytes:
    """The WAV with fields of its format chunk overwritten."""
    offsets = {"channels": 2, "rate": 4, "byte_rate": 8, "block_align": 12, "bits": 14}
    widths = {"channels": 2, "rate": 4, "byte_rate": 4, "block_align": 2, "bits": 2}
    edited = bytearray(data)
    fmt = edited.index(b"fmt ") + 8
    for name, value in fields.items():
        edited[fmt + offsets[name] : fmt + offsets[name] + widths[name]] = value.to_bytes(widths[name], "little")
    return bytes(edited)


@pytest.mark.parametrize(
    "fields",
    [
        {"bits": 7},  # was decoded as 8-bit noise twice as long: an empty 200
        {"bits": 8},
        {"bits": 24},
        {"bits": 0},
        {"block_align": 4},
        {"byte_rate": 16000},
        {"channels": 0},
        {"rate": 0},
    ],
)
def test_a_wav_header_whose_fields_disagree_is_refused(clip, fields) -> None:
    with pytest.raises(InvalidAudioError, match="the WAV file is corrupt"):
        load_audio(with_wav_format(encode(clip, 16000, "wav"), **fields))


def test_consistent_wav_headers_still_decode(clip) -> None:
    data = encode(clip, 16000, "wav")
    # 12 significant bits in 16-bit samples is a legal PCM header.
    np.testing.assert_array_equal(load_audio(with_wav_format(data, bits=12)).samples, load_audio(data).samples)


def test_an_ogg_file_cut_at_a_page_boundary_is_refused(clip) -> None:
    data = encode(clip, 16000, "ogg")
    last_page = data.rindex(b"OggS")
    assert load_audio(data).duration_s == pytest.approx(CLIP_S, abs=0.02)
    with pytest.raises(InvalidAudioError, match="the Ogg file is truncated: it ends before its end-of-stream page"):
        load_audio(data[:last_page])


def test_a_webm_file_cut_short_says_how_much_is_missing(clip) -> None:
    data = encode(clip, 48000, "webm")
    with pytest.raises(InvalidAudioError, match=r"the WebM/Matroska file is truncated: its header declares \d+ bytes"):
        load_audio(data[: len(data) - 1000])


def test_silence_is_detected(clip) -> None:
    assert audio_from_array(np.zeros(16000), 16000).is_silent()
    faint_hiss = np.random.default_rng(0).normal(0, 1e-4, 32000)
    assert audio_from_array(faint_hiss, 16000).is_silent()
    assert not audio_from_array(clip, 16000).is_silent()
