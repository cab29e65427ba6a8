"""A real headless Chromium (Debian's `chromium`), driven over the DevTools protocol with the
`websockets` sync client: open a page, evaluate JavaScript, set a file input, click at an
element as a mouse does, wait for a DOM condition, take a screenshot. No driver package."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import requests
from websockets.sync.client import ClientConnection, connect

#: Longest wait for the browser to start, or for one protocol command to answer.
START_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 60.0


class Page:
    """One tab: protocol commands over its websocket."""

    def __init__(self, socket: ClientConnection) -> None:
        self._socket = socket
        self._next_id = 0

    def command(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        self._socket.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while True:
            message = json.loads(self._socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") != self._next_id:
                continue  # an event: not asked for
            if "error" in message:
                raise RuntimeError(f"{method}: {message['error']}")
            return message["result"]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (promises awaited), as JSON."""
        result = self.command("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.command("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && document.body !== null", what=f"{url} to load")

    def wait_for(self, condition: str, *, timeout_s: float = 60.0, what: Optional[str] = None) -> Any:
        """Polls a JavaScript condition until it is truthy; its value. Raises after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                value = self.evaluate(condition)
            except RuntimeError:  # the page is navigating: its context is gone for a moment
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what or condition}")
            time.sleep(0.1)

    def set_files(self, selector: str, *paths: Path) -> None:
        found = self.command(
            "Runtime.evaluate", expression=f"document.querySelector({json.dumps(selector)})"
        )["result"]
        assert "objectId" in found, f"no element {selector}"
        self.command("DOM.setFileInputFiles", files=[str(path) for path in paths], objectId=found["objectId"])

    def type_into(self, selector: str, text: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.evaluate(f"document.querySelector({json.dumps(selector)}).value = ''")
        if text:
            self.command("Input.insertText", text=text)

    def click(self, selector: str) -> None:
        """A mouse click at the middle of the element, scrolled into view first."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            self.command("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def press_enter(self) -> None:
        """The Enter key, as a keyboard sends it to the focused element."""
        self.command("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter", windowsVirtualKeyCode=13,
                     text="\r")
        self.command("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter", windowsVirtualKeyCode=13)

    def emulate_width(self, width_px: int, height_px: int = 800) -> None:
        """A viewport narrower than a headless window can be (a phone's)."""
        self.command(
            "Emulation.setDeviceMetricsOverride", width=width_px, height=height_px, deviceScaleFactor=1, mobile=True
        )

    def screenshot(self, path: Path) -> Path:
        data = self.command("Page.captureScreenshot", format="png")["data"]  # what the window shows
        path.write_bytes(base64.b64decode(data))
        return path


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "Debian's chromium package is a test dependency (make system-deps installs it)"
    return found


@contextlib.contextmanager
def chromium(
    profile_dir: Path, *, width: int = 1100, height: int = 900, microphone: Optional[Path] = None
) -> Iterator[Page]:
    """A headless Chromium with a fresh profile; yields its first tab. `microphone`: a WAV file
    the browser's fake microphone plays (looping), granted without asking. The browser and every
    process it started are ended on exit, whatever happened."""
    profile_dir.mkdir(parents=True, exist_ok=True)
    port_file = profile_dir / "DevToolsActivePort"
    port_file.unlink(missing_ok=True)  # a previous browser's: Chromium writes it once listening
    process = subprocess.Popen(
        [
            chromium_binary(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--mute-audio", "--remote-debugging-port=0",
            f"--user-data-dir={profile_dir}", f"--window-size={width},{height}",
            "--autoplay-policy=no-user-gesture-required",
            *(
                ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 f"--use-file-for-fake-audio-capture={microphone}"]
                if microphone is not None else []
            ),
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: ended together below
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (port_file.exists() and port_file.read_text().strip()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit status {process.poll()})")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        targets = requests.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        tab = next(target for target in targets if target["type"] == "page")
        with connect(tab["webSocketDebuggerUrl"], max_size=None, open_timeout=START_TIMEOUT_S) as socket:
            page = Page(socket)
            page.command("Page.enable")
            page.command("Runtime.enable")
            yield page
    finally:
        _end_process_group(process)


def _end_process_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    finally:  # whatever of the group is left (renderers, a browser that ignored SIGTERM)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
