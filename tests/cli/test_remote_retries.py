"""The remote client's retry rules against a scripted HTTP server on loopback: busy answers
wait for Retry-After (or back off when there is none), 5xx are retried up to --retries times,
client errors fail at once, and a busy server fails the file once --max-wait-s is spent. The
client's sleeps are recorded instead of slept."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, Optional

import pytest

from whosaid.cli.remote import FileJob, RemoteOptions, RemoteTranscriber

ANSWER = {"text": "hello", "chunks": [], "speakers": [], "duration": 1.5}
#: (status, Retry-After header or None)
Script = list[tuple[int, Optional[str]]]


@contextlib.contextmanager
def scripted_server(script: Script) -> Iterator[tuple[str, list[dict]]]:
    """Answers POST / with the script's statuses in turn (200 with ANSWER once it runs out)."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"path": self.path, "auth": self.headers.get("Authorization"), **json.loads(body)})
            status, retry_after = script.pop(0) if script else (200, None)
            payload = ANSWER if status == 200 else {"error": {"message": f"scripted {status}", "code": "x"}}
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def run_one(url: str, tmp_path: Path, **options: object) -> tuple[object, list[float]]:
    audio = tmp_path / "a.wav"
    audio.write_bytes(b"RIFF....")
    sleeps: list[float] = []
    transcriber = RemoteTranscriber(
        RemoteOptions(urls=(url,), api_key="k", parameters={"language": "en"}, **options), sleep=sleeps.append
    )
    return transcriber.transcribe_file(FileJob(audio, tmp_path / "out" / "a.json")), sleeps


def test_busy_and_failing_answers_are_retried_by_the_rules(tmp_path: Path) -> None:
    with scripted_server([(503, None), (503, None), (429, "2"), (500, None), (502, None)]) as (url, received):
        outcome, sleeps = run_one(url, tmp_path)
    assert outcome.error is None and outcome.retries == 5
    assert json.loads((tmp_path / "out" / "a.json").read_text()) == ANSWER
    assert outcome.audio_duration_s == 1.5
    # Busy without Retry-After: backoff 1 s then 2 s (+-25 %); then Retry-After; then 5xx backoff.
    assert 0.75 <= sleeps[0] <= 1.25 and 1.5 <= sleeps[1] <= 2.5 and sleeps[2] == 2.0
    assert 0.75 <= sleeps[3] <= 1.25 and 1.5 <= sleeps[4] <= 2.5
    assert [request["path"] for request in received] == ["/"] * 6
    assert all(r["auth"] == "Bearer k" and r["parameters"] == {"language": "en"} for r in received)


def test_client_errors_fail_at_once_and_5xx_after_the_retries(tmp_path: Path) -> None:
    with scripted_server([(400, None)]) as (url, received):
        outcome, sleeps = run_one(url, tmp_path)
    assert outcome.error == f"{url}: HTTP 400: scripted 400" and len(received) == 1 and sleeps == []
    with scripted_server([(500, None)] * 3) as (url, received):
        outcome, sleeps = run_one(url, tmp_path, retries=2)
    assert outcome.error == f"{url}: HTTP 500: scripted 500 (after 3 failed attempts)"
    assert len(received) == 3 and outcome.retries == 2
    assert not (tmp_path / "out" / "a.json").exists()


def test_a_file_gives_up_once_it_has_waited_max_wait_s(tmp_path: Path) -> None:
    with scripted_server([(429, "30")] * 5) as (url, received):
        outcome, sleeps = run_one(url, tmp_path, max_wait_s=70)
    assert sleeps == [30.0, 30.0] and len(received) == 3
    assert outcome.error is not None and "busy for 60 s, more than --max-wait-s" in outcome.error


@pytest.mark.parametrize("dead_first", [True, False])
def test_a_refused_connection_goes_to_the_other_url(tmp_path: Path, dead_first: bool) -> None:
    from tests.support.server import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    with scripted_server([]) as (url, received):
        urls = (dead, url) if dead_first else (url, dead)
        audio = tmp_path / "a.wav"
        audio.write_bytes(b"RIFF....")
        sleeps: list[float] = []
        transcriber = RemoteTranscriber(RemoteOptions(urls=urls, concurrency=2), sleep=sleeps.append)
        jobs = [FileJob(audio, tmp_path / "out" / f"{index}.json") for index in range(4)]
        summary = transcriber.run(jobs)
    assert summary.done == 4 and summary.failed == 0 and len(received) == 4
    assert all(outcome.url == url for outcome in summary.outcomes)
