"""Kaldi-style log-mel filterbank features for a batch of waveforms at once.

The same computation as `torchaudio.compliance.kaldi.fbank` with CAM++'s settings (80 bins,
25 ms frames every 10 ms, no dither, DC offset removed, pre-emphasis 0.97, Povey window, 512-point
FFT, power spectrum, 20 Hz to Nyquist, frames kept inside the signal), which takes one waveform
per call; here a whole (B, N) batch is one strided view and one FFT.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torchaudio.compliance.kaldi import get_mel_banks

SAMPLE_RATE_HZ = 16_000
FRAME_SAMPLES = 400  # 25 ms at 16 kHz
HOP_SAMPLES = 160  # 10 ms at 16 kHz: one feature frame every 10 ms
FFT_SIZE = 512  # the frame length rounded up to a power of two
NUM_BINS = 80
LOW_FREQUENCY_HZ = 20.0
PREEMPHASIS = 0.97
POVEY_EXPONENT = 0.85


def num_frames(num_samples: int) -> int:
    """Frames of a waveform of `num_samples` samples (none shorter than one frame)."""
    if num_samples < FRAME_SAMPLES:
        return 0
    return 1 + (num_samples - FRAME_SAMPLES) // HOP_SAMPLES


def num_samples_for(frames: int) -> int:
    """The fewest samples that give `frames` frames."""
    return FRAME_SAMPLES + (frames - 1) * HOP_SAMPLES


@functools.lru_cache(maxsize=4)
def _window_and_mel_banks(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The Povey window (FRAME_SAMPLES,) and the mel filters (FFT_SIZE // 2 + 1, NUM_BINS)."""
    window = torch.hann_window(FRAME_SAMPLES, periodic=False, dtype=torch.float64).pow(POVEY_EXPONENT)
    banks, _ = get_mel_banks(NUM_BINS, FFT_SIZE, float(SAMPLE_RATE_HZ), LOW_FREQUENCY_HZ, 0.0, 100.0, -500.0, 1.0)
    banks = F.pad(banks, (0, 1))  # no filter reaches the Nyquist bin
    return window.to(device, torch.float32), banks.T.contiguous().to(device, torch.float32)


def log_mel_fbank(waveforms: torch.Tensor) -> torch.Tensor:
    """(B, N) float waveforms at 16 kHz -> (B, num_frames(N), 80) log-mel energies, float32."""
    window, banks = _window_and_mel_banks(waveforms.device)
    waveforms = waveforms.to(torch.float32)
    if waveforms.shape[0] == 0 or waveforms.shape[-1] < FRAME_SAMPLES:
        return waveforms.new_zeros(waveforms.shape[0], num_frames(waveforms.shape[-1]), NUM_BINS)
    frames = waveforms.unfold(-1, FRAME_SAMPLES, HOP_SAMPLES)  # (B, T, FRAME_SAMPLES)
    frames = frames - frames.mean(dim=-1, keepdim=True)
    previous = torch.cat([frames[..., :1], frames[..., :-1]], dim=-1)
    frames = (frames - PREEMPHASIS * previous) * window
    power = torch.fft.rfft(frames, n=FFT_SIZE).abs().pow(2)  # (B, T, FFT_SIZE // 2 + 1)
    energies = power @ banks
    return energies.clamp(min=torch.finfo(torch.float32).eps).log()
