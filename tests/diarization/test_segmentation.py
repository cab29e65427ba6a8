"""segmentation-3.0 on overlapping chunks with the first convolution shared between them
(whosaid.speakers.segmentation) against pyannote's own `Inference`, which runs the whole model on
every chunk: the same chunks, the same frames, the same scores up to float rounding, on real
speech (pyannote's sample, the AMI snippets, five minutes of them end to end) and real weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from whosaid.audio.loading import load_audio_file
from whosaid.speakers.segmentation import ChunkSegmentation

pytestmark = pytest.mark.slow

AMI_DIR = Path(__file__).parents[1] / "data" / "ami"
SAMPLE_RATE_HZ = 16_000


@pytest.fixture(scope="module")
def model(builtin_diarizer):
    return builtin_diarizer.segmentation_model


@pytest.fixture(scope="module")
def meeting() -> np.ndarray:
    """The ten AMI snippets end to end: five minutes, several batches of chunks."""
    return np.concatenate([load_audio_file(path).samples for path in sorted(AMI_DIR.glob("ami_*.wav"))])


def pyannote_inference(model, step_s: float, samples: np.ndarray, *, hard: bool):
    from pyannote.audio import Inference

    inference = Inference(
        model, duration=10.0, step=step_s, skip_aggregation=True, skip_conversion=not hard, batch_size=16
    )
    with torch.inference_mode():
        return inference({"waveform": torch.from_numpy(samples)[None], "sample_rate": SAMPLE_RATE_HZ})


def test_the_default_step_shares_the_first_convolution(model) -> None:
    assert ChunkSegmentation(model, 2.5, 16).shared
    assert ChunkSegmentation(model, 1.0, 16).shared
    # 2.5001 s is 40002 samples: not a whole number of the filters' 10-sample stride.
    assert not ChunkSegmentation(model, 2.5001, 16).shared


@pytest.mark.parametrize("clip", ["sample", "sample with a DC offset", "ami_trn03", "ami_trn07", "meeting"])
def test_scores_are_pyannotes_up_to_rounding(model, sample_audio, meeting, clip: str) -> None:
    # A DC offset (a cheap sound card) moves every chunk's mean, which the normalisation removes.
    offset = (sample_audio.samples + np.float32(0.05)).astype(np.float32)
    samples = {"sample": sample_audio.samples, "sample with a DC offset": offset, "meeting": meeting}.get(clip)
    if samples is None:
        samples = load_audio_file(AMI_DIR / f"{clip}.wav").samples
    segmentation = ChunkSegmentation(model, 2.5, 16)
    ours = torch.cat(list(segmentation.scores(torch.from_numpy(samples)))).numpy()
    theirs = pyannote_inference(model, 2.5, samples, hard=False)
    assert ours.shape == theirs.data.shape
    # Log-probabilities of classes that matter differ by float rounding only (the first
    # convolution sums in another order); hopeless classes (log-probability below -10) may
    # differ more in absolute terms.
    likely = theirs.data > -10.0
    assert np.abs(ours - theirs.data)[likely].max() < 1e-3
    # The decisions: the same most likely class on every frame but a rounding tie or two.
    agree = (ours.argmax(axis=-1) == theirs.data.argmax(axis=-1)).mean()
    assert agree >= 0.9999


@pytest.mark.parametrize("num_samples", [1_000, 160_000, 160_001, 200_000, 496_000, 520_000])
def test_chunks_are_pyannotes_whatever_the_length(model, meeting, num_samples: int) -> None:
    samples = meeting[:num_samples]
    ours = ChunkSegmentation(model, 2.5, 16)(samples)
    theirs = pyannote_inference(model, 2.5, samples, hard=True)
    assert ours.data.shape == theirs.data.shape
    assert ours.sliding_window.start == theirs.sliding_window.start == 0.0
    assert ours.sliding_window.step == theirs.sliding_window.step == 2.5
    assert ours.sliding_window.duration == theirs.sliding_window.duration == 10.0
    assert set(np.unique(ours.data)) <= {0.0, 1.0}
    assert (ours.data != theirs.data).any(axis=-1).mean() <= 1e-3


def test_a_step_that_cannot_share_is_pyannotes_inference(model, sample_audio) -> None:
    samples = sample_audio.samples
    ours = ChunkSegmentation(model, 2.5001, 16)(samples)
    theirs = pyannote_inference(model, 2.5001, samples, hard=True)
    assert ours.sliding_window.step == 2.5001
    np.testing.assert_array_equal(ours.data, theirs.data)
