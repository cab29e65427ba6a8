"""The device the models run on, and the loud failure when a machine declares a GPU that torch
cannot use (a torch built for a newer CUDA than the driver's).

This machine has no GPU, so the real torch really reports CUDA unavailable; the tests declare a
GPU the way the NVIDIA container runtime does, with NVIDIA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import requests
import torch

from tests.support.server import threaded_server, wait_until
from whosaid.config import ModelSettings, get_model_settings
from whosaid.device import declared_gpu, nvidia_driver_version, resolve_device
from whosaid.engine import Engine
from whosaid.errors import ModelLoadError
from whosaid.server import ServerSettings, create_app

DEVICE_LOGGER = "whosaid.device"


@pytest.fixture(autouse=True)
def no_declared_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test declares its GPU itself; the machine it runs on has neither a GPU nor torch CUDA."""
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    assert not torch.cuda.is_available(), "these tests need a machine where torch cannot use CUDA"
    assert declared_gpu() is None, "these tests need a machine without NVIDIA device files"


@pytest.fixture(scope="module")
def tiny(tiny_whisper) -> Path:
    return tiny_whisper("device-main", seed=5)


def expected_reason(declared: str) -> str:
    """The message's core, built from the real torch and driver of this machine."""
    return (
        f"torch cannot use the GPU ({declared}; torch.cuda.is_available() is False): torch "
        f"{torch.__version__} is built for CUDA {torch.version.cuda}, the NVIDIA driver is "
        f"{nvidia_driver_version()}. Fix: install a torch built for the driver's CUDA version, "
        "e.g. torch==2.10.0 and torchaudio==2.10.0 (CUDA 12.8"
    )


def device_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == DEVICE_LOGGER and r.levelno == logging.ERROR]


def test_driver_version_is_unknown_without_nvidia_smi_or_the_kernel_module() -> None:
    assert nvidia_driver_version() == "unknown"


@pytest.mark.parametrize("visible", ["all", "0", "GPU-5ad1c8f0-2f07-4b8e-9d5e-0123456789ab"])
def test_auto_on_a_declared_gpu_logs_versions_and_fix_once_and_runs_on_cpu(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tiny: Path, visible: str
) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", visible)
    caplog.set_level(logging.INFO)
    engine = Engine.from_settings(ModelSettings(asr_model=str(tiny), device="auto"))
    assert engine.recognizer.model.device.type == "cpu"
    errors = device_errors(caplog)
    # once, although the loaders ask for the device several times
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"DEVICE=auto runs on the CPU: {expected_reason(f'NVIDIA_VISIBLE_DEVICES={visible}')}")
    assert errors[0].endswith("On a machine without a GPU set DEVICE=cpu.")
    runtime = engine.runtime
    assert (runtime.device, runtime.dtype, runtime.attn_implementation) == ("cpu", "float32", "sdpa")
    assert runtime.gpu_unusable is not None and expected_reason(f"NVIDIA_VISIBLE_DEVICES={visible}") in runtime.gpu_unusable


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
    monkeypatch: pytest.MonkeyPatch, tiny: Path, device: str
) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    with pytest.raises(ModelLoadError) as raised:
        Engine.from_settings(ModelSettings(asr_model=str(tiny), device=device))
    message = str(raised.value)
    assert message.startswith(f"DEVICE={device} cannot start: {expected_reason('NVIDIA_VISIBLE_DEVICES=all')}")
    assert "cannot load the ASR model" not in message  # said as what it is, not as a model problem


def test_cuda_without_any_gpu_says_none_is_visible() -> None:
    with pytest.raises(ModelLoadError) as raised:
        resolve_device("cuda")
    assert str(raised.value).startswith(
        f"DEVICE=cuda cannot start: {expected_reason('no NVIDIA GPU is visible to this container')}"
    )


def test_the_handler_refuses_to_start_on_cuda_that_torch_cannot_use(monkeypatch: pytest.MonkeyPatch, tiny: Path) -> None:
    from handler import EndpointHandler

    monkeypatch.setenv("ASR_MODEL", str(tiny))
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
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tiny: Path
) -> None:
    from handler import EndpointHandler

    monkeypatch.setenv("ASR_MODEL", str(tiny))
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
        f"whosaid handler ready: device=cpu dtype=float32 attn_implementation=sdpa asr_model={tiny}"
    ]


# --- the server: /ready and /metrics ---------------------------------------------------------


def server_settings() -> ServerSettings:
    return ServerSettings(api_key="device-test-key", max_concurrent_jobs=1, max_queue=1)


AUTH = {"Authorization": "Bearer device-test-key"}


def model_info_lines(url: str) -> list[str]:
    text = requests.get(f"{url}/metrics", headers=AUTH, timeout=5).text
    return [line for line in text.splitlines() if line.startswith("whosaid_model_info")]


def test_ready_and_metrics_report_device_dtype_and_attention(tiny: Path) -> None:
    app = create_app(ModelSettings(asr_model=str(tiny), device="cpu"), server_settings())
    with threaded_server(app) as url:
        ready = requests.get(f"{url}/ready", timeout=5)
        assert ready.status_code == 200
        body = ready.json()
        assert body.pop("load_duration_s") > 0
        assert body == {
            "status": "ready",
            "device": "cpu",
            "dtype": "float32",
            "attn_implementation": "sdpa",
        }
        assert model_info_lines(url) == [
            f'whosaid_model_info{{asr_model="{tiny}",attn_implementation="sdpa",device="cpu",dtype="float32"}} 1.0'
        ]


def test_ready_warns_when_auto_fell_back_to_cpu_on_a_declared_gpu(monkeypatch: pytest.MonkeyPatch, tiny: Path) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    app = create_app(ModelSettings(asr_model=str(tiny), device="auto"), server_settings())
    with threaded_server(app) as url:
        body = requests.get(f"{url}/ready", timeout=5).json()
        assert body["device"] == "cpu"
        assert len(body["warnings"]) == 1
        assert body["warnings"][0].startswith(expected_reason("NVIDIA_VISIBLE_DEVICES=all"))
        assert 'device="cpu"' in model_info_lines(url)[0]


def test_ready_is_503_with_the_reason_when_cuda_cannot_be_used(monkeypatch: pytest.MonkeyPatch, tiny: Path) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "0")
    app = create_app(ModelSettings(asr_model=str(tiny), device="cuda"), server_settings())
    with threaded_server(app, wait_ready=False) as url:

        def failed() -> bool:
            response = requests.get(f"{url}/ready", timeout=5)
            return response.status_code == 503 and response.json()["error"]["code"] == "model_load_error"

        wait_until(failed, 30, "the load to fail")
        error = requests.get(f"{url}/ready", timeout=5).json()["error"]
        assert error["message"].startswith(f"DEVICE=cuda cannot start: {expected_reason('NVIDIA_VISIBLE_DEVICES=0')}")
        assert model_info_lines(url) == []  # nothing loaded, nothing to describe
        assert requests.get(f"{url}/health", timeout=5).status_code == 200
