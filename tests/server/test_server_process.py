"""The server process over its life: `python -m whosaid serve` (real Uvicorn, a tiny random-weight
Whisper). Memory goes back after a long request; on SIGTERM with one long job running and one
queued, every client gets an answer and the process exits within SHUTDOWN_GRACE_S, before a
platform's own grace period would kill it mid-request."""

from __future__ import annotations

import concurrent.futures
import signal
import time

import numpy as np
import pytest
import requests

from tests.support.audio_files import encode
from tests.support.server import server_subprocess, wait_until
from whosaid.server.errors import ErrorResponse

# Slow (real server processes started and signalled): `make test-fast` leaves them to the full suite.
pytestmark = pytest.mark.slow

GRACE_S = 6.0
#: Interpreter and torch teardown after Uvicorn has stopped, on a busy two-core machine.
EXIT_SLACK_S = 3.0


def metric(url: str, name: str) -> float:
    for line in requests.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def post(url: str, body: bytes, query: str = "") -> requests.Response:
    return requests.post(f"{url}/?{query}", data=body, headers={"Content-Type": "audio/flac"}, timeout=120)


def resident_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_memory_goes_back_after_a_long_request(tiny_whisper, sample_audio, tmp_path) -> None:
    env = {"ASR_MODEL": str(tiny_whisper("memory-main", seed=10)), "DEVICE": "cpu"}
    short_audio = encode(sample_audio.samples[7 * 16_000 : 10 * 16_000], 16_000, "flac")
    long_audio = encode(np.tile(sample_audio.samples, 8), 16_000, "flac")  # 4 minutes
    with server_subprocess(env, tmp_path / "server.log") as (url, process):
        assert post(url, short_audio, "language=en").status_code == 200  # warm-up allocations
        before_mb = resident_mb(process.pid)
        response = post(url, long_audio, "language=en")
        assert response.status_code == 200 and response.json()["duration"] == 240.0
        after_mb = resident_mb(process.pid)
    # Without returning free heap pages the process kept ~230 MB more after this request.
    assert after_mb - before_mb < 80, f"{before_mb:.0f} MB before, {after_mb:.0f} MB after"


def test_sigterm_answers_the_running_and_the_queued_job_and_exits_within_the_grace_period(
    tiny_whisper, sample_audio, tmp_path
) -> None:
    env = {
        "ASR_MODEL": str(tiny_whisper("shutdown-main", seed=9)),
        "DEVICE": "cpu",
        "SHUTDOWN_GRACE_S": str(GRACE_S),
        "MAX_QUEUE": "2",
    }
    # 3 minutes of speech in 5 s windows decoded one at a time: ~1 min of work, far longer than
    # the grace period; each window ~1.5 s, well inside the half of it kept for answering.
    long_audio = encode(np.tile(sample_audio.samples, 6), 16_000, "flac")
    short_audio = encode(sample_audio.samples[7 * 16_000 : 10 * 16_000], 16_000, "flac")
    with server_subprocess(env, tmp_path / "server.log") as (url, process):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            running = pool.submit(post, url, long_audio, "batch_size=1&chunk_length_s=5&language=en")
            wait_until(lambda: metric(url, "whosaid_jobs_running") == 1, 60, "the long job to start")
            queued = pool.submit(post, url, short_audio, "language=en")
            wait_until(lambda: metric(url, "whosaid_queue_depth") == 1, 30, "the short job to queue")
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            answered_after_s = {}
            for name, future in (("queued", queued), ("running", running)):
                future.result(timeout=60)
                answered_after_s[name] = round(time.monotonic() - signalled, 2)
            answers = {"running": running.result(), "queued": queued.result()}
            process.wait(timeout=GRACE_S + EXIT_SLACK_S + 30)
            exited_after_s = time.monotonic() - signalled
    print(f"\nSIGTERM: answered after {answered_after_s} s, exited after {exited_after_s:.2f} s (grace {GRACE_S} s)")
    for name, response in answers.items():
        assert response.status_code == 503, (name, response.text)
        error = ErrorResponse.model_validate(response.json()).error
        assert error.code == "shutting_down" and error.type == "server_error", name
        assert "the server is shutting down" in error.message
        assert int(response.headers["Retry-After"]) >= 1
    assert exited_after_s < GRACE_S + EXIT_SLACK_S, f"exited {exited_after_s:.1f} s after SIGTERM"
