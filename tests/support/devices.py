"""What the device tests expect: this machine's real torch and driver, no GPU declared."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from whosaid.runtime.device import declared_gpu, nvidia_driver_version


def declare_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test declares its GPU itself (NVIDIA_VISIBLE_DEVICES, as the NVIDIA container runtime
    does); the machine the tests run on has neither a GPU torch can use nor NVIDIA device files."""
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    assert not torch.cuda.is_available(), "these tests need a machine where torch cannot use CUDA"
    assert declared_gpu() is None, "these tests need a machine without NVIDIA device files"


@pytest.fixture
def no_declared_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the device tests (pytestmark usefixtures): no test inherits a declared GPU."""
    declare_no_gpu(monkeypatch)


@pytest.fixture(scope="module")
def device_model(tiny_whisper) -> Path:
    """A tiny random Whisper for the device tests."""
    return tiny_whisper("device-main", seed=5)


def expected_reason(declared: str) -> str:
    """The unusable-GPU message for this machine's real torch (the CUDA 12.8 build the
    requirements pin, see test_requirements.py) and driver."""
    return (
        f"torch cannot use the GPU ({declared}; torch.cuda.is_available() is False): torch "
        f"{torch.__version__} is built for CUDA {torch.version.cuda}, the NVIDIA driver is "
        f"{nvidia_driver_version()}. Fix: this torch needs an NVIDIA driver that runs CUDA 12 (the "
        "525 series or newer) and a container that is given the GPU (nvidia-smi lists it there); "
        "with an older driver install a torch built for the driver's CUDA version. On a machine "
        "without a GPU set DEVICE=cpu."
    )
