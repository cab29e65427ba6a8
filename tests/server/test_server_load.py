"""Load: more concurrent clients than the server has job slots and queue places, against the real
server (subprocess, tiny random Whisper). No 5xx; the overflow gets 429 with Retry-After; every
accepted request completes; /health answers fast throughout. Bounded in clients, rounds and
time, loopback only."""

from __future__ import annotations

import concurrent.futures
import re
import threading
import time
from collections import Counter
from typing import Iterator

import pytest
import requests

from tests.support.audio_files import encode
from tests.support.server import cpu_server

# Slow (a real server process under load): `make test-fast` leaves them to the full suite.
pytestmark = pytest.mark.slow

MAX_CONCURRENT_JOBS = 1
MAX_QUEUE = 2
CLIENTS = 10  # more than the 3 slot and queue places
ROUNDS = 3
HEALTH_BUDGET_S = 0.2
HEALTH_INTERVAL_S = 0.02


@pytest.fixture(scope="module")
def server(tiny_whisper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "ASR_MODEL": str(tiny_whisper("server-load", seed=7)),
        "MAX_CONCURRENT_JOBS": str(MAX_CONCURRENT_JOBS),
        "MAX_QUEUE": str(MAX_QUEUE),
        "API_KEY": "",
    }
    with cpu_server(tmp_path_factory, "server-load", env) as url:
        yield url


@pytest.fixture(scope="module")
def clip(sample_audio) -> bytes:
    return encode(sample_audio.samples[: 8 * 16_000], 16_000, "wav")


class HealthProbe:
    """Polls /health from its own thread and keeps every latency."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.latencies_s: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "HealthProbe":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        with requests.Session() as session:
            while not self._stop.wait(HEALTH_INTERVAL_S):
                started = time.perf_counter()
                try:
                    status = session.get(f"{self.url}/health", timeout=5).status_code
                except requests.RequestException as error:
                    self.failures.append(repr(error))
                    continue
                self.latencies_s.append(time.perf_counter() - started)
                if status != 200:
                    self.failures.append(f"status {status}")


def test_overload_is_refused_with_429_and_everything_accepted_completes(server: str, clip: bytes) -> None:
    barrier = threading.Barrier(CLIENTS)

    def client(_: int) -> requests.Response:
        barrier.wait(timeout=30)  # all clients at once: the point is to overflow the queue
        return requests.post(f"{server}/", data=clip, headers={"Content-Type": "audio/wav"}, timeout=120)

    statuses: Counter[int] = Counter()
    started = time.monotonic()
    with HealthProbe(server) as probe, concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        for _ in range(ROUNDS):
            responses = list(pool.map(client, range(CLIENTS)))
            round_statuses = Counter(response.status_code for response in responses)
            assert set(round_statuses) <= {200, 429}, round_statuses
            # Every place (running or waiting) was taken and its request completed.
            assert round_statuses[200] >= MAX_CONCURRENT_JOBS + MAX_QUEUE
            for response in responses:
                if response.status_code == 200:
                    assert response.json()["duration"] == 8.0
                else:
                    assert int(response.headers["Retry-After"]) >= 1
                    assert response.json()["error"]["code"] == "queue_full"
            statuses.update(round_statuses)
    elapsed_s = time.monotonic() - started

    assert statuses[429] > 0, "the clients never overflowed the queue"
    assert not probe.failures
    assert len(probe.latencies_s) >= 10, f"only {len(probe.latencies_s)} health checks in {elapsed_s:.1f} s"
    assert max(probe.latencies_s) < HEALTH_BUDGET_S, sorted(probe.latencies_s)[-5:]

    metrics = requests.get(f"{server}/metrics", timeout=10).text
    assert _sample(metrics, "whosaid_queue_depth") == 0 and _sample(metrics, "whosaid_jobs_running") == 0
    for status, count in statuses.items():
        assert _sample(metrics, f'whosaid_http_requests_total{{method="POST",route="/",status="{status}"}}') == count


def _sample(metrics: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", metrics, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))
