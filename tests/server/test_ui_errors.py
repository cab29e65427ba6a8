"""The web page shows the API's refusals as the API gives them, and keeps working after them: a
file over the upload limit (413), models still loading (503 with its retry time); in a real
headless Chromium against a real server whose models never finish loading (none are needed)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from tests.support.audio_files import encode
from tests.support.browser import Page, chromium
from tests.support.server import threaded_server
from whosaid.errors import ModelLoadError
from whosaid.server.app import create_app
from whosaid.server.settings import ServerSettings
from whosaid.server.state import LOADING_RETRY_AFTER_S


@pytest.fixture(scope="module")
def loading_server() -> Iterator[str]:
    release = threading.Event()

    def never_loads():
        release.wait()
        raise ModelLoadError("the test is over")

    settings = ServerSettings(api_key=None, max_upload_mb=0.05)
    try:
        with threaded_server(create_app(never_loads, settings), wait_ready=False) as url:
            yield url
    finally:
        release.set()


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    with chromium(tmp_path / "profile") as page:
        page.emulate_width(340)
        yield page


def error_after_upload(page: Page, path: Path) -> str:
    page.set_files("#file", path)
    page.evaluate("document.querySelector('#error').hidden = true")
    page.evaluate("document.querySelector('#upload-form').requestSubmit()")
    page.wait_for("!document.querySelector('#error').hidden", timeout_s=30, what="the error")
    return page.evaluate("document.querySelector('#error').textContent")


def test_errors_are_shown_as_the_api_gives_them(loading_server: str, page: Page, tmp_path: Path) -> None:
    page.open(f"{loading_server}/ui")
    # No API key on this server: the form at once, no key asked.
    page.wait_for("!document.querySelector('#upload-form').hidden", timeout_s=10)
    assert page.evaluate("document.querySelector('#key-form').hidden") is True
    # A phone's width: nothing wider than it.
    assert page.evaluate("document.documentElement.clientWidth") == 340
    assert page.evaluate("document.documentElement.scrollWidth") == 340

    big = tmp_path / "big.wav"
    big.write_bytes(encode(np.zeros(16_000 * 3, dtype=np.float32), 16_000, "wav"))  # 96 kB > 0.05 MB
    message = error_after_upload(page, big)
    assert message.startswith("Error 413 (payload_too_large): "), message

    small = tmp_path / "small.wav"
    small.write_bytes(encode(np.zeros(16_000 // 2, dtype=np.float32), 16_000, "wav"))  # 16 kB
    message = error_after_upload(page, small)
    assert message == (
        "Error 503 (model_loading): the models are still loading; retry shortly."
        f" Retry in {LOADING_RETRY_AFTER_S} s."
    )
    # The page still works: the form is there to try again.
    assert page.evaluate("document.querySelector('#submit').disabled") is False
    assert page.evaluate("document.querySelector('#viewer').hidden") is True
