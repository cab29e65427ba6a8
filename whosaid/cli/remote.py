"""Many files against remote endpoints: `whosaid transcribe --url URL [--url URL2 ...] -j N`.

The client of an archive: files go to the endpoints `concurrency` at a time, each request to the
next URL in turn (round-robin), and each answer is written to its own output file, atomically
(a temporary file renamed into place), so that `resume` never mistakes a half-written file for a
finished one.

What is retried, always on the next URL (another replica when there are several):
- busy answers, 429 and 503: after the server's `Retry-After` (or a backoff when it gives none),
  until the file has waited `max_wait_s` in total (a cold Inference Endpoint answers 503 for
  minutes while it starts);
- transient failures, connection errors, timeouts and other 5xx: up to `retries` times, with
  exponential backoff; a URL that refused a connection is avoided for `URL_COOLDOWN_S`.
Anything else (400 not audio, 413, 422, 401) fails the file at once: retrying cannot fix it.

Requests: a format whose file is another route's answer (its row's `file_output`: `json`, the
full transcript) is asked of that route, POST / (the Inference Endpoints contract, base64 JSON
with `parameters`), which this server and a deployed endpoint (the handler) both answer; every
other format is `/v1/audio/transcriptions` (or `/translations`) with `response_format`, which
only this server has.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import requests

from whosaid.formats import FORMATS

#: Seconds a URL that refused a connection is skipped while another URL is available.
URL_COOLDOWN_S = 10.0
#: Backoff of transient failures: first wait, doubled each time, up to the cap (plus jitter).
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
CONNECT_TIMEOUT_S = 10.0
#: Status codes that mean "busy, come back later" and those worth another try elsewhere.
BUSY_STATUSES = frozenset({429, 503})
TRANSIENT_STATUSES = frozenset({500, 502, 504})


@dataclass(frozen=True)
class RemoteOptions:
    urls: tuple[str, ...]
    output_format: str = "json"
    task: str = "transcribe"
    #: Request parameters (POST /'s `parameters`; form fields on /v1).
    parameters: Mapping[str, Any] = field(default_factory=dict)
    api_key: Optional[str] = None
    concurrency: int = 4
    retries: int = 3
    max_wait_s: float = 900.0
    read_timeout_s: float = 3600.0
    #: html: the page links the audio by its path from the output ('link') or embeds it ('embed').
    html_audio: str = "link"


@dataclass(frozen=True)
class FileJob:
    """One input and where its answer goes."""

    audio_path: Path
    output_path: Path


@dataclass(frozen=True)
class FileOutcome:
    job: FileJob
    #: The URL that answered (None when the file failed or was skipped).
    url: Optional[str]
    #: Requests sent beyond the first (busy answers and transient failures).
    retries: int
    audio_duration_s: float
    error: Optional[str] = None
    skipped: bool = False


@dataclass(frozen=True)
class RunSummary:
    outcomes: tuple[FileOutcome, ...]
    wall_s: float

    @property
    def done(self) -> int:
        return sum(1 for outcome in self.outcomes if outcome.error is None and not outcome.skipped)

    @property
    def failed(self) -> int:
        return sum(1 for outcome in self.outcomes if outcome.error is not None)

    @property
    def skipped(self) -> int:
        return sum(1 for outcome in self.outcomes if outcome.skipped)

    @property
    def retried(self) -> int:
        """Files that needed more than one request."""
        return sum(1 for outcome in self.outcomes if outcome.retries > 0)

    @property
    def retries(self) -> int:
        return sum(outcome.retries for outcome in self.outcomes)

    @property
    def audio_hours(self) -> float:
        return sum(o.audio_duration_s for o in self.outcomes if o.error is None and not o.skipped) / 3600

    @property
    def audio_hours_per_hour(self) -> float:
        return self.audio_hours * 3600 / self.wall_s if self.wall_s > 0 else 0.0

    def describe(self) -> str:
        return (
            f"done {self.done}, failed {self.failed}, skipped {self.skipped}, "
            f"retried {self.retried} ({self.retries} retries); {self.audio_hours:.4f} audio hours "
            f"in {self.wall_s:.1f} s wall: {self.audio_hours_per_hour:.1f} audio hours per hour"
        )


class _FileFailed(Exception):
    """A file that cannot be transcribed (not worth another try, or out of tries)."""


class RemoteTranscriber:
    """Thread-safe: worker threads share the URL rotation; each has its own HTTP session."""

    def __init__(self, options: RemoteOptions, *, sleep: Callable[[float], None] = time.sleep) -> None:
        if not options.urls:
            raise ValueError("at least one URL is needed")
        self.options = options
        self._sleep = sleep
        self._lock = threading.Lock()
        self._rotation = itertools.cycle(range(len(options.urls)))
        self._down_until: dict[str, float] = {}
        self._local = threading.local()

    def run(
        self,
        jobs: Sequence[FileJob],
        *,
        resume: bool = False,
        on_outcome: Callable[[FileOutcome], None] = lambda _: None,
    ) -> RunSummary:
        """Every job, `concurrency` at a time; `on_outcome` hears of each file as it ends (in
        the calling thread). With `resume`, files whose output exists are skipped."""
        started = time.monotonic()
        outcomes: list[FileOutcome] = []
        todo = []
        for job in jobs:
            if resume and job.output_path.exists():
                outcome = FileOutcome(job, None, 0, 0.0, skipped=True)
                outcomes.append(outcome)
                on_outcome(outcome)
            else:
                todo.append(job)
        with ThreadPoolExecutor(max_workers=max(1, self.options.concurrency), thread_name_prefix="remote") as pool:
            for future in as_completed([pool.submit(self.transcribe_file, job) for job in todo]):
                outcome = future.result()
                outcomes.append(outcome)
                on_outcome(outcome)
        return RunSummary(tuple(outcomes), time.monotonic() - started)

    def transcribe_file(self, job: FileJob) -> FileOutcome:
        retries = 0
        try:
            data = job.audio_path.read_bytes()
            url, body, retries = self._request_with_retries(job, data)
            try:
                text = self._render(body)
            except ValueError as error:  # a 200 that is not what the route answers
                message = f"{url}: an answer that is not {self.options.output_format}: {error}"
                raise _failed(message, retries + 1) from error
            audio_duration_s = _duration_s(body, job.audio_path)
            write_atomically(job.output_path, text)
        except (OSError, _FileFailed) as error:
            message = str(error) if isinstance(error, _FileFailed) else f"cannot read or write: {error}"
            return FileOutcome(job, None, getattr(error, "retries", retries), 0.0, error=message)
        return FileOutcome(job, url, retries, audio_duration_s)

    def _request_with_retries(self, job: FileJob, data: bytes) -> tuple[str, bytes, int]:
        failures = 0
        busy_answers = 0
        waited_s = 0.0
        attempts = 0
        previous_url: Optional[str] = None
        while True:
            url = self._next_url(avoid=previous_url)
            previous_url = url
            attempts += 1
            try:
                response = self._send(url, job, data)
            except requests.RequestException as error:
                if isinstance(error, requests.ConnectionError):
                    self._mark_down(url)
                reason = f"{url}: {type(error).__name__}: {error}"
            else:
                if response.status_code == 200:
                    return url, response.content, attempts - 1
                reason = f"{url}: HTTP {response.status_code}: {_error_message(response)}"
                if response.status_code in BUSY_STATUSES:
                    # Without Retry-After (a platform's 503 while it starts a replica), back off:
                    # each try uploads the whole file again.
                    wait_s = _retry_after_s(response) or _backoff_s(busy_answers)
                    busy_answers += 1
                    if waited_s + wait_s <= self.options.max_wait_s:
                        waited_s += wait_s
                        self._sleep(wait_s)
                        continue
                    reason += f" (busy for {waited_s:.0f} s, more than --max-wait-s)"
                    raise _failed(reason, attempts)
                if response.status_code not in TRANSIENT_STATUSES:
                    raise _failed(reason, attempts)
            failures += 1
            if failures > self.options.retries:
                raise _failed(f"{reason} (after {failures} failed attempts)", attempts)
            self._sleep(_backoff_s(failures - 1))

    def _send(self, url: str, job: FileJob, data: bytes) -> requests.Response:
        session = self._session()
        timeout = (CONNECT_TIMEOUT_S, self.options.read_timeout_s)
        headers = {"Authorization": f"Bearer {self.options.api_key}"} if self.options.api_key else {}
        parameters = dict(self.options.parameters)
        row = FORMATS[self.options.output_format]
        if row.file_output is not None:  # another route's answer (json: POST /, the full transcript)
            payload = {"inputs": base64.b64encode(data).decode("ascii"), "parameters": parameters}
            return session.post(f"{url}{row.file_output.route}", json=payload, headers=headers, timeout=timeout)
        route = "translations" if self.options.task == "translate" else "transcriptions"
        form = openai_form_fields(parameters)
        form.append(("response_format", self.options.output_format))
        filename = job.audio_path.name
        if row.plays_audio:
            form.append(("html_audio", self.options.html_audio))
            # The server links the audio by the name it was sent under: the path from the page.
            filename = Path(os.path.relpath(job.audio_path, job.output_path.parent)).as_posix()
        files = {"file": (filename, data)}
        return session.post(f"{url}/v1/audio/{route}", data=form, files=files, headers=headers, timeout=timeout)

    def _render(self, body: bytes) -> str:
        """The answer as the local CLI writes it: JSON indented, text as sent."""
        if FORMATS[self.options.output_format].is_json:
            return json.dumps(json.loads(body), ensure_ascii=False, indent=2) + "\n"
        return body.decode("utf-8")  # UnicodeDecodeError is a ValueError

    def _next_url(self, *, avoid: Optional[str]) -> str:
        urls = self.options.urls
        with self._lock:
            now = time.monotonic()
            candidates = []
            for _ in range(len(urls)):
                url = urls[next(self._rotation)]
                if self._down_until.get(url, 0.0) <= now:
                    candidates.append(url)
            if not candidates:  # every URL failed lately: try them anyway, in turn
                candidates = [urls[next(self._rotation)]]
            for url in candidates:
                if url != avoid:
                    return url
            return candidates[0]

    def _mark_down(self, url: str) -> None:
        with self._lock:
            self._down_until[url] = time.monotonic() + URL_COOLDOWN_S

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session


def openai_form_fields(parameters: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Request parameters as the OpenAI routes' form fields: each option under its form name
    (whosaid.config.request_options), and those the form takes in OpenAI's own way (the task is
    the route) as it does."""
    from whosaid.config import request_options

    names = {option.name: option.form_name for option in request_options()}
    form: list[tuple[str, str]] = []
    for name, value in parameters.items():
        if names.get(name):
            values = value if isinstance(value, list) else [value]
            form += [(names[name], _form_value(item)) for item in values]
        elif name == "return_timestamps" and value == "word":
            form.append(("timestamp_granularities[]", "word"))
        elif name == "return_speaker_embeddings" and value:
            form.append(("include[]", "speaker_embeddings"))
        elif name == "known_speakers":
            # OpenAI's known-speaker fields: repeated form fields, the clips as data URLs.
            form += [("known_speaker_names[]", speaker) for speaker in value]
            form += [("known_speaker_references[]", f"data:audio/*;base64,{clip}") for clip in value.values()]
        elif name in ("known_speaker_names", "known_speaker_references"):
            form += [(f"{name}[]", str(item)) for item in value]
    return form


def _form_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _failed(reason: str, attempts: int) -> _FileFailed:
    error = _FileFailed(reason)
    error.retries = attempts - 1  # type: ignore[attr-defined]
    return error


def _backoff_s(failures: int) -> float:
    base_s = min(BACKOFF_FIRST_S * 2**failures, BACKOFF_MAX_S)
    return base_s * random.uniform(0.75, 1.25)


def _retry_after_s(response: requests.Response) -> Optional[float]:
    value = response.headers.get("Retry-After", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # absent, or an HTTP date: the backoff instead


def _error_message(response: requests.Response) -> str:
    try:
        error = response.json().get("error")
    except ValueError:
        error = None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(error, str):  # the Inference Endpoints toolkit's {"error": "..."}
        return error
    return response.text[:200].strip() or response.reason


def _duration_s(body: bytes, audio_path: Path) -> float:
    """From the answer when it says (JSON formats), else from the file's container header."""
    try:
        duration = json.loads(body).get("duration")
        if isinstance(duration, (int, float)):
            return float(duration)
    except (ValueError, AttributeError):
        pass
    try:
        import av

        with av.open(str(audio_path)) as container:
            return container.duration / 1_000_000 if container.duration else 0.0
    except Exception:  # noqa: BLE001 - only the summary's audio hours depend on it
        return 0.0


def write_atomically(path: Path, text: str) -> None:
    """Write into a temporary file beside `path`, then rename it into place: readers (and
    `--resume`) see the whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as output:
            output.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
