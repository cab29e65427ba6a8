"""Offline stand-in for pyannote's gated diarization pipelines.

The pretrained pipelines (`pyannote/speaker-diarization-community-1`, `-3.1`) are gated on the
Hugging Face hub, and tests must not need the network. `build_random_diarization_pipeline`
writes a directory laid out like community-1 (`config.yaml` plus `segmentation/`, `embedding/`
and `plda/` subfolders) holding the same architectures with random weights, so that
`pyannote.audio.Pipeline.from_pretrained(directory)` runs the real pyannote.audio 4
`SpeakerDiarization` code end to end: powerset segmentation, WeSpeaker embeddings, PLDA and
VBx clustering. The outputs are meaningless as diarization; only their structure is real.
"""

from __future__ import annotations

from pathlib import Path

import lightning
import numpy as np
import torch
import yaml
from pyannote.audio import __version__ as pyannote_audio_version
from pyannote.audio.core.model import Model
from pyannote.audio.core.task import Problem, Resolution, Specifications
from pyannote.audio.models.embedding import WeSpeakerResNet34
from pyannote.audio.models.segmentation import PyanNet

# segmentation-3.0 / community-1 chunking: 10 s windows, up to 3 local speakers per chunk,
# at most 2 of them at once, hence 7 powerset classes; class 0 is the empty set (nobody
# speaks), see `Powerset.build_mapping` in pyannote/audio/utils/powerset.py.
SEGMENTATION_CHUNK_S = 10.0
MAX_SPEAKERS_PER_CHUNK = 3
MAX_SPEAKERS_PER_FRAME = 2
EMPTY_POWERSET_CLASS = 0

# The PyanNet blocks are shrunk from segmentation-3.0's (4 x 128 BiLSTM, 2 x 128 linear):
# with random weights their size buys nothing, and the frame rate and receptive field come
# from SincNet alone, which is kept as is.
SEGMENTATION_LSTM = {"hidden_size": 32, "num_layers": 1, "bidirectional": True}
SEGMENTATION_LINEAR = {"hidden_size": 32, "num_layers": 1}

# WeSpeaker ResNet34 as in community-1, but fed coarser filterbanks (80 mel bins every 10 ms
# there), so extracting the ~60 embeddings of a 30 s file is cheap on a CPU. The mel bin count
# must stay a multiple of 8.
EMBEDDING_FBANK = {"num_mel_bins": 16, "frame_shift": 40}

# WeSpeaker ResNet34 emits 256-dimensional embeddings; community-1's PLDA projects them onto
# 128 LDA dimensions, which is also `pyannote.audio.core.plda.PLDA`'s default `lda_dimension`.
EMBEDDING_DIMENSION = 256
LDA_DIMENSION = 128

# Hyper-parameters of community-1 (equal to `SpeakerDiarization.default_parameters()`).
PIPELINE_HYPER_PARAMETERS = {
    "segmentation": {"min_duration_off": 0.0},
    "clustering": {"threshold": 0.6, "Fa": 0.07, "Fb": 0.8},
}


def build_random_diarization_pipeline(
    directory: Path, *, seed: int = 0, detects_speech: bool = True
) -> Path:
    """Write a loadable, randomly initialised community-1-style pipeline into `directory`.

    The same `seed` always yields the same weights, so pipeline outputs are reproducible;
    the global torch random state is left untouched. Random segmentation weights hear
    speakers everywhere, even in digital silence. With `detects_speech=False` the
    segmentation model always predicts the empty powerset class instead, so every input
    takes pyannote's "no speaker is ever active" early exit, the path real models take on
    silence.

    Returns `directory`, ready for `pyannote.audio.Pipeline.from_pretrained(str(directory))`.
    """
    directory.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        _save_model(
            _random_segmentation_model(detects_speech),
            _segmentation_specifications(),
            directory / "segmentation",
        )
        _save_model(
            WeSpeakerResNet34(**EMBEDDING_FBANK),
            _embedding_specifications(),
            directory / "embedding",
        )
    _save_random_plda(directory / "plda", np.random.default_rng(seed))
    _write_config(directory / "config.yaml")
    return directory


def _segmentation_specifications() -> Specifications:
    """Specifications as pyannote's SpeakerDiarization task sets them for a powerset model."""
    return Specifications(
        problem=Problem.MONO_LABEL_CLASSIFICATION,
        resolution=Resolution.FRAME,
        duration=SEGMENTATION_CHUNK_S,
        classes=[f"speaker#{i + 1}" for i in range(MAX_SPEAKERS_PER_CHUNK)],
        powerset_max_classes=MAX_SPEAKERS_PER_FRAME,
        permutation_invariant=True,
    )


def _embedding_specifications() -> Specifications:
    """Specifications as pyannote's WeSpeaker conversion script writes them.

    Embedding checkpoints carry no task; the duration is unused by the diarization pipeline.
    """
    return Specifications(
        problem=Problem.REPRESENTATION, resolution=Resolution.CHUNK, duration=5.0
    )


def _random_segmentation_model(detects_speech: bool) -> PyanNet:
    """PyanNet with its task-dependent classifier already built, as after training."""
    model = PyanNet(lstm=SEGMENTATION_LSTM, linear=SEGMENTATION_LINEAR)
    model.specifications = _segmentation_specifications()
    model.build()
    if not detects_speech:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.zero_()
            model.classifier.bias[EMPTY_POWERSET_CLASS] = 1.0
    return model


def _save_model(model: Model, specifications: Specifications, folder: Path) -> None:
    """Save `model` the way `Model.from_pretrained(folder)` expects to find it.

    Mirrors pyannote's own conversion script (pyannote/audio/models/embedding/wespeaker/
    convert.py), plus the hyper-parameters, which PyanNet needs to rebuild non-default blocks.
    """
    folder.mkdir(parents=True, exist_ok=True)
    model.specifications = specifications
    checkpoint = {
        "state_dict": model.state_dict(),
        "hyper_parameters": dict(model.hparams),
        "pytorch-lightning_version": lightning.__version__,
    }
    model.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, folder / "pytorch_model.bin")


def _save_random_plda(folder: Path, rng: np.random.Generator) -> None:
    """Write `xvec_transform.npz` and `plda.npz` with the keys and shapes pyannote reads.

    See `vbx_setup` in pyannote/audio/utils/vbx.py: `tr` must be invertible and `psi` positive
    for the within- and between-class covariances it derives to be positive definite.
    """
    folder.mkdir(parents=True, exist_ok=True)
    lda, _ = np.linalg.qr(rng.standard_normal((EMBEDDING_DIMENSION, LDA_DIMENSION)))
    np.savez(
        folder / "xvec_transform.npz",
        mean1=0.01 * rng.standard_normal(EMBEDDING_DIMENSION),
        mean2=0.01 * rng.standard_normal(LDA_DIMENSION),
        lda=lda,
    )
    transform, _ = np.linalg.qr(rng.standard_normal((LDA_DIMENSION, LDA_DIMENSION)))
    np.savez(
        folder / "plda.npz",
        mu=0.01 * rng.standard_normal(LDA_DIMENSION),
        tr=transform,
        psi=np.geomspace(10.0, 0.1, LDA_DIMENSION),
    )


def _write_config(path: Path) -> None:
    """Write a pyannote.audio 4 `config.yaml` shaped like community-1's.

    `$model/<subfolder>` entries are resolved by `Pipeline.from_pretrained` against the
    directory the config was loaded from, so the directory can be moved or copied freely.
    """
    config = {
        "dependencies": {"pyannote.audio": pyannote_audio_version},
        "pipeline": {
            "name": "pyannote.audio.pipelines.SpeakerDiarization",
            "params": {
                "segmentation": "$model/segmentation",
                "embedding": "$model/embedding",
                "plda": "$model/plda",
                "clustering": "VBxClustering",
                "embedding_exclude_overlap": True,
                "segmentation_batch_size": 32,
                "embedding_batch_size": 32,
            },
        },
        "params": PIPELINE_HYPER_PARAMETERS,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
