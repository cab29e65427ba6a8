"""Speech-only (joined) windows: speech regions joined with their pauses cut to a short gap, and
every time Whisper gives in such a window mapped back to the audio's time line, so that no chunk
or word spans a pause its speech does not."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.support.fallback import recognizer_with
from whosaid.audio.loading import Audio
from whosaid.audio.vad import SpeechWindow, plan_fewest_windows, plan_joined_windows, plan_windows
from whosaid.config import InferenceConfig
from whosaid.recognition.recognizer import SpeechRecognizer

REGIONS = [(1.0, 4.0), (4.3, 9.0), (15.0, 20.0), (40.0, 52.0), (60.0, 75.0), (76.0, 78.0)]


def test_regions_are_joined_with_short_pauses_up_to_the_window_length() -> None:
    windows = plan_joined_windows(REGIONS, 30.0, 0.5)
    # 4.0-4.3 is shorter than the gap: one piece. Then 8 s + 0.5 + 5 + 0.5 + 12 = 26 s of window.
    assert windows[0] == SpeechWindow(1.0, 52.0, ((1.0, 9.0), (15.0, 20.0), (40.0, 52.0)), 0.5)
    assert windows[0].end_offset_s == pytest.approx(26.0)
    # 15 s + 0.5 + 2 s: the second window. The contiguous plan needs three windows for all this.
    assert windows[1] == SpeechWindow(60.0, 78.0, ((60.0, 75.0), (76.0, 78.0)), 0.5)
    assert len(windows) == 2 and len(plan_windows(REGIONS, 30.0)) == 3
    # A window of a single piece is an ordinary contiguous window; a piece over the window length
    # is cut into equal contiguous windows.
    assert plan_joined_windows([(5.0, 12.0)], 30.0, 0.5) == [SpeechWindow(5.0, 12.0)]
    assert plan_joined_windows([(0.0, 50.0), (52.0, 55.0)], 30.0, 0.5) == [
        SpeechWindow(0.0, 25.0),
        SpeechWindow(25.0, 50.0),
        SpeechWindow(52.0, 55.0),
    ]
    assert plan_joined_windows([], 30.0, 0.5) == []


def test_speech_is_joined_across_its_pauses_only_where_that_takes_fewer_windows() -> None:
    """A call's channel holds one party's turns, with the other's turns as pauses between them:
    three contiguous windows, one joined. Speech whose windows are as many either way keeps its
    pauses (contiguous windows)."""
    turns = [(0.0, 8.0), (25.0, 33.0), (50.0, 58.0)]
    assert len(plan_windows(turns, 30.0)) == 3
    assert plan_fewest_windows(turns, 30.0, 0.5) == [SpeechWindow(0.0, 58.0, tuple(turns), 0.5)]
    assert plan_fewest_windows([(0.0, 10.0), (11.0, 20.0)], 30.0, 0.5) == [SpeechWindow(0.0, 20.0)]
    assert plan_fewest_windows(REGIONS, 30.0, 0.5) == plan_joined_windows(REGIONS, 30.0, 0.5)
    dense = [(start, start + 9.0) for start in np.arange(0.0, 100.0, 10.0)]
    assert plan_fewest_windows(dense, 30.0, 0.5) == plan_windows(dense, 30.0)
    assert plan_fewest_windows([], 30.0, 0.5) == []


def test_times_map_back_and_a_time_in_a_gap_goes_to_the_speech_beside_it() -> None:
    window = SpeechWindow(1.0, 52.0, ((1.0, 9.0), (15.0, 20.0), (40.0, 52.0)), 0.5)
    assert window.offset_s == 0.0 and not SpeechWindow(3.0, 9.0).joined
    for is_end in (False, True):
        assert window.to_audio_s(0.0, is_end=is_end) == 1.0
        assert window.to_audio_s(2.5, is_end=is_end) == 3.5  # in the first piece
        assert window.to_audio_s(10.5, is_end=is_end) == 17.0  # 8.5 s into the window: 2 s into the second piece
        assert window.to_audio_s(15.0, is_end=is_end) == pytest.approx(41.0)
        assert window.to_audio_s(-1.0, is_end=is_end) == 1.0
        assert window.to_audio_s(29.0, is_end=is_end) == 52.0  # Whisper's padding: the window's end
    # 8.0-8.5 s of the window is the gap that stands for the 6 s pause from 9 to 15 s.
    assert window.to_audio_s(8.2, is_end=False) == 15.0
    assert window.to_audio_s(8.2, is_end=True) == 9.0
    # A contiguous window: the audio time already, kept inside the window.
    assert SpeechWindow(3.0, 9.0).to_audio_s(4.0, is_end=True) == 4.0
    assert SpeechWindow(3.0, 9.0).to_audio_s(12.0, is_end=True) == 9.0


def test_the_samples_are_the_pieces_with_silent_gaps() -> None:
    audio = np.arange(16_000 * 60, dtype=np.float32) + 1.0
    window = SpeechWindow(1.0, 30.0, ((1.0, 2.0), (10.0, 12.5), (29.0, 30.0)), 0.5)
    samples = window.samples(audio)
    assert samples.size == round(window.end_offset_s * 16_000) == 88_000
    assert np.array_equal(samples[:16_000], audio[16_000:32_000])
    assert not samples[16_000:24_000].any()
    assert np.array_equal(samples[24_000:64_000], audio[160_000:200_000])
    assert np.array_equal(samples[72_000:], audio[464_000:480_000])


def test_no_pause_longer_than_the_gap_lands_inside_a_span_unless_speech_spans_it() -> None:
    """Random regions and random spans of window time, as Whisper's segments and words give
    them: once mapped, a span that reaches into a pause holds all of it, and then its window
    times hold speech on both sides of that pause's gap. Joining never needs more windows."""
    rng = random.Random(24)
    for _ in range(200):
        regions, time_s = [], 0.0
        for _ in range(rng.randint(1, 12)):
            time_s += rng.uniform(0.0, 8.0)
            regions.append((time_s, time_s + rng.uniform(0.3, 9.0)))
            time_s = regions[-1][1]
        assert len(plan_joined_windows(regions, 30.0, 0.5)) <= len(plan_windows(regions, 30.0))
        for window in plan_joined_windows(regions, 30.0, 0.5):
            pieces = window.pieces or ((window.start_s, window.end_s),)
            offsets, offset_s = [], 0.0
            for start_s, end_s in pieces:
                offsets.append((offset_s, offset_s + end_s - start_s))
                offset_s += end_s - start_s + window.gap_s
            for _ in range(20):
                span = sorted(rng.uniform(-1.0, window.end_offset_s + 1.0) for _ in range(2))
                start_s = window.to_audio_s(span[0], is_end=False)
                end_s = max(window.to_audio_s(span[1], is_end=True), start_s)
                assert window.start_s <= start_s <= end_s <= window.end_s
                for number in range(len(pieces) - 1):
                    pause = (pieces[number][1], pieces[number + 1][0])
                    assert pause[1] - pause[0] > window.gap_s
                    if start_s < pause[1] and end_s > pause[0]:
                        assert start_s <= pause[0] and end_s >= pause[1]
                        assert span[0] < offsets[number][1] and span[1] > offsets[number + 1][0]


@pytest.mark.slow
def test_a_long_pause_is_in_no_word_or_chunk_of_a_joined_window(converted_model, make_engine, sample_audio) -> None:
    """pyannote's sample with 12 s of silence put into its pause at 14.5 s: with joined windows,
    whisper-tiny.en's words all fall outside the silence, and so does every chunk that does not
    have words on both sides of it."""
    engine = make_engine(converted_model("whisper-tiny.en"))
    cut = int(14.5 * 16_000)
    silent = np.zeros(12 * 16_000, np.float32)
    samples = np.concatenate([sample_audio.samples[:cut], silent, sample_audio.samples[cut:]])
    config = InferenceConfig.from_parameters({"return_timestamps": "word"})[0]
    recognizer: SpeechRecognizer = engine.recognizer
    joined = recognizer_with(recognizer, window_pause_s=0.5)
    windows = joined._windows(Audio(samples), 30.0, multilingual=False)
    assert len(windows) == 1 and windows[0].joined
    chunks = joined.transcribe(Audio(samples), config).chunks
    silence = (14.7, 26.3)  # the VAD's 0.2 s padding on each side
    words = [word for chunk in chunks for word in chunk.words]
    assert words and all(word.end_s <= silence[0] or word.start_s >= silence[1] for word in words)
    for chunk in chunks:
        if chunk.start_s < silence[1] and chunk.end_s > silence[0]:
            assert chunk.words[0].end_s <= silence[0] and chunk.words[-1].start_s >= silence[1]
    assert "Jersey" in "".join(chunk.text for chunk in chunks)  # real words, from both sides
    assert chunks[-1].end_s > silence[1] + 10
