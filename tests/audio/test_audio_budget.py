"""Decoding with a length limit (MAX_AUDIO_DURATION_S): small files that decode to far more audio
than the limit are refused from their header when it declares the length, else as soon as
decoding passes the limit, and the samples held meanwhile stay within the limit."""

from __future__ import annotations

import re
import tracemalloc

import numpy as np
import pytest

from tests.support.audio_bombs import BOMBS, flac_bomb, wav_bomb
from tests.support.audio_files import encode
from whosaid.audio.loading import load_audio
from whosaid.config import DEFAULT_MAX_AUDIO_DURATION_S, ModelSettings
from whosaid.errors import AudioTooLongError, InvalidAudioError

LIMIT_S = 30.0
BOMB_S = 45.0
# Bombs whose header (or FFmpeg's reading of it) says how long they are: refused before decoding.
DECLARED = {
    "flac-silence", "ogg-opus-silence", "mp3-silence", "mp3-noise", "m4a-silence",
    "wav-size-unknown-noise", "wav-declares-10h-holds-20s",
}
ADVICE = f"longer than the limit of {LIMIT_S:g} s (MAX_AUDIO_DURATION_S); split it and send the parts"


@pytest.mark.parametrize("bomb", BOMBS, ids=[bomb.name for bomb in BOMBS])
def test_every_bomb_is_refused_from_its_header_or_when_decoding_passes_the_limit(bomb) -> None:
    data = bomb.build(BOMB_S)
    with pytest.raises(AudioTooLongError) as refused:
        load_audio(data, max_duration_s=LIMIT_S)
    message = str(refused.value)
    assert refused.value.code == "audio_too_long" and message.endswith(ADVICE)
    if bomb.name in DECLARED:
        assert message.startswith("the audio file's header declares "), message
    else:
        assert message.startswith(f"the audio lasts more than {LIMIT_S:g} s (decoding stopped there)"), message


@pytest.mark.parametrize(
    "bomb", [bomb for bomb in BOMBS if bomb.name != "wav-declares-10h-holds-20s"], ids=lambda bomb: bomb.name
)
def test_the_same_files_within_the_limit_decode_whole(bomb) -> None:
    audio = load_audio(bomb.build(BOMB_S), max_duration_s=2 * BOMB_S)
    assert BOMB_S - 0.1 <= audio.duration_s <= BOMB_S + 2.5  # lossy codecs round up to whole packets
    assert audio.samples.dtype == np.float32 and audio.samples.flags.owndata
    assert len(audio.samples) == audio.samples.size  # no spare capacity kept


def test_samples_held_while_decoding_follow_the_limit_not_the_file() -> None:
    ten_minutes = flac_bomb(600.0, declare=False)  # no declared length: only decoding can tell
    tracemalloc.start()
    try:
        with pytest.raises(AudioTooLongError):
            load_audio(ten_minutes, max_duration_s=LIMIT_S)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    at_limit_bytes = LIMIT_S * 16_000 * 4  # 1.9 MB of float32 samples; the file holds 38 MB
    assert peak_bytes < 2.5 * at_limit_bytes, f"peak {peak_bytes / 1e6:.1f} MB"


def test_a_wav_declaring_hours_over_seconds_of_data_is_too_long_and_a_short_one_truncated() -> None:
    with pytest.raises(AudioTooLongError, match="header declares 36000.0 s"):
        load_audio(wav_bomb(20.0, declared_s=36_000.0), max_duration_s=LIMIT_S)
    with pytest.raises(InvalidAudioError, match="WAV file is truncated"):
        load_audio(wav_bomb(5.0, declared_s=20.0), max_duration_s=LIMIT_S)


def test_a_header_that_declares_just_over_the_limit_is_decoded_before_it_is_judged() -> None:
    # FFmpeg estimates some durations from the bitrate: a declaration over the limit by less than
    # the truncation tolerance is no reason to refuse; the decoded length decides.
    just_over = flac_bomb(LIMIT_S + 0.1)  # 30.208 s: whole 4096-sample frames
    with pytest.raises(AudioTooLongError, match="decoding stopped there"):
        load_audio(just_over, max_duration_s=LIMIT_S)
    assert load_audio(just_over, max_duration_s=LIMIT_S + 1).duration_s == pytest.approx(30.208, abs=0.01)


def test_audio_exactly_as_long_as_the_limit_is_accepted(sample_wav) -> None:
    # Counted in samples: 30 s decoded in frames must not add up to a hair over 30 s.
    assert load_audio(wav_bomb(LIMIT_S, declared_s=LIMIT_S), max_duration_s=LIMIT_S).duration_s == LIMIT_S
    assert load_audio(sample_wav.read_bytes(), max_duration_s=30.0).duration_s == 30.0
    with pytest.raises(AudioTooLongError, match="decoding stopped there"):
        load_audio(wav_bomb(LIMIT_S + 0.01, declared_s=LIMIT_S + 0.01), max_duration_s=LIMIT_S)


def test_float_arrays_over_the_limit_are_refused_before_resampling() -> None:
    samples = np.zeros(int(8_000 * (LIMIT_S + 1)), np.float32)
    with pytest.raises(AudioTooLongError, match=re.escape(f"the audio lasts {LIMIT_S + 1:.1f} s, {ADVICE}")):
        load_audio({"array": samples, "sampling_rate": 8_000}, max_duration_s=LIMIT_S)
    assert load_audio(samples[: 8_000 * 10], sampling_rate_hz=8_000, max_duration_s=LIMIT_S).duration_s == 10.0


def test_no_limit_decodes_everything_and_ordinary_files_are_unchanged(sample_audio) -> None:
    assert load_audio(flac_bomb(600.0, declare=False)).duration_s == pytest.approx(600.0, abs=0.3)
    clip = sample_audio.samples[: 5 * 16_000]
    limited = load_audio(encode(clip, 16_000, "flac"), max_duration_s=LIMIT_S)
    np.testing.assert_array_equal(limited.samples, load_audio(encode(clip, 16_000, "flac")).samples)


def test_the_limit_is_one_setting_with_a_four_hour_default(monkeypatch) -> None:
    assert ModelSettings(asr_model="x").max_audio_duration_s == DEFAULT_MAX_AUDIO_DURATION_S == 4 * 3600
    monkeypatch.setenv("MAX_AUDIO_DURATION_S", "90")
    assert ModelSettings(asr_model="x").max_audio_duration_s == 90
    monkeypatch.setenv("MAX_AUDIO_DURATION_S", "0")
    with pytest.raises(ValueError, match="max_audio_duration_s"):
        ModelSettings(asr_model="x")
