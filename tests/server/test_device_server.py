"""The server reports where the models run: /ready (device, dtype, attention, and a warning
when DEVICE=auto fell back to the CPU of a machine whose GPU torch cannot use) and the
whosaid_model_info metric, through a real Uvicorn server on loopback with a tiny real model."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from tests.support.devices import expected_reason
from tests.support.server import threaded_server, wait_until
from whosaid.config import ModelSettings
from whosaid.server.app import create_app
from whosaid.server.settings import ServerSettings

# Fixtures `no_declared_gpu` and `device_model` come from tests/support/devices.py (see conftest.py).
pytestmark = pytest.mark.usefixtures("no_declared_gpu")


def server_settings() -> ServerSettings:
    return ServerSettings(api_key="device-test-key", max_concurrent_jobs=1, max_queue=1)


AUTH = {"Authorization": "Bearer device-test-key"}


def model_info_lines(url: str) -> list[str]:
    text = requests.get(f"{url}/metrics", headers=AUTH, timeout=5).text
    return [line for line in text.splitlines() if line.startswith("whosaid_model_info")]


def test_ready_and_metrics_report_device_dtype_and_attention(device_model: Path) -> None:
    app = create_app(ModelSettings(asr_model=str(device_model), device="cpu"), server_settings())
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
            f'whosaid_model_info{{asr_model="{device_model}",attn_implementation="sdpa",device="cpu",'
            'dtype="float32"} 1.0'
        ]


def test_ready_warns_when_auto_fell_back_to_cpu_on_a_declared_gpu(
    monkeypatch: pytest.MonkeyPatch, device_model: Path
) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    app = create_app(ModelSettings(asr_model=str(device_model), device="auto"), server_settings())
    with threaded_server(app) as url:
        body = requests.get(f"{url}/ready", timeout=5).json()
        assert body["device"] == "cpu"
        assert body["warnings"] == [expected_reason("NVIDIA_VISIBLE_DEVICES=all")]
        assert 'device="cpu"' in model_info_lines(url)[0]


def test_ready_is_503_with_the_reason_when_cuda_cannot_be_used(
    monkeypatch: pytest.MonkeyPatch, device_model: Path
) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "0")
    app = create_app(ModelSettings(asr_model=str(device_model), device="cuda"), server_settings())
    with threaded_server(app, wait_ready=False) as url:

        def failed() -> bool:
            response = requests.get(f"{url}/ready", timeout=5)
            return response.status_code == 503 and response.json()["error"]["code"] == "model_load_error"

        wait_until(failed, 30, "the load to fail")
        error = requests.get(f"{url}/ready", timeout=5).json()["error"]
        assert error["message"] == f"DEVICE=cuda cannot start: {expected_reason('NVIDIA_VISIBLE_DEVICES=0')}"
        assert model_info_lines(url) == []  # nothing loaded, nothing to describe
        assert requests.get(f"{url}/health", timeout=5).status_code == 200
