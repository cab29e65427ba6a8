"""The device the models run on, and the loud failure when a machine declares a GPU that torch
cannot use (a torch built for a newer CUDA than the driver's).

This machine has no GPU, so the real torch really reports CUDA unavailable; the tests declare a
GPU the way the NVIDIA container runtime does, with NVIDIA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.devices import expected_reason
from whosaid.config import ModelSettings, get_model_settings
from whosaid.engine import Engine
from whosaid.errors import ModelLoadError
from whosaid.runtime.device import cuda_fix, is_out_of_memory, nvidia_driver_version, resolve_device

DEVICE_LOGGER = "whosaid.runtime.device"

# Fixtures `no_declared_gpu` and `device_model` come from tests/support/devices.py (see conftest.py).
pytestmark = pytest.mark.usefixtures("no_declared_gpu")


def device_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == DEVICE_LOGGER and r.levelno == logging.ERROR]


def test_driver_version_is_unknown_without_nvidia_smi_or_the_kernel_module() -> None:
    assert nvidia_driver_version() == "unknown"


@pytest.mark.parametrize("visible", ["all", "0", "GPU-5ad1c8f0-2f07-4b8e-9d5e-0123456789ab"])
def test_auto_on_a_declared_gpu_logs_versions_and_fix_once_and_runs_on_cpu(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, device_model: Path, visible: str
) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", visible)
    caplog.set_level(logging.INFO)
    engine = Engine.from_settings(ModelSettings(asr_model=str(device_model), device="auto"))
    assert engine.recognizer.model.device.type == "cpu"
    errors = device_errors(caplog)
    # once, although the loaders ask for the device several times
    assert len(errors) == 1, errors
    assert errors[0] == f"DEVICE=auto runs on the CPU: {expected_reason(f'NVIDIA_VISIBLE_DEVICES={visible}')}"
    runtime = engine.runtime
    assert (runtime.device, runtime.dtype, runtime.attn_implementation) == ("cpu", "float32", "sdpa")
    assert runtime.gpu_unusable == expected_reason(f"NVIDIA_VISIBLE_DEVICES={visible}")


@pytest.mark.parametrize("visible", [None, "", "void", "none", "NONE"])
def test_auto_without_a_declared_gpu_runs_on_cpu_quietly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, visible: str | None
) -> None:
    if visible is not None:
        monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", visible)
    caplog.set_level(logging.INFO)
    assert ModelSettings(asr_model="unused", device="auto").resolved_device() == "cpu"
    assert device_errors(caplog) == []


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:1"])
def test_cuda_refuses_to_start_on_a_declared_gpu_torch_cannot_use(
    monkeypatch: pytest.MonkeyPatch, device_model: Path, device: str
) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    with pytest.raises(ModelLoadError) as raised:
        Engine.from_settings(ModelSettings(asr_model=str(device_model), device=device))
    message = str(raised.value)
    assert message == f"DEVICE={device} cannot start: {expected_reason('NVIDIA_VISIBLE_DEVICES=all')}"
    assert "cannot load the ASR model" not in message  # said as what it is, not as a model problem


def test_cuda_without_any_gpu_says_none_is_visible() -> None:
    with pytest.raises(ModelLoadError) as raised:
        resolve_device("cuda")
    assert str(raised.value) == (
        f"DEVICE=cuda cannot start: {expected_reason('no NVIDIA GPU is visible to this container')}"
    )


@pytest.mark.parametrize(
    "torch_cuda, fix",
    [
        (
            "13.0",
            "install a torch built for the driver's CUDA version, e.g. torch==2.10.0 and "
            "torchaudio==2.10.0 (CUDA 12.8, PyPI's default Linux wheels), or upgrade the NVIDIA "
            "driver to the 580 series or newer",
        ),
        (
            "12.8",
            "this torch needs an NVIDIA driver that runs CUDA 12 (the 525 series or newer) and a "
            "container that is given the GPU (nvidia-smi lists it there); with an older driver "
            "install a torch built for the driver's CUDA version",
        ),
        (
            None,
            "install a CUDA build of torch, e.g. torch==2.10.0 and torchaudio==2.10.0 "
            "(CUDA 12.8, PyPI's default Linux wheels)",
        ),
    ],
)
def test_the_fix_depends_on_the_cuda_torch_was_built_for(torch_cuda, fix) -> None:
    assert cuda_fix(torch_cuda) == fix


def test_the_handler_refuses_to_start_on_cuda_that_torch_cannot_use(
    monkeypatch: pytest.MonkeyPatch, device_model: Path
) -> None:
    from handler import EndpointHandler

    monkeypatch.setenv("ASR_MODEL", str(device_model))
    monkeypatch.setenv("DEVICE", "cuda")
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    for name in ("ASSISTANT_MODEL", "DIARIZATION_MODEL"):
        monkeypatch.delenv(name, raising=False)
    get_model_settings.cache_clear()
    try:
        with pytest.raises(ModelLoadError, match=r"^DEVICE=cuda cannot start: torch cannot use the GPU"):
            EndpointHandler("/repository")
    finally:
        get_model_settings.cache_clear()


def test_the_handler_logs_device_dtype_and_attention_at_start_up(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, device_model: Path
) -> None:
    from handler import EndpointHandler

    monkeypatch.setenv("ASR_MODEL", str(device_model))
    monkeypatch.setenv("DEVICE", "cpu")
    for name in ("ASSISTANT_MODEL", "DIARIZATION_MODEL"):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.INFO)
    get_model_settings.cache_clear()
    try:
        EndpointHandler("/repository")
    finally:
        get_model_settings.cache_clear()
    messages = [r.getMessage() for r in caplog.records if r.name == "handler"]
    assert messages == [
        f"whosaid handler ready: device=cpu dtype=float32 attn_implementation=sdpa asr_model={device_model}"
    ]


def test_out_of_memory_is_known_by_its_type_and_by_its_text_only_where_torch_gives_no_type() -> None:
    import torch

    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    # MPS's allocator, and a CUDA call that fails outside the allocator: plain RuntimeErrors.
    assert is_out_of_memory(RuntimeError("MPS backend out of memory (MPS allocated: 7.64 GiB)"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_out_of_memory(ValueError("the tokenizer ran out of memory slots"))
