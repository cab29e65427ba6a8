"""The offline, randomly initialised diarization pipeline (tests/support/pyannote_local.py).

It must load through `pyannote.audio.Pipeline.from_pretrained` without the hub and run the real
pyannote.audio 4 `SpeakerDiarization` code on in-memory waveforms. Weights are random, so the
assertions are about structure and about what pyannote itself guarantees, never about who
speaks when. Runs on the 30 s sample take seconds each on two CPU cores and are marked `slow`.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import huggingface_hub.constants
import numpy as np
import pyannote.audio
import pyannote.audio.core.model
import pyannote.audio.core.pipeline
import pyannote.audio.core.plda
import pytest
import torch
import torchaudio
from pyannote.audio import Pipeline
from pyannote.audio.pipelines import SpeakerDiarization
from pyannote.audio.pipelines.speaker_diarization import DiarizeOutput
from pyannote.core import Annotation

from tests.support.pyannote_local import (
    EMBEDDING_DIMENSION,
    build_random_diarization_pipeline,
)
from whosaid.config import WHISPER_SAMPLE_RATE_HZ as SAMPLE_RATE_HZ

SAMPLE_WAV = Path(pyannote.audio.__file__).parent / "sample" / "sample.wav"
SAMPLE_DURATION_S = 30.0

# 10 s windows every 1 s over 30 s of audio: 21 chunks, whatever the input sample rate.
SAMPLE_NUM_CHUNKS = 21


@pytest.fixture(scope="module")
def offline() -> Iterator[None]:
    """No hub, no telemetry: any attempt to download fails the test instead of hanging."""

    def refuse_download(*args: Any, **kwargs: Any) -> str:
        raise AssertionError(f"pyannote tried to download from the hub: {args} {kwargs}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        # huggingface_hub reads HF_HUB_OFFLINE at import time, before this fixture runs.
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        # pyannote.audio 4 sends usage spans to otel.pyannote.ai unless told not to.
        patch.setenv("PYANNOTE_METRICS_ENABLED", "false")
        for module in (
            pyannote.audio.core.pipeline,
            pyannote.audio.core.model,
            pyannote.audio.core.plda,
        ):
            patch.setattr(module, "download_from_hf_hub", refuse_download)
        yield


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_random_diarization_pipeline(tmp_path_factory.mktemp("diarization"))


@pytest.fixture(scope="module")
def pipeline(offline: None, pipeline_dir: Path) -> SpeakerDiarization:
    loaded = Pipeline.from_pretrained(str(pipeline_dir))
    assert loaded is not None
    return loaded


@pytest.fixture(scope="module")
def deaf_pipeline(
    offline: None, tmp_path_factory: pytest.TempPathFactory
) -> SpeakerDiarization:
    directory = build_random_diarization_pipeline(
        tmp_path_factory.mktemp("deaf_diarization"), detects_speech=False
    )
    loaded = Pipeline.from_pretrained(str(directory))
    assert loaded is not None
    return loaded


@pytest.fixture(scope="module")
def sample_waveform() -> torch.Tensor:
    """pyannote's bundled sample as a (1, 480000) float32 tensor in [-1, 1].

    Decoded with PyAV: torchcodec needs system FFmpeg libraries this machine may lack.
    """
    with av.open(str(SAMPLE_WAV)) as container:
        stream = container.streams.audio[0]
        assert stream.rate == SAMPLE_RATE_HZ
        resampler = av.AudioResampler(format="fltp", layout="mono", rate=stream.rate)
        frames = [
            resampled.to_ndarray()
            for frame in container.decode(stream)
            for resampled in resampler.resample(frame)
        ]
        frames += [resampled.to_ndarray() for resampled in resampler.resample(None)]
    waveform = torch.from_numpy(np.concatenate(frames, axis=1))
    assert waveform.shape == (1, round(SAMPLE_DURATION_S * SAMPLE_RATE_HZ))
    return waveform


def run_counting_chunks(
    pipeline: SpeakerDiarization, file: dict[str, Any], **kwargs: Any
) -> tuple[DiarizeOutput, int]:
    """Run the pipeline and return its output and the number of 10 s windows it segmented."""
    num_chunks: list[int] = []

    def hook(step_name: str, step_artefact: Any, **_: Any) -> None:
        if step_name == "segmentation" and step_artefact is not None:
            num_chunks.append(step_artefact.data.shape[0])

    output = pipeline(file, hook=hook, **kwargs)
    return output, num_chunks[-1]


def assert_consistent(output: DiarizeOutput) -> None:
    """What pyannote 4's DiarizeOutput promises whatever the weights."""
    assert isinstance(output, DiarizeOutput)
    assert isinstance(output.speaker_diarization, Annotation)
    assert isinstance(output.exclusive_speaker_diarization, Annotation)
    labels = output.speaker_diarization.labels()
    assert labels == [f"SPEAKER_{i:02d}" for i in range(len(labels))]
    assert set(output.exclusive_speaker_diarization.labels()) <= set(labels)
    assert not output.exclusive_speaker_diarization.get_overlap()
    assert output.speaker_embeddings.shape == (len(labels), EMBEDDING_DIMENSION)


def diarize_sample(
    pipeline: SpeakerDiarization, sample_waveform: torch.Tensor, **hints: int
) -> DiarizeOutput:
    """The pipeline's output on the sample, given these speaker hints, checked for what
    DiarizeOutput promises."""
    output = pipeline({"waveform": sample_waveform, "sample_rate": SAMPLE_RATE_HZ}, **hints)
    assert_consistent(output)
    return output


def test_builder_writes_community1_layout(pipeline_dir: Path) -> None:
    assert sorted(
        str(path.relative_to(pipeline_dir))
        for path in pipeline_dir.rglob("*")
        if path.is_file()
    ) == [
        "config.yaml",
        "embedding/pytorch_model.bin",
        "plda/plda.npz",
        "plda/xvec_transform.npz",
        "segmentation/pytorch_model.bin",
    ]


def test_loads_offline_as_real_speaker_diarization(pipeline: SpeakerDiarization) -> None:
    assert type(pipeline) is SpeakerDiarization
    assert pipeline.instantiated
    assert pipeline.klustering == "VBxClustering"
    assert pipeline._segmentation.model.specifications.powerset
    assert pipeline._embedding.dimension == EMBEDDING_DIMENSION


def test_directory_can_be_moved(offline: None, pipeline_dir: Path, tmp_path: Path) -> None:
    moved = Path(shutil.copytree(pipeline_dir, tmp_path / "moved"))
    assert isinstance(Pipeline.from_pretrained(str(moved)), SpeakerDiarization)


def test_same_seed_same_weights(tmp_path: Path) -> None:
    first = build_random_diarization_pipeline(tmp_path / "a", seed=3)
    second = build_random_diarization_pipeline(tmp_path / "b", seed=3)
    other = build_random_diarization_pipeline(tmp_path / "c", seed=4)

    def weights(directory: Path) -> dict[str, torch.Tensor]:
        checkpoint = torch.load(
            directory / "segmentation" / "pytorch_model.bin", weights_only=False
        )
        return checkpoint["state_dict"]

    assert all(torch.equal(w, weights(second)[k]) for k, w in weights(first).items())
    assert not all(torch.equal(w, weights(other)[k]) for k, w in weights(first).items())


@pytest.mark.slow
def test_sample_gives_diarize_output(
    pipeline: SpeakerDiarization, sample_waveform: torch.Tensor
) -> None:
    output, num_chunks = run_counting_chunks(
        pipeline, {"waveform": sample_waveform, "sample_rate": SAMPLE_RATE_HZ}
    )
    assert_consistent(output)
    assert num_chunks == SAMPLE_NUM_CHUNKS
    assert output.speaker_diarization.labels()
    assert output.speaker_diarization.get_timeline().extent().end <= SAMPLE_DURATION_S


@pytest.mark.slow
def test_num_speakers_two_gives_two_speakers(
    pipeline: SpeakerDiarization, sample_waveform: torch.Tensor
) -> None:
    # VBx re-clusters with KMeans to exactly num_speakers clusters; that each cluster also
    # wins some frames (and so becomes a label) is this seed's doing, not a pyannote promise.
    output = diarize_sample(pipeline, sample_waveform, num_speakers=2)
    assert output.speaker_diarization.labels() == ["SPEAKER_00", "SPEAKER_01"]


@pytest.mark.slow
def test_max_speakers_is_a_hard_bound(
    pipeline: SpeakerDiarization, sample_waveform: torch.Tensor
) -> None:
    # Clusters are capped at max_speakers and so is the per-frame speaker count.
    output = diarize_sample(pipeline, sample_waveform, max_speakers=1)
    assert output.speaker_diarization.labels() == ["SPEAKER_00"]
    assert not output.speaker_diarization.get_overlap()


@pytest.mark.slow
def test_min_speakers_is_a_soft_bound(
    pipeline: SpeakerDiarization, sample_waveform: torch.Tensor
) -> None:
    # pyannote only warns when it finds fewer speakers than min_speakers
    # (speaker_diarization.py, "is outside the given bounds").
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        output = diarize_sample(pipeline, sample_waveform, min_speakers=3, max_speakers=4)
    num_speakers = len(output.speaker_diarization.labels())
    assert num_speakers <= 4
    warned = any("outside" in str(warning.message) for warning in caught)
    assert num_speakers >= 3 or warned


@pytest.mark.slow
def test_8khz_input_is_resampled_not_misread(
    pipeline: SpeakerDiarization, sample_waveform: torch.Tensor
) -> None:
    # Read as 16 kHz, 8 kHz samples would last 15 s and fill only 6 windows.
    waveform_8khz = torchaudio.functional.resample(sample_waveform, SAMPLE_RATE_HZ, 8_000)
    output, num_chunks = run_counting_chunks(
        pipeline, {"waveform": waveform_8khz, "sample_rate": 8_000}, num_speakers=2
    )
    assert_consistent(output)
    assert num_chunks == SAMPLE_NUM_CHUNKS
    assert output.speaker_diarization.labels() == ["SPEAKER_00", "SPEAKER_01"]


def test_silence_does_not_crash_random_weights_hear_a_speaker(
    pipeline: SpeakerDiarization,
) -> None:
    silence = torch.zeros(1, 10 * SAMPLE_RATE_HZ)
    output = pipeline({"waveform": silence, "sample_rate": SAMPLE_RATE_HZ})
    assert_consistent(output)
    assert output.speaker_diarization.labels() == ["SPEAKER_00"]


def test_silence_takes_the_no_speaker_exit(deaf_pipeline: SpeakerDiarization) -> None:
    output = deaf_pipeline(
        {"waveform": torch.zeros(1, 10 * SAMPLE_RATE_HZ), "sample_rate": SAMPLE_RATE_HZ},
        num_speakers=2,
    )
    assert_consistent(output)
    assert not output.speaker_diarization
    assert not output.exclusive_speaker_diarization
    assert output.speaker_embeddings.shape == (0, EMBEDDING_DIMENSION)


def test_more_speakers_than_embeddings_raises_in_pyannote(
    pipeline: SpeakerDiarization, sample_waveform: torch.Tensor
) -> None:
    # 11 s makes 2 windows, and here 2 embeddings pass pyannote's filter. VBxClustering only
    # skips clustering below 2 embeddings; otherwise it asks scikit-learn's KMeans for
    # num_speakers clusters (pyannote/audio/pipelines/clustering.py, after VBx), which raises
    # when there are fewer embeddings than that. Callers must bound num_speakers or catch it.
    eleven_seconds = sample_waveform[:, : 11 * SAMPLE_RATE_HZ]
    with pytest.raises(ValueError, match="n_samples=2 should be >= n_clusters=3"):
        pipeline({"waveform": eleven_seconds, "sample_rate": SAMPLE_RATE_HZ}, num_speakers=3)
