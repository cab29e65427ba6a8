"""Word timestamps (whosaid/recognition/word_timing.py): the DTW against openai/whisper's loop, and on real
speech (pyannote's sample, whisper-base) against faster-whisper's `word_timestamps=True` on the
same CTranslate2 weights; the invariants every response keeps."""

from __future__ import annotations

import os
import statistics

import numpy as np
import pytest

from benchmarks.asr.word_timestamps import matched_words
from tests.support.ctranslate2_models import faster_whisper_dir
from whosaid.config import InferenceConfig
from whosaid.errors import InvalidParametersError
from whosaid.recognition.word_timing import _merge_punctuations, _Timing, dtw

# The bound: median |start difference| and |end difference| over matched words.
MAX_MEDIAN_DIFFERENCE_S = 0.05


def reference_dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """openai/whisper's dtw_cpu and backtrace, loop for loop."""
    rows, columns = cost.shape
    total = np.ones((rows + 1, columns + 1)) * np.inf
    trace = -np.ones((rows + 1, columns + 1))
    total[0, 0] = 0
    for j in range(1, columns + 1):
        for i in range(1, rows + 1):
            c0, c1, c2 = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            total[i, j] = cost[i - 1, j - 1] + c
            trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = rows, columns
    path = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        if trace[i, j] == 0:
            i, j = i - 1, j - 1
        elif trace[i, j] == 1:
            i -= 1
        else:
            j -= 1
    result = np.array(path)[::-1, :].T
    return result[0], result[1]


@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (7, 1), (5, 40), (23, 61), (40, 12)])
def test_dtw_takes_openais_path(shape) -> None:
    rng = np.random.default_rng(sum(shape))
    for cost in (rng.normal(size=shape), rng.integers(0, 3, size=shape).astype(float)):  # ties too
        ours, theirs = dtw(cost), reference_dtw(cost)
        assert ours[0].tolist() == theirs[0].tolist() and ours[1].tolist() == theirs[1].tolist()


def test_punctuation_joins_its_word() -> None:
    words = [" (", "Hello", ",", " world", ".", ' "', "Bye", '"']
    timings = [_Timing(word, [index], index, index + 1, 1.0) for index, word in enumerate(words)]
    _merge_punctuations(timings)
    assert [(t.text, t.tokens) for t in timings] == [
        ("", []),
        (" (Hello,", [0, 1, 2]),
        ("", []),
        (" world.", [3, 4]),
        ("", []),
        ("", []),
        (' "Bye"', [5, 6, 7]),
        ("", []),
    ]


@pytest.mark.parametrize("value", ["words", 3, False, None])
def test_return_timestamps_must_be_segment_or_word(value) -> None:
    with pytest.raises(InvalidParametersError, match="return_timestamps must be true or 'segment'"):
        InferenceConfig.from_parameters({"return_timestamps": value})


@pytest.mark.parametrize(
    "value, expected", [(True, "segment"), ("true", "segment"), ("segment", "segment"), ("Word", "word")]
)
def test_return_timestamps_values(value, expected) -> None:
    assert InferenceConfig.from_parameters({"return_timestamps": value})[0].return_timestamps == expected


# --- real speech -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_engine(converted_model, make_engine):
    return make_engine(converted_model("whisper-base"))


@pytest.fixture(scope="module")
def word_transcript(base_engine, sample_audio):
    config, _ = InferenceConfig.from_parameters({"return_timestamps": "word", "language": "en"})
    return base_engine.transcribe(sample_audio, config)


@pytest.fixture(scope="module")
def faster_whisper_words(sample_wav, tmp_path_factory) -> list[tuple[str, float, float]]:
    from faster_whisper import WhisperModel

    model_dir = faster_whisper_dir("whisper-base", tmp_path_factory.mktemp("ct2-base"))
    model = WhisperModel(str(model_dir), device="cpu", compute_type="float32", cpu_threads=os.cpu_count() or 1)
    segments, _ = model.transcribe(str(sample_wav), language="en", beam_size=1, word_timestamps=True)
    return [(word.word, word.start, word.end) for segment in segments for word in segment.words]


@pytest.mark.slow
def test_word_times_match_faster_whisper(word_transcript, faster_whisper_words) -> None:
    ours = [(word.text, word.start_s, word.end_s) for chunk in word_transcript.chunks for word in chunk.words]
    pairs = matched_words(ours, faster_whisper_words)
    assert len(pairs) >= 0.8 * len(ours) >= 0.8 * 60, (len(pairs), len(ours))
    start_difference_s = statistics.median(abs(a[1] - b[1]) for a, b in pairs)
    end_difference_s = statistics.median(abs(a[2] - b[2]) for a, b in pairs)
    assert start_difference_s <= MAX_MEDIAN_DIFFERENCE_S and end_difference_s <= MAX_MEDIAN_DIFFERENCE_S, (
        start_difference_s,
        end_difference_s,
    )


@pytest.mark.slow
def test_words_are_in_order_inside_their_chunk_and_make_its_text(word_transcript) -> None:
    previous_end_s = 0.0
    assert word_transcript.chunks
    for chunk in word_transcript.chunks:
        assert chunk.words, chunk
        assert chunk.text == "".join(word.text for word in chunk.words)
        for word in chunk.words:
            assert chunk.start_s <= word.start_s <= word.end_s <= chunk.end_s
            assert word.start_s >= previous_end_s
            assert 0.0 < word.probability <= 1.0
            previous_end_s = word.end_s
    response = word_transcript.to_dict()
    assert all(
        len(chunk["words"]) == len(c.words) for chunk, c in zip(response["chunks"], word_transcript.chunks, strict=True)
    )


@pytest.mark.slow
def test_words_leave_the_segment_transcript_unchanged(base_engine, sample_audio, word_transcript) -> None:
    config, _ = InferenceConfig.from_parameters({"language": "en"})
    plain = base_engine.transcribe(sample_audio, config)
    assert plain.text == word_transcript.text
    assert [chunk.text for chunk in plain.chunks] == [chunk.text for chunk in word_transcript.chunks]
    assert all(not chunk.words for chunk in plain.chunks)
    assert all("words" not in chunk for chunk in plain.to_dict()["chunks"])
