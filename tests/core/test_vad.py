"""VAD windows: speech regions packed into windows cut in pauses, on the audio's time line;
chunk times stay in their windows; silence or noise stay an empty transcript."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.engines import RATE, config
from tests.support.fallback import NEVER_FALL_BACK, with_fallback
from whosaid.audio.loading import Audio
from whosaid.audio.vad import SpeechWindow, VoiceActivityDetector, plan_windows


def test_windows_pack_regions_and_cut_in_pauses() -> None:
    regions = [(1.0, 5.0), (6.0, 20.0), (21.0, 29.0), (31.0, 40.0), (45.0, 46.0)]
    assert plan_windows(regions, 30.0) == [
        SpeechWindow(1.0, 29.0),
        SpeechWindow(31.0, 46.0),
    ]
    assert plan_windows(regions, 10.0) == [
        SpeechWindow(1.0, 5.0),
        SpeechWindow(6.0, 20.0 - 7.0),  # 14 s without a pause: two equal pieces
        SpeechWindow(13.0, 20.0),
        SpeechWindow(21.0, 29.0),
        SpeechWindow(31.0, 40.0),
        SpeechWindow(45.0, 46.0),
    ]
    assert plan_windows([], 30.0) == []


def test_vad_skips_the_leading_silence_and_keeps_windows_inside_the_audio(sample_audio) -> None:
    vad = VoiceActivityDetector.load()
    long_audio = np.tile(sample_audio.samples, 4)
    for samples, max_window_s in ((sample_audio.samples, 30.0), (long_audio, 30.0), (long_audio, 10.0)):
        windows = vad.windows(samples, max_window_s)
        duration_s = len(samples) / RATE
        assert windows and windows[0].start_s > 6.0, "pyannote's sample starts with 6.7 s of silence"
        for window, following in zip(windows, windows[1:] + [None], strict=True):
            assert 0 <= window.start_s < window.end_s <= duration_s
            assert window.duration_s <= max_window_s + 1e-6
            if following is not None:
                assert window.end_s <= following.start_s
    assert len(vad.windows(long_audio, 30.0)) == 4


def test_vad_loading_keeps_torchs_thread_count() -> None:
    import torch

    from whosaid.audio.vad import _load_silero_sequence_model

    before = torch.get_num_threads()
    _load_silero_sequence_model.cache_clear()
    VoiceActivityDetector.load()
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("amplitude", [0.0, 1e-3, 0.1])
def test_silence_and_noise_give_an_empty_transcript(tiny_engine, amplitude) -> None:
    noise = np.random.default_rng(2).normal(0, amplitude, 4 * RATE).astype(np.float32)
    transcript = tiny_engine.transcribe(Audio(noise), config(language="en"))
    assert transcript.text == "" and transcript.chunks == ()


def test_chunk_times_stay_in_their_windows(tiny_engine, sample_audio) -> None:
    tiny_engine = with_fallback(tiny_engine, NEVER_FALL_BACK)  # greedy is enough here, and quicker
    audio = sample_audio
    windows = tiny_engine.recognizer.vad.windows(audio.samples, 12.0)
    transcript = tiny_engine.transcribe(audio, config(language="en", chunk_length_s=12, batch_size=3))
    assert transcript.chunks
    previous_end = 0.0
    for chunk in transcript.chunks:
        assert any(w.start_s <= chunk.start_s <= chunk.end_s <= w.end_s for w in windows), chunk
        assert chunk.start_s >= previous_end - 1e-9
        previous_end = chunk.end_s

