"""`whosaid transcribe --url ... -j N DIR` against two real server processes on loopback (a tiny
random-weight Whisper), each running one job with no queue, so that 429s happen: every file is
transcribed exactly once (counted in the servers' access logs), busy answers are retried, a
server killed mid-run has its files retried on the other, a file that is not audio fails alone
with a non-zero exit, and --resume skips the outputs that exist."""

from __future__ import annotations

import json
import re
import signal
import threading
from pathlib import Path
from typing import Iterator

import pytest
import requests

from tests.support.audio_files import encode
from tests.support.server import server_subprocesses, wait_until
from whosaid.cli.main import main

# Slow (real server processes, killed and replaced): `make test-fast` leaves them to the full suite.
pytestmark = pytest.mark.slow

FILES = 8
#: A request Uvicorn's access log recorded as answered with `status`.
ANSWERED = r'"POST / HTTP/1\.1" {status}'


@pytest.fixture(scope="module")
def archive(sample_audio, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight 4 s clips of speech in two folders (same names in both: outputs keep the folders)."""
    folder = tmp_path_factory.mktemp("archive")
    for index in range(FILES):
        start = (7 + 2 * index) * 16_000
        path = folder / f"day{index % 2}" / f"call{index // 2}.wav"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(encode(sample_audio.samples[start : start + 4 * 16_000], 16_000, "wav"))
    return folder


@pytest.fixture(scope="module")
def servers(tiny_whisper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[str, object, Path]]]:
    env = {
        "ASR_MODEL": str(tiny_whisper("remote-main", seed=21)),
        "DIARIZATION_MODEL": "none",
        "DEVICE": "cpu",
        "MAX_CONCURRENT_JOBS": "1",
        "MAX_QUEUE": "0",
        "API_KEY": "archive-key",
    }
    folder = tmp_path_factory.mktemp("servers")
    logs = [folder / "a.log", folder / "b.log"]
    with server_subprocesses([env, env], logs, log_level="info") as started:
        yield [(url, process, log) for (url, process), log in zip(started, logs, strict=True)]


def answered(log: Path, status: int) -> int:
    return len(re.findall(ANSWERED.format(status=status), log.read_text(errors="replace")))


def transcriptions(url: str) -> float:
    text = requests.get(f"{url}/metrics", headers={"Authorization": "Bearer archive-key"}, timeout=5).text
    match = re.search(r'^whosaid_transcriptions_total\{decoding="batched"\} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def run_client(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    status = main(["transcribe", "--api-key", "archive-key", "--no-progress", "--language", "en", *argv])
    return status, capsys.readouterr().err


def test_a_file_that_is_not_audio_fails_alone_and_resume_skips_what_is_done(
    capsys, servers, archive: Path, tmp_path: Path
) -> None:
    (url_a, _, log_a), (url_b, _, log_b) = servers
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for index, clip in enumerate(sorted(archive.rglob("*.wav"))[:3]):
        (inputs / f"clip{index}.wav").write_bytes(clip.read_bytes())
    (inputs / "broken.wav").write_bytes(b"RIFF but not really a wave file")
    out = tmp_path / "out"
    urls = ["--url", url_a, "--url", url_b]

    status, err = run_client(capsys, *urls, "-j", "2", "-f", "srt", "-o", str(out), str(inputs))
    assert status == 1
    assert re.search(r"broken\.wav: http://127\.0\.0\.1:\d+: HTTP 400: .*not audio|broken\.wav: .*HTTP 400", err), err
    assert "done 3, failed 1, skipped 0" in err.strip().splitlines()[-1]
    assert sorted(path.name for path in out.iterdir()) == ["clip0.srt", "clip1.srt", "clip2.srt"]
    assert all(path.read_text().startswith("1\n00:00:") for path in out.iterdir())
    # A 400 is not retried: the broken file was sent once.
    assert len(re.findall(r'"POST /v1/audio/transcriptions HTTP/1\.1" 400', log_a.read_text() + log_b.read_text())) == 1

    (out / "clip1.srt").unlink()
    sent_before = answered_v1(log_a) + answered_v1(log_b)
    status, err = run_client(capsys, *urls, "-f", "srt", "--resume", "-o", str(out), str(inputs))
    assert status == 1  # the broken file is still not audio
    assert "done 1, failed 1, skipped 2" in err.strip().splitlines()[-1]
    assert answered_v1(log_a) + answered_v1(log_b) == sent_before + 1
    assert (out / "clip1.srt").read_text().startswith("1\n00:00:")


def answered_v1(log: Path) -> int:
    return len(re.findall(r'"POST /v1/audio/transcriptions HTTP/1\.1" 200', log.read_text(errors="replace")))


def test_arguments_are_checked_before_anything_is_sent(capsys, archive: Path, tmp_path: Path) -> None:
    status, err = run_client(capsys, "--url", "http://127.0.0.1:9", str(archive))
    assert status == 2 and "--url writes one output per file: give --output-dir" in err
    status, err = run_client(capsys, "--url", "127.0.0.1:9", "-o", str(tmp_path), str(archive))
    assert status == 2 and "give an http:// or https:// URL" in err
    status, err = run_client(capsys, "--url", "http://127.0.0.1:9", "-o", str(tmp_path), str(tmp_path))
    assert status == 2 and "holds no audio file" in err


def test_two_servers_every_file_once_busy_retried_and_a_killed_server_replaced(
    capsys, servers, archive: Path, tmp_path: Path
) -> None:
    """Last in this module: it kills one of the module's servers."""
    (url_a, process_a, log_a), (url_b, _, log_b) = servers
    before = {log: answered(log, 200) for log in (log_a, log_b)}
    busy_before = answered(log_a, 429) + answered(log_b, 429)
    b_before = transcriptions(url_b)
    out = tmp_path / "out"
    result: dict[str, object] = {}

    def client() -> None:
        result["status"], result["err"] = run_client(
            capsys, "--url", url_a, "--url", f"{url_b}/", "-j", "4", "-o", str(out), str(archive)
        )

    thread = threading.Thread(target=client)
    thread.start()
    # Server A dies once it has answered a file (its access log says so; its metrics count a
    # transcription before the answer is sent): what is in flight there or still to come goes to B.
    wait_until(lambda: answered(log_a, 200) > before[log_a], 60, "server A to answer a file", interval_s=0.02)
    process_a.send_signal(signal.SIGKILL)
    process_a.wait()
    thread.join(timeout=120)
    assert not thread.is_alive()

    err = str(result["err"])
    assert result["status"] == 0, err
    outputs = sorted(path.relative_to(out).as_posix() for path in out.rglob("*"))
    assert outputs == sorted([f"day{i % 2}/call{i // 2}.json" for i in range(FILES)] + ["day0", "day1"])
    for path in out.rglob("*.json"):
        answer = json.loads(path.read_text())
        assert answer["duration"] == 4.0 and answer["decoding"] == "batched"
    # Exactly once: the two access logs hold eight answered transcriptions in all.
    served = {log: answered(log, 200) - before[log] for log in (log_a, log_b)}
    assert served[log_a] >= 1 and served[log_b] >= 1
    assert served[log_a] + served[log_b] == FILES
    assert transcriptions(url_b) - b_before == served[log_b]
    # One job and no queue per server with four files in flight: busy answers, retried.
    assert answered(log_a, 429) + answered(log_b, 429) > busy_before
    summary = err.strip().splitlines()[-1]
    assert re.search(rf"done {FILES}, failed 0, skipped 0, retried [1-9]\d*", summary), err
    assert re.search(r"0\.0089 audio hours in \S+ s wall: \S+ audio hours per hour", summary), summary
