"""Fuzzing the HTTP edge: `python -m whosaid serve` (real Uvicorn, a tiny random-weight Whisper)
on a loopback port, sent cut and corrupted files of every container, random parameter dicts,
nested or oversized JSON, and decompression bombs (files that decode to longer than
MAX_AUDIO_DURATION_S, whole or corrupted), through `POST /` (raw body, base64 JSON) and the
OpenAI routes.

Every answer must be a correct 200 (the documented response, chunks inside the audio) or a 4xx
with the JSON error body; never a 5xx. /health must answer after every case. Hypothesis runs
derandomized (the same cases on every run) with a fixed number of examples, so CI time is bounded.
The outcome counts are printed at the end (`pytest -s`).
"""

from __future__ import annotations

import base64
import collections
import json
from typing import Any, Iterator

import pytest
import requests
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.support.audio_bombs import BOMBS
from tests.support.audio_files import FORMATS, encode
from tests.support.server import cpu_server
from whosaid.formats import JsonTranscription, VerboseTranscription, output_format
from whosaid.server.errors import ErrorResponse
from whosaid.server.schemas import TranscriptResponse

# Slow (many requests against a real server): `make test-fast` leaves them to the full suite.
pytestmark = pytest.mark.slow

MAX_UPLOAD_MB = 1
CLIP_S = 1.5
MAX_AUDIO_DURATION_S = 10
BOMB_S = 20.0  # twice the limit; the noise bombs' base64 still fits in MAX_UPLOAD_MB
FUZZ = settings(
    derandomize=True,  # seeded: the same cases every run
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: bounded time even when a case fails
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
OUTCOMES: collections.Counter[str] = collections.Counter()
PARAMETER_NAMES = [
    "task", "language", "batch_size", "assisted", "chunk_length_s", "sampling_rate",
    "num_speakers", "min_speakers", "max_speakers", "beam_size", "return_timestamps", "",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["en", "fr", "transcribe", "translate", "auto", "true", "0", "1e309", "-1", "30", "5"]),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
PARAMETERS = st.dictionaries(st.sampled_from(PARAMETER_NAMES) | st.text(max_size=10), JSON_VALUES, max_size=5)


@pytest.fixture(scope="module")
def server(tiny_whisper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "ASR_MODEL": str(tiny_whisper("fuzz-main", seed=11)),
        "MAX_UPLOAD_MB": str(MAX_UPLOAD_MB),
        "MAX_AUDIO_DURATION_S": str(MAX_AUDIO_DURATION_S),
    }
    with cpu_server(tmp_path_factory, "fuzz", env) as url:
        yield url
    print(f"\nfuzz outcomes over {sum(OUTCOMES.values())} cases: {dict(sorted(OUTCOMES.items()))}")


#: 1.5 s of speech in every container; filled once per module (a module global rather than a
#: fixture argument, so that Hypothesis does not print megabytes of audio with each case).
FILES: dict[str, bytes] = {}


@pytest.fixture(scope="module", autouse=True)
def files(sample_audio) -> None:
    clip = sample_audio.samples[7 * 16_000 : int((7 + CLIP_S) * 16_000)]
    FILES.update({kind: encode(clip, 16_000, kind) for kind in FORMATS})


def send(server: str, route: str, body: bytes, parameters: Any, response_format: str = "json") -> requests.Response:
    if route == "raw":
        query = parameters if isinstance(parameters, dict) else {}
        return requests.post(
            f"{server}/",
            params={k: str(v) for k, v in query.items()},
            data=body,
            headers={"Content-Type": "application/octet-stream"},
            timeout=120,
        )
    if route == "json":
        payload = {"inputs": base64.b64encode(body).decode(), "parameters": parameters}
        return requests.post(
            f"{server}/",
            data=json.dumps(payload, allow_nan=True),
            headers={"Content-Type": "application/json"},
            timeout=120,
        )
    form = {k: str(v) for k, v in parameters.items()} if isinstance(parameters, dict) else {}
    form["response_format"] = response_format
    return requests.post(f"{server}/v1/audio/{route}", files={"file": ("clip.bin", body)}, data=form, timeout=120)


def check(server: str, route: str, response: requests.Response, response_format: str = "json") -> None:
    """A correct 200 or a 4xx with the JSON error body; never a 5xx; /health still answers."""
    status = response.status_code
    OUTCOMES[f"{status} {route}"] += 1
    assert status < 500, response.text
    assert "Traceback" not in response.text
    if status >= 400:
        ErrorResponse.model_validate(response.json())
    elif route in ("raw", "json"):
        transcript = TranscriptResponse.model_validate(response.json())
        assert 0 < transcript.duration
        assert all(0 <= chunk.timestamp[0] <= chunk.timestamp[1] <= transcript.duration for chunk in transcript.chunks)
        assert "".join(chunk.text for chunk in transcript.chunks).strip() == transcript.text
    elif response_format == "json":
        JsonTranscription.model_validate(response.json())
    elif response_format == "verbose_json":
        VerboseTranscription.model_validate(response.json())
    else:
        assert response.headers["content-type"].split(";")[0] == output_format(response_format).media_type
    assert requests.get(f"{server}/health", timeout=5).status_code == 200


@settings(FUZZ, max_examples=36)
@given(
    kind=st.sampled_from(sorted(FORMATS)),
    kept=st.floats(0.0, 1.0),
    flips=st.lists(st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(0, 255)), max_size=6),
    route=st.sampled_from(["raw", "json", "transcriptions"]),
)
def test_cut_and_corrupted_files(server, kind, kept, flips, route) -> None:
    data = bytearray(FILES[kind][: max(1, int(len(FILES[kind]) * kept))] if kept < 0.98 else FILES[kind])
    for position, value in flips:
        data[int(position * len(data))] = value
    check(server, route, send(server, route, bytes(data), {"language": "en"}), "json")


@settings(FUZZ, max_examples=30)
@given(
    parameters=PARAMETERS | JSON_VALUES,
    route=st.sampled_from(["raw", "json", "transcriptions", "translations"]),
    response_format=st.sampled_from(["json", "text", "srt", "verbose_json", "vtt", "docx"]),
)
def test_random_parameters(server, parameters, route, response_format) -> None:
    response = send(server, route, FILES["wav"], parameters, response_format)
    check(server, route, response, response_format)


@settings(FUZZ, max_examples=20)
@given(
    bomb=st.sampled_from(BOMBS),
    flips=st.lists(st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(0, 255)), max_size=4),
    route=st.sampled_from(["raw", "json", "transcriptions"]),
)
def test_bombs_whole_and_corrupted(server, bomb, flips, route) -> None:
    """A whole bomb is 413 audio_too_long; a corrupted one is any 4xx (or a 200 if what is left
    is short audio), never a 5xx."""
    data = bytearray(bomb.build(BOMB_S))
    for position, value in flips:
        data[int(position * len(data))] = value
    response = send(server, route, bytes(data), {"language": "en"})
    check(server, route, response, "json")
    if not flips:
        assert response.status_code == 413 and response.json()["error"]["code"] == "audio_too_long"


def nested(depth: int, leaf: Any, shape: str) -> Any:
    for level in range(depth):
        leaf = [leaf] if shape[level % len(shape)] == "[" else {"k": leaf}
    return leaf


@settings(FUZZ, max_examples=20)
@given(
    depth=st.integers(1, 3000),
    shape=st.text(alphabet="[{", min_size=1, max_size=3),
    where=st.sampled_from(["body", "inputs", "parameters", "raw text"]),
    padding_kb=st.sampled_from([0, 0, 100, 2048]),
)
def test_nested_and_oversized_json(server, depth, shape, where, padding_kb) -> None:
    padding = "x" * (padding_kb * 1024)
    if where == "raw text":
        opener = "".join("[" if shape[level % len(shape)] == "[" else '{"k":' for level in range(depth))
        body = (opener + json.dumps(padding)).encode()
    else:
        inputs = base64.b64encode(FILES["wav"]).decode()
        payload: Any = {"inputs": inputs, "parameters": {"language": "en", "note": padding}}
        if where == "body":
            payload = nested(depth, payload, shape)
        elif where == "inputs":
            payload["inputs"] = nested(depth, inputs, shape)
        else:
            payload["parameters"] = nested(depth, payload["parameters"], shape)
        body = json.dumps(payload).encode() if depth < 900 else _dumps_deep(payload)
    response = requests.post(f"{server}/", data=body, headers={"Content-Type": "application/json"}, timeout=120)
    check(server, "json", response)


def _dumps_deep(value: Any) -> bytes:
    """json.dumps recurses as deep as the value; write nests of any depth with an explicit stack."""
    parts: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            parts.append(item.text)
        elif isinstance(item, list):
            stack.append(_Raw("]"))
            for index in reversed(range(len(item))):
                stack.append(item[index])
                if index:
                    stack.append(_Raw(","))
            parts.append("[")
        elif isinstance(item, dict):
            stack.append(_Raw("}"))
            keys = list(item)
            for index in reversed(range(len(keys))):
                stack.append(item[keys[index]])
                stack.append(_Raw(json.dumps(str(keys[index])) + ":"))
                if index:
                    stack.append(_Raw(","))
            parts.append("{")
        else:
            parts.append(json.dumps(item))
    return "".join(parts).encode()


class _Raw:
    """Text written as it is by _dumps_deep (brackets and separators)."""

    def __init__(self, text: str) -> None:
        self.text = text


def test_the_server_answered_every_case_and_still_serves(server, files) -> None:
    assert sum(OUTCOMES.values()) >= 100
    assert not any(key.startswith("5") for key in OUTCOMES)
    response = send(server, "raw", FILES["wav"], {"language": "en"})
    assert response.status_code == 200 and response.json()["duration"] == CLIP_S
