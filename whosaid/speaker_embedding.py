"""Speaker embeddings from a GE2E speaker encoder whose pretrained weights ship inside a PyPI wheel.

`resemblyzer` (installed without its dependencies: only its weights file is read) carries a
GE2E encoder trained on LibriSpeech, VoxCeleb 1 and 2: three LSTM layers over 40-band mel
power spectra (25 ms windows every 10 ms), whose last hidden state is projected to a
256-dimensional, L2-normalised voice embedding. The network and its mel front end are rebuilt
here on torch alone, so no download and no token are needed, and many stretches of audio are
embedded in one batched LSTM call.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from whosaid.config import WHISPER_SAMPLE_RATE_HZ
from whosaid.errors import ModelLoadError

MEL_WINDOW_SAMPLES = 400  # 25 ms at 16 kHz
MEL_HOP_SAMPLES = 160  # 10 ms at 16 kHz: one mel frame every 10 ms
MEL_BANDS = 40
EMBEDDING_SIZE = 256
WEIGHTS_PACKAGE = "resemblyzer"
WEIGHTS_FILE = "pretrained.pt"


def frames_per_second() -> float:
    return WHISPER_SAMPLE_RATE_HZ / MEL_HOP_SAMPLES


def weights_path() -> Path:
    """The encoder weights inside the installed `resemblyzer` wheel, found without importing
    the package (its `__init__` needs librosa and webrtcvad, which this project does not use)."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / WEIGHTS_FILE
        if path.is_file():
            return path
    raise ModelLoadError(
        "the built-in diarizer needs the speaker-encoder weights of the resemblyzer wheel: "
        "`pip install --no-deps resemblyzer==0.1.4` (requirements-diarizer.txt)"
    )


@functools.lru_cache(maxsize=1)
def _mel_filterbank() -> np.ndarray:
    """Slaney-style mel filters (the librosa default the encoder was trained with):
    (MEL_BANDS, MEL_WINDOW_SAMPLES // 2 + 1)."""

    def hz_to_mel(hz: np.ndarray) -> np.ndarray:
        hz = np.asarray(hz, dtype=np.float64)
        linear = hz / (200.0 / 3)
        logarithmic = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
        return np.where(hz >= 1000.0, logarithmic, linear)

    def mel_to_hz(mel: np.ndarray) -> np.ndarray:
        mel = np.asarray(mel, dtype=np.float64)
        linear = mel * (200.0 / 3)
        logarithmic = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
        return np.where(mel >= 15.0, logarithmic, linear)

    fft_hz = np.linspace(0, WHISPER_SAMPLE_RATE_HZ / 2, MEL_WINDOW_SAMPLES // 2 + 1)
    edges_hz = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(WHISPER_SAMPLE_RATE_HZ / 2), MEL_BANDS + 2))
    widths_hz = np.diff(edges_hz)
    ramps = edges_hz[:, None] - fft_hz[None, :]
    lower = -ramps[:-2] / widths_hz[:-1, None]
    upper = ramps[2:] / widths_hz[1:, None]
    filters = np.maximum(0.0, np.minimum(lower, upper))
    filters *= (2.0 / (edges_hz[2:] - edges_hz[:-2]))[:, None]
    return filters.astype(np.float32)


def mel_power_frames(samples: np.ndarray) -> np.ndarray:
    """Mel power spectrum of 16 kHz samples, one row every 10 ms: (frames, MEL_BANDS), float32.
    Frames are centred on multiples of the hop (zero padding at the edges), as the encoder's
    training front end computed them."""
    import torch

    waveform = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))
    if waveform.numel() < MEL_WINDOW_SAMPLES // 2 + 1:
        waveform = torch.nn.functional.pad(waveform, (0, MEL_WINDOW_SAMPLES // 2 + 1 - waveform.numel()))
    spectrum = torch.stft(
        waveform,
        n_fft=MEL_WINDOW_SAMPLES,
        hop_length=MEL_HOP_SAMPLES,
        window=torch.hann_window(MEL_WINDOW_SAMPLES),
        center=True,
        pad_mode="constant",
        return_complex=True,
    )  # (freq bins, frames)
    power = spectrum.real**2 + spectrum.imag**2
    return (torch.from_numpy(_mel_filterbank()) @ power).T.contiguous().numpy()


class SpeakerEncoder:
    """The GE2E network: `embed(list of mel frame arrays)` -> (n, 256) unit vectors."""

    def __init__(self, network: Any) -> None:
        self.network = network

    @classmethod
    def load(cls, device: str = "cpu") -> "SpeakerEncoder":
        return cls(_load_network(str(weights_path()), device))

    def embed(self, mel_segments: Sequence[np.ndarray], *, batch_size: int = 256) -> np.ndarray:
        """One embedding per mel segment (each (frames, MEL_BANDS), any length >= 1 frame), in
        batches of `batch_size` so memory stays bounded however many segments there are."""
        import torch
        from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

        if not mel_segments:
            return np.zeros((0, EMBEDDING_SIZE), np.float32)
        device = self.network.linear.weight.device
        embeddings = []
        with torch.inference_mode():
            for first in range(0, len(mel_segments), batch_size):
                batch = [torch.from_numpy(mel) for mel in mel_segments[first : first + batch_size]]
                lengths = torch.tensor([len(mel) for mel in batch])
                padded = pad_sequence(batch, batch_first=True).to(device)  # (batch, frames, bands)
                packed = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
                _, (hidden, _) = self.network.lstm(packed)  # hidden: (layers, batch, 256)
                raw = torch.relu(self.network.linear(hidden[-1]))
                embeddings.append(torch.nn.functional.normalize(raw, dim=1).float().cpu().numpy())
        return np.concatenate(embeddings)


@functools.lru_cache(maxsize=2)
def _load_network(path: str, device: str) -> Any:
    import torch

    network = torch.nn.Module()
    network.lstm = torch.nn.LSTM(MEL_BANDS, 256, 3, batch_first=True)
    network.linear = torch.nn.Linear(256, EMBEDDING_SIZE)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        missing, unexpected = network.load_state_dict(checkpoint["model_state"], strict=False)
    except Exception as error:  # noqa: BLE001 - unreadable file, wrong format
        raise ModelLoadError(f"cannot read the speaker-encoder weights {path}: {error}") from error
    # The checkpoint also holds GE2E's training-only similarity scale and bias.
    if missing or any(not name.startswith("similarity_") for name in unexpected):
        raise ModelLoadError(
            f"{path} is not the GE2E speaker encoder this project expects "
            f"(missing {missing}, unexpected {unexpected})"
        )
    return network.to(device).eval()
