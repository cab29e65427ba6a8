"""Real servers on loopback ports for the server tests.

`server_process` starts `python -m whosaid serve` in a subprocess, configured through the
environment as an operator would: the real CLI, the real Uvicorn, real models. It runs torch on
one thread: on a shared two-core machine, torch's default of one thread per core makes its
threads wait for each other, and inference many times slower.

`threaded_server` runs an app built in the test (stub engines, failure injection) under Uvicorn
in a thread of the test process.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_START_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


def answers(url: str, status: int = 200) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == status
    except (requests.ConnectionError, requests.Timeout):  # not listening yet, or busy starting up
        return False


@contextlib.contextmanager
def server_process(
    env: Mapping[str, str], log_path: Path, *, wait_ready: bool = True, unset: Sequence[str] = ()
) -> Iterator[str]:
    """`python -m whosaid serve` on a free loopback port; yields its base URL. `unset` names
    variables of this process's environment the server must not see."""
    with server_subprocess(env, log_path, wait_ready=wait_ready, unset=unset) as (url, _):
        yield url


@contextlib.contextmanager
def cpu_server(tmp_path_factory: Any, name: str, env: Mapping[str, str], *, unset: Sequence[str] = ()) -> Iterator[str]:
    """`server_process` on the CPU with these variables, its log in a fresh temporary folder
    `name` (from pytest's `tmp_path_factory`); yields its base URL."""
    with server_process({"DEVICE": "cpu", **env}, tmp_path_factory.mktemp(name) / "server.log", unset=unset) as url:
        yield url


def tiny_en_with_builtin_diarizer(converted_model: Callable[[str], Path], api_key: str) -> dict[str, str]:
    """A server's variables: whisper-tiny.en's real weights, the built-in diarizer, an API key."""
    return {"ASR_MODEL": str(converted_model("whisper-tiny.en")), "DIARIZATION_MODEL": "builtin", "API_KEY": api_key}


@contextlib.contextmanager
def server_subprocess(
    env: Mapping[str, str],
    log_path: Path,
    *,
    wait_ready: bool = True,
    unset: Sequence[str] = (),
    log_level: str = "warning",
) -> Iterator[tuple[str, subprocess.Popen]]:
    """`server_process`, yielding the process too (to signal it). `log_level="info"` adds
    Uvicorn's access log: one line per answered request."""
    with server_subprocesses([env], [log_path], wait_ready=wait_ready, unset=unset, log_level=log_level) as servers:
        yield servers[0]


@contextlib.contextmanager
def server_subprocesses(
    envs: Sequence[Mapping[str, str]],
    log_paths: Sequence[Path],
    *,
    wait_ready: bool = True,
    unset: Sequence[str] = (),
    log_level: str = "warning",
) -> Iterator[list[tuple[str, subprocess.Popen]]]:
    """Several servers, started together (their start-ups overlap); yields (url, process) each."""
    started: list[tuple[str, subprocess.Popen, Path]] = []
    try:
        for env, log_path in zip(envs, log_paths, strict=True):
            started.append(_start_server(env, log_path, unset=unset, log_level=log_level))
        for url, process, log_path in started:

            def up(url: str = url, process: subprocess.Popen = process, log_path: Path = log_path) -> bool:
                if process.poll() is not None:
                    raise RuntimeError(f"the server exited with {process.returncode}:\n{_tail(log_path)}")
                return answers(f"{url}/ready" if wait_ready else f"{url}/health")

            wait_until(up, SERVER_START_TIMEOUT_S, "the server to start", interval_s=0.2)
        yield [(url, process) for url, process, _ in started]
    finally:
        for _, process, _ in started:
            process.terminate()
        for _, process, _ in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _start_server(
    env: Mapping[str, str], log_path: Path, *, unset: Sequence[str], log_level: str
) -> tuple[str, subprocess.Popen, Path]:
    port = free_port()
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYANNOTE_METRICS_ENABLED": "false",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO_ROOT),
        **env,
    }
    for name in unset:
        full_env.pop(name, None)
    command = [
        sys.executable,
        "-m",
        "whosaid",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        log_level,
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    return f"http://127.0.0.1:{port}", process, log_path


@contextlib.contextmanager
def threaded_server(app: object, *, wait_ready: bool = True) -> Iterator[str]:
    """Uvicorn serving `app` from a thread of this process; yields its base URL."""
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{config.port}"
    try:
        wait_until(lambda: server.started, 30, "uvicorn to start")
        if wait_ready:
            wait_until(lambda: answers(f"{url}/ready"), 30, "the models to load")
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
