"""Long decoded audio kept once, in a temporary file, and read a window at a time: the same samples
bit for bit as in memory, the same silence decision, the same speech regions, and a peak that
does not follow the recording's length."""

from __future__ import annotations

import io
import os
import time
import tracemalloc

import av
import numpy as np
import pytest

from tests.support.audio_bombs import flac_bomb
from tests.support.audio_files import encode
from whosaid.audio import store
from whosaid.audio.loading import SILENCE_FRAME_S, SILENCE_THRESHOLD_DBFS, Audio, load_audio
from whosaid.audio.store import SampleWriter, SpilledSamples
from whosaid.errors import ClientGoneError, InvalidAudioError, TimeBudgetExceededError
from whosaid.runtime.cancellation import StopSignal, TimeBudget

RATE_HZ = 16_000


def spilled(samples: np.ndarray, piece: int = 1000, spill_after: int = 0) -> SpilledSamples:
    writer = SampleWriter(capacity=10, spill_after=spill_after)
    for start in range(0, len(samples), piece):
        writer.append(samples[start : start + piece])
    result = writer.finish()
    assert isinstance(result, SpilledSamples)
    return result


def test_spilled_samples_slice_like_the_array_they_hold() -> None:
    samples = np.random.default_rng(0).uniform(-1, 1, 12_345).astype(np.float32)
    reader = spilled(samples, piece=777)
    assert len(reader) == reader.size == samples.size and reader.dtype == np.float32
    for key in [slice(0, 10), slice(5000, 5100), slice(12_000, 20_000), slice(-50, None), slice(20_000, 30_000),
                slice(None), slice(100, 50)]:
        got = reader[key]
        assert got.dtype == np.float32 and np.array_equal(got, samples[key]), key
    assert np.array_equal(reader.mapped(), samples)
    with pytest.raises(TypeError, match="contiguous slices"):
        reader[::2]
    with pytest.raises(TypeError, match="by slices"):
        reader[3]


def test_without_preadv_slices_are_read_with_pread(monkeypatch) -> None:
    samples = np.random.default_rng(2).uniform(-1, 1, 5000).astype(np.float32)
    reader = spilled(samples)
    monkeypatch.delattr(os, "preadv")
    assert np.array_equal(reader[123:4567], samples[123:4567]) and reader[4999:].size == 1


def test_short_audio_stays_in_memory() -> None:
    writer = SampleWriter(capacity=10, spill_after=1000)
    writer.append(np.ones(600, np.float32))
    result = writer.finish()
    assert isinstance(result, np.ndarray) and result.size == 600 and result.flags.owndata


def test_decoding_past_the_spill_size_gives_the_same_samples_from_a_file(monkeypatch) -> None:
    rng = np.random.default_rng(1)
    samples = (rng.uniform(-0.5, 0.5, 5 * 44_100)).astype(np.float32)
    data = encode(samples, 44_100, "flac")  # resampled on the way in, as most uploads are
    in_memory = load_audio(data)
    monkeypatch.setattr(store, "SPILL_AFTER_S", 1.0)
    on_disk = load_audio(data)
    assert in_memory.spilled is None and on_disk.spilled is not None
    assert on_disk.duration_s == in_memory.duration_s
    assert np.array_equal(on_disk.samples, in_memory.samples)
    assert np.array_equal(on_disk.reader[12_345:98_765], in_memory.samples[12_345:98_765])


def test_non_finite_samples_are_refused_from_a_spilled_file_too(monkeypatch) -> None:
    samples = np.zeros(3 * RATE_HZ, np.float32)
    samples[-10] = np.nan
    data = float_wav(samples)
    monkeypatch.setattr(store, "SPILL_AFTER_S", 1.0)
    with pytest.raises(InvalidAudioError, match="the audio holds NaN or infinite samples"):
        load_audio(data)


def float_wav(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="wav") as container:
        stream = container.add_stream("pcm_f32le", rate=RATE_HZ, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = RATE_HZ
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return buffer.getvalue()


def old_is_silent(samples: np.ndarray) -> bool:
    """The whole-array computation that `Audio.is_silent` replaces, as a reference."""
    frame = int(SILENCE_FRAME_S * RATE_HZ)
    n_frames = max(1, len(samples) // frame)
    framed = samples[: n_frames * frame].reshape(n_frames, -1).astype(np.float64)
    rms = np.sqrt(np.mean(framed**2, axis=1))
    return 20 * np.log10(max(float(rms.max()), 1e-12)) < SILENCE_THRESHOLD_DBFS


@pytest.mark.parametrize("length", [1, 399, 400, 401, 479_999, 480_000, 480_401, 1_500_123])
@pytest.mark.parametrize("where", ["start", "middle", "end", "nowhere"])
def test_silence_read_block_by_block_is_decided_as_on_the_whole_array(length: int, where: str) -> None:
    samples = np.full(length, 1e-4, np.float32)  # -80 dBFS hiss
    position = {"start": 0, "middle": length // 2, "end": length - 1, "nowhere": None}[where]
    if position is not None:
        samples[position] = 0.2  # one loud sample: a 25 ms frame at about -40 dBFS
    expected = old_is_silent(samples)
    assert expected == (where == "nowhere" or (where == "end" and length % 400 and length > 400))
    assert Audio(samples).is_silent() == expected
    assert Audio.from_samples(spilled(samples)).is_silent() == expected


def test_hours_of_silence_are_scanned_in_a_block_of_memory() -> None:
    audio = load_audio(flac_bomb(3600.0))  # an hour: 230 MB of float32 samples
    assert audio.spilled is not None
    tracemalloc.start()
    try:
        assert audio.is_silent()
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    block_bytes = store.BLOCK_S * RATE_HZ * 8  # float64 powers of one block
    assert peak_bytes < 4 * block_bytes, f"peak {peak_bytes / 1e6:.1f} MB"


def test_decoding_hours_holds_the_spill_size_not_the_recording() -> None:
    data = flac_bomb(3600.0)
    tracemalloc.start()
    try:
        audio = load_audio(data)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert audio.duration_s == pytest.approx(3600.0, abs=0.3)
    spill_bytes = store.SPILL_AFTER_S * RATE_HZ * 4  # 38 MB; the hour is 230 MB
    assert peak_bytes < 1.5 * spill_bytes, f"peak {peak_bytes / 1e6:.1f} MB"


class CountingStop:
    """A job's stop signal (the real one) that the client leaves after `checks` checks."""

    def __init__(self, checks: int) -> None:
        self.signal = StopSignal()
        self.checks = 0
        self.left_after = checks

    def check(self) -> None:
        self.checks += 1
        if self.checks == self.left_after:
            self.signal.cancel(ClientGoneError("the client closed the connection"))
        self.signal.check()


def test_a_client_that_leaves_stops_decoding() -> None:
    data = flac_bomb(3600.0)  # an hour: 14 063 frames of 4096 samples
    stop = CountingStop(checks=3)
    with pytest.raises(ClientGoneError, match="closed the connection"):
        load_audio(data, should_stop=stop)
    assert stop.checks == 3  # at frame 200 of 14 063
    assert load_audio(data, should_stop=CountingStop(checks=10**6)).duration_s == pytest.approx(3600.0, abs=0.3)


def test_the_time_budget_counts_from_the_jobs_start_not_from_the_end_of_decoding() -> None:
    budget = TimeBudget(base_s=60.0, per_audio_s=0.0)
    signal = StopSignal()
    signal.start_budget(budget, 3600.0, started_monotonic_s=time.monotonic() - 61.0)  # decoding took 61 s
    with pytest.raises(TimeBudgetExceededError, match="time budget of 60 s for 3600.0 s"):
        signal.check()
    fresh = StopSignal()
    fresh.start_budget(budget, 3600.0)
    fresh.check()


def test_without_a_writable_temporary_directory_long_audio_stays_in_memory(monkeypatch, tmp_path, caplog) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    samples = np.arange(3000, dtype=np.float32) / 3000
    writer = SampleWriter(capacity=10, spill_after=100)
    for start in range(0, 3000, 700):
        writer.append(samples[start : start + 700])
    result = writer.finish()
    assert isinstance(result, np.ndarray) and np.array_equal(result, samples)
    assert "keeping it in memory" in caplog.text
