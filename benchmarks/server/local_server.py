"""The local server the load tests run against: `python -m whosaid serve` on a free loopback port,
started with the chosen models, waited for until /ready, stopped afterwards."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_READY_TIMEOUT_S = 600  # model loading: seconds on a warm disk, minutes for Hub downloads
SERVER_STOP_TIMEOUT_S = 30


def memory_mb(pid: int) -> dict[str, float]:
    """A process's VmRSS (now) and VmHWM (peak) from /proc, in MiB."""
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status if line.startswith(("VmRSS", "VmHWM")))
    return {name: int(value.split()[0]) / 1024 for name, value in fields.items()}


def reset_peak(pid: int) -> None:
    """Set a process's VmHWM (its peak) to its VmRSS now, so that the next peak read is a request's."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalServer:
    """`python -m whosaid serve` on 127.0.0.1, started and stopped by this script only."""

    process: subprocess.Popen
    base_url: str
    log_path: Path

    def log_tail(self, characters: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:] if self.log_path.is_file() else ""

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown
        try:
            self.process.wait(timeout=SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=SERVER_STOP_TIMEOUT_S)


def start_server(
    model: str, *, assistant: Optional[str], diarization: Optional[str], port: int, log_path: Path,
    extra_env: dict[str, str],
) -> LocalServer:
    # Empty values override whatever the caller's shell exports, so only the models asked for load.
    env = dict(
        os.environ,
        ASR_MODEL=model,
        ASSISTANT_MODEL=assistant or "",
        DIARIZATION_MODEL=diarization or "",
        PYANNOTE_METRICS_ENABLED="false",
        **extra_env,
    )
    env.pop("API_KEY", None)  # a local benchmark server needs no authentication
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "whosaid", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    return LocalServer(process, f"http://127.0.0.1:{port}", log_path)


def start_live_caption_server(model: str, name: str, extra_env: Optional[dict[str, str]] = None) -> LocalServer:
    """The live-caption benchmarks' server: `model`, the built-in diarizer, OpenMP threads that
    sleep when idle, its log in /tmp/whosaid-`name`-<time>.log."""
    return start_server(
        model,
        assistant=None,
        diarization="builtin",
        port=free_port(),
        log_path=Path("/tmp") / f"whosaid-{name}-{time.time():.0f}.log",
        extra_env={"OMP_WAIT_POLICY": "PASSIVE", **(extra_env or {})},
    )


def wait_until_ready(server: LocalServer, timeout_s: float = SERVER_READY_TIMEOUT_S) -> float:
    """Poll /ready until it answers 200; fail early when the server exits or reports that its
    models failed to load. Returns the seconds it took."""
    started = time.monotonic()
    last = "no answer yet"
    while time.monotonic() - started < timeout_s:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"the server exited with {server.process.returncode} before it was ready:\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(f"{server.base_url}/ready", timeout=5) as response:
                if response.status == 200:
                    return time.monotonic() - started
        except urllib.error.HTTPError as error:
            body = error.read().decode(errors="replace")
            last = f"HTTP {error.code}: {body[:300]}"
            if "model_load_error" in body:
                raise RuntimeError(f"the server's models failed to load: {last}\n{server.log_tail()}") from error
        except (urllib.error.URLError, OSError) as error:
            last = str(error)
        time.sleep(1.0)
    raise RuntimeError(f"the server was not ready after {timeout_s:.0f} s ({last}):\n{server.log_tail()}")
