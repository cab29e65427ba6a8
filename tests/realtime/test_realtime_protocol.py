"""GET /v1/realtime?intent=transcription, event by event: OpenAI's Realtime transcription protocol
over a real WebSocket (Uvicorn on loopback, the `websockets` client), with a stand-in recognizer
that says " hello there" and the real Silero VAD for turn detection. Auth, limits, backpressure
and clean-up on a vanished client are checked here; real models and the openai SDK are in
test_realtime_real.py."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import requests
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.support.audio_files import encode
from tests.support.realtime import RawClient, pcm24, pieces
from tests.support.server import threaded_server, wait_until
from whosaid.audio.vad import VoiceActivityDetector
from whosaid.engine import Engine
from whosaid.recognition.protocol import AsrOutput
from whosaid.recognition.segments import Span
from whosaid.results import Chunk
from whosaid.runtime.device import ModelRuntime
from whosaid.server.app import create_app
from whosaid.server.realtime import MAX_PENDING_TURNS
from whosaid.server.settings import ServerSettings

API_KEY = "live-test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
PATH = "/v1/realtime?intent=transcription"


class StubRecognizer:
    """Says " hello there" over any audio once `gate` is open; checks its stop signal while it
    waits, as the real recognizer does between window batches."""

    has_assistant = False
    runtime = ModelRuntime(device="cpu", dtype="float32", attn_implementation="eager", asr_model="stub")

    def __init__(self) -> None:
        self.vad = VoiceActivityDetector.load()
        self.gate = threading.Event()
        self.gate.set()
        self.calls = 0
        self.stopped = 0

    def transcribe(self, audio, config, *, should_stop=None, on_window=None) -> AsrOutput:
        self.calls += 1
        give_up = time.monotonic() + 30
        while not self.gate.wait(timeout=0.05):
            if should_stop is not None:
                try:
                    should_stop.check()
                except Exception:
                    self.stopped += 1
                    raise
            assert time.monotonic() < give_up, "the test never opened the gate"
        if on_window is not None:
            on_window([Span(0.0, audio.duration_s, " hello there")])
        return AsrOutput(chunks=(Chunk(0.0, audio.duration_s, " hello there"),), language="en", decoding="batched")

    def trimmed(self, margin_s: float, *, retry_with_beams: bool = True) -> "StubRecognizer":
        return self


@pytest.fixture(scope="module")
def stub() -> StubRecognizer:
    return StubRecognizer()


@pytest.fixture(autouse=True)
def open_gate(stub: StubRecognizer) -> Iterator[None]:
    stub.gate.set()
    yield
    stub.gate.set()


def serve(stub: StubRecognizer, **overrides):
    values = dict(api_key=API_KEY, max_concurrent_jobs=1, max_queue=8, realtime_max_sessions=2)
    return threaded_server(create_app(lambda: Engine(stub), ServerSettings(**{**values, **overrides})))


@pytest.fixture(scope="module")
def server(stub: StubRecognizer) -> Iterator[str]:
    with serve(stub) as url:
        yield url


@pytest.fixture(scope="module")
def speech(sample_audio) -> bytes:
    """One sentence of pyannote's sample (8.3-10.0 s) with 1 s of silence before and after, as
    24 kHz PCM: one turn for the server's VAD."""
    silence = np.zeros(16_000, np.float32)
    return pcm24(np.concatenate([silence, sample_audio.samples[int(8.3 * 16_000) : 160_000], silence]))


def connect(url: str, **options) -> RawClient:
    return RawClient(url + options.pop("path", PATH), **options)


def session(url: str, **options) -> RawClient:
    client = connect(url, headers=AUTH, **options)
    created = client.recv()
    assert created["type"] == "session.created", created
    return client


def metric_value(url: str, name: str, **labels: str) -> float:
    text = requests.get(f"{url}/metrics", headers=AUTH, timeout=5).text
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(f'{key}="{value}"' in line for key, value in labels.items()):
            return float(line.rsplit(" ", 1)[1])
        if not labels and line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{wanted}}} not in /metrics")


def refusal(url: str, **options) -> tuple[int, dict]:
    with pytest.raises(InvalidStatus) as refused:
        connect(url, **options)
    response = refused.value.response
    return response.status_code, json.loads(response.body)["error"]


# ---- auth, intent, limits: refused before the socket opens -------------------------------------


def test_a_missing_or_wrong_key_is_refused_with_401_before_the_socket_opens(server: str) -> None:
    status, error = refusal(server)
    assert (status, error["code"], error["message"], error["type"]) == (
        401,
        "invalid_api_key",
        "missing API key",
        "authentication_error",
    )
    status, error = refusal(server, headers={"Authorization": "Bearer nope"})
    assert (status, error["message"]) == (401, "invalid API key")
    status, error = refusal(server, path=PATH + "&api_key=nope")
    assert (status, error["message"]) == (401, "invalid API key")
    status, error = refusal(server, subprotocols=["realtime", "openai-insecure-api-key.nope"])
    assert (status, error["message"]) == (401, "invalid API key")
    assert metric_value(server, "whosaid_http_requests_total", method="WEBSOCKET", status="401") >= 4


def test_the_key_is_taken_from_the_header_the_query_or_a_subprotocol(server: str) -> None:
    for options in (
        {"headers": AUTH},
        {"path": PATH + f"&api_key={API_KEY}"},
        {"subprotocols": ["realtime", f"openai-insecure-api-key.{API_KEY}"]},
    ):
        with connect(server, **options) as client:
            assert client.recv()["type"] == "session.created", options
            if "subprotocols" in options:
                assert client.ws.subprotocol == "realtime"


def test_another_intent_is_refused_with_a_message_that_says_the_url(server: str) -> None:
    status, error = refusal(server, headers=AUTH, path="/v1/realtime?model=gpt-realtime")
    assert (status, error["code"], error["param"]) == (400, "invalid_intent", "intent")
    assert "/v1/realtime?intent=transcription" in error["message"]


def test_sessions_beyond_the_limit_get_429_and_a_closed_one_frees_its_place(server: str) -> None:
    first, second = session(server), session(server)
    status, error = refusal(server, headers=AUTH)
    assert (status, error["code"]) == (429, "too_many_sessions")
    assert "REALTIME_MAX_SESSIONS" in error["message"]
    assert metric_value(server, "whosaid_websocket_sessions", route="/v1/realtime") == 2
    first.close()
    wait_until(
        lambda: metric_value(server, "whosaid_websocket_sessions", route="/v1/realtime") == 1, 10, "a session to end"
    )
    with session(server):
        pass
    second.close()


# ---- session configuration ---------------------------------------------------------------------


def test_session_created_then_session_update_in_both_forms(server: str) -> None:
    with session(server) as client:
        client.send(
            {
                "type": "session.update",
                "event_id": "mine",
                "session": {
                    "type": "transcription",
                    "audio": {
                        "input": {
                            "format": {"type": "audio/pcm", "rate": 24000},
                            "transcription": {"model": "gpt-4o-transcribe", "language": "en", "prompt": "Diane"},
                            "turn_detection": {"type": "server_vad", "threshold": 0.6, "silence_duration_ms": 300},
                        }
                    },
                },
            }
        )
        updated = client.recv()
        assert updated["type"] == "session.updated"
        audio_input = updated["session"]["audio"]["input"]
        assert audio_input["transcription"] == {"model": "gpt-4o-transcribe", "language": "en", "prompt": "Diane"}
        assert audio_input["turn_detection"] == {
            "type": "server_vad",
            "threshold": 0.6,
            "prefix_padding_ms": 300,
            "silence_duration_ms": 300,
        }
        client.send(
            {
                "type": "session.update",
                "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}},
            }
        )
        updated = client.recv()
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        assert updated["session"]["audio"]["input"]["transcription"]["language"] == "en"  # unchanged
        client.send(
            {
                "type": "transcription_session.update",
                "session": {
                    "input_audio_format": "pcm16",
                    "input_audio_transcription": {"model": "whisper-1", "language": "de"},
                    "turn_detection": {"type": "semantic_vad", "eagerness": "low"},
                },
            }
        )
        beta = client.recv()
        assert beta["type"] == "transcription_session.updated"
        assert beta["session"]["input_audio_format"] == "pcm16"
        assert beta["session"]["input_audio_transcription"]["language"] == "de"
        assert beta["session"]["turn_detection"]["type"] == "server_vad"


@pytest.mark.parametrize(
    ("event", "code", "param", "words"),
    [
        ("{not json", "invalid_json", None, "not valid JSON"),
        ("[1, 2]", "invalid_type", None, "JSON object"),
        ({"event_id": "e1"}, "missing_required_parameter", "type", "'type'"),
        ({"type": "response.create", "event_id": "e2"}, "invalid_value", "type", "input_audio_buffer.append"),
        ({"type": "input_audio_buffer.append"}, "missing_required_parameter", "audio", "base64"),
        ({"type": "input_audio_buffer.append", "audio": "***"}, "invalid_value", "audio", "valid base64"),
        (
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"abc").decode()},
            "invalid_value",
            "audio",
            "16-bit",
        ),
        (
            {
                "type": "session.update",
                "session": {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcmu"}}}},
            },
            "invalid_value",
            "session.audio.input.format.type",
            "audio/pcm",
        ),
        (
            {
                "type": "session.update",
                "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            },
            "invalid_value",
            "session.audio.input.format.rate",
            "24000",
        ),
        ({"type": "session.update", "session": {"type": "realtime"}}, "invalid_value", "session.type", "transcription"),
        ({"type": "session.update", "session": "x"}, "invalid_type", "session", "object"),
        (
            {"type": "session.update", "session": {"audio": {"input": {"turn_detection": {"threshold": 2}}}}},
            "invalid_value",
            "session.audio.input.turn_detection.threshold",
            "0 to 1",
        ),
        (
            {"type": "transcription_session.update", "session": {"input_audio_format": "g711_ulaw"}},
            "invalid_value",
            "session.input_audio_format",
            "pcm16",
        ),
        (
            {"type": "input_audio_buffer.commit", "event_id": "e3"},
            "input_audio_buffer_commit_empty",
            None,
            "buffer too small",
        ),
    ],
)
def test_a_bad_event_gets_an_error_event_and_the_session_goes_on(server: str, event, code, param, words) -> None:
    with session(server) as client:
        client.send(event)
        error = client.recv()
        assert error["type"] == "error"
        detail = error["error"]
        assert (detail["type"], detail["code"], detail["param"]) == ("invalid_request_error", code, param)
        assert words in detail["message"]
        if isinstance(event, dict):
            assert detail["event_id"] == event.get("event_id")
        client.send({"type": "session.update", "session": {"type": "transcription"}})
        assert client.recv()["type"] == "session.updated"


def test_a_binary_message_gets_an_error_event(server: str) -> None:
    with session(server) as client:
        client.send(b"\x00\x01")
        error = client.recv()
        assert (error["type"], error["error"]["code"]) == ("error", "invalid_value")
        assert "base64" in error["error"]["message"]


# ---- the audio buffer and turns -----------------------------------------------------------------


def no_vad(client: RawClient) -> None:
    client.send(
        {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}}}
    )
    assert client.recv()["type"] == "session.updated"


def test_a_committed_buffer_is_transcribed_deltas_first_then_completed(server: str, speech: bytes) -> None:
    with session(server) as client:
        no_vad(client)
        for audio in pieces(speech):
            client.append(audio)
        client.send({"type": "input_audio_buffer.commit"})
        events = client.until("conversation.item.input_audio_transcription.completed")
    committed = next(event for event in events if event["type"] == "input_audio_buffer.committed")
    assert committed["previous_item_id"] is None
    deltas = [event for event in events if event["type"].endswith(".delta")]
    completed = events[-1]
    assert deltas and all(event["item_id"] == committed["item_id"] for event in deltas + [completed])
    assert "".join(event["delta"] for event in deltas) == completed["transcript"] == "hello there"
    assert completed["usage"] == {"type": "duration", "seconds": pytest.approx(len(speech) / 48_000, abs=0.05)}
    assert events.index(committed) < events.index(completed)


def test_server_vad_finds_the_turn_and_commits_it(server: str, speech: bytes) -> None:
    with session(server) as client:
        for audio in pieces(speech):
            client.append(audio)
        events = client.until("conversation.item.input_audio_transcription.completed")
    kinds = [event["type"] for event in events]
    started = events[kinds.index("input_audio_buffer.speech_started")]
    stopped = events[kinds.index("input_audio_buffer.speech_stopped")]
    committed = events[kinds.index("input_audio_buffer.committed")]
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("input_audio_buffer.speech_stopped")
    assert started["item_id"] == stopped["item_id"] == committed["item_id"] == events[-1]["item_id"]
    # Speech begins 1 s in (minus the 300 ms prefix); the silence is heard out 0.5 s after it ends.
    assert 600 <= started["audio_start_ms"] <= 1100
    assert 2700 + 500 <= stopped["audio_end_ms"] <= 2700 + 500 + 400
    assert any(kind.endswith(".delta") for kind in kinds[: kinds.index(events[-1]["type"])])
    assert events[-1]["transcript"] == "hello there"


def test_clear_empties_the_buffer(server: str, speech: bytes) -> None:
    with session(server) as client:
        no_vad(client)
        client.append(next(pieces(speech)))
        client.send({"type": "input_audio_buffer.clear"})
        assert client.recv()["type"] == "input_audio_buffer.cleared"
        client.send({"type": "input_audio_buffer.commit"})
        assert client.recv()["error"]["code"] == "input_audio_buffer_commit_empty"


def test_a_session_that_sends_nothing_is_closed_with_an_idle_timeout(stub: StubRecognizer) -> None:
    with serve(stub, realtime_idle_timeout_s=1.0) as url:
        with session(url) as client:
            started = time.monotonic()
            error = client.recv(timeout_s=10)
            assert (error["type"], error["error"]["code"]) == ("error", "idle_timeout")
            assert "REALTIME_IDLE_TIMEOUT_S" in error["error"]["message"]
            assert 0.9 <= time.monotonic() - started < 5
            with pytest.raises(ConnectionClosed):
                client.recv(timeout_s=10)


def test_a_session_ends_at_its_maximum_length(stub: StubRecognizer) -> None:
    with serve(stub, realtime_max_session_s=1.5) as url:
        with session(url) as client:
            no_vad(client)
            deadline = time.monotonic() + 10
            while True:
                client.append(base64.b64encode(bytes(4800)).decode())  # keeps the session from idling
                try:
                    event = client.recv(timeout_s=0.2)
                except TimeoutError:
                    continue
                assert time.monotonic() < deadline
                break
            assert (event["type"], event["error"]["code"]) == ("error", "session_expired")


def test_a_client_that_vanishes_mid_turn_leaves_nothing_running(
    server: str, stub: StubRecognizer, speech: bytes
) -> None:
    stub.gate.clear()  # the turn's transcription hangs until the client is gone
    stopped_before, calls_before = stub.stopped, stub.calls
    client = session(server)
    no_vad(client)
    for audio in pieces(speech):
        client.append(audio)
    client.send({"type": "input_audio_buffer.commit"})
    wait_until(lambda: stub.calls > calls_before, 10, "the recognizer to be called")
    assert metric_value(server, "whosaid_jobs_running") == 1
    client.ws.socket.close()  # no closing handshake: the client just disappears
    wait_until(lambda: metric_value(server, "whosaid_jobs_running") == 0, 10, "the job to stop")
    wait_until(
        lambda: metric_value(server, "whosaid_websocket_sessions", route="/v1/realtime") == 0, 10, "the session to end"
    )
    assert stub.stopped > stopped_before  # stopped by its signal, not finished
    stub.gate.set()
    with session(server) as again:  # the server keeps serving
        no_vad(again)


def test_a_client_faster_than_transcription_is_slowed_down_not_buffered(
    server: str, stub: StubRecognizer, speech: bytes
) -> None:
    stub.gate.clear()
    with session(server) as client:
        no_vad(client)
        one_turn = list(pieces(speech, piece_s=0.5))[3]  # speech, not the silence before it
        # One turn in the job slot, MAX_PENDING_TURNS waiting, then the server stops reading.
        for _ in range(MAX_PENDING_TURNS + 2):
            client.append(one_turn)
            client.send({"type": "input_audio_buffer.commit"})
        client.send({"type": "session.update", "session": {"type": "transcription"}})
        seen = []
        with pytest.raises(TimeoutError):
            while True:
                seen.append(client.recv(timeout_s=1.5)["type"])
        assert "session.updated" not in seen
        # Every commit was answered; the last one waits for a place in the queue, and so do the
        # events after it, unread.
        assert seen.count("input_audio_buffer.committed") == MAX_PENDING_TURNS + 2
        assert "conversation.item.input_audio_transcription.completed" not in seen
        stub.gate.set()
        events = client.until("session.updated", timeout_s=30)
        kinds = [event["type"] for event in events]
        assert "input_audio_buffer.committed" not in kinds
        assert kinds.count("conversation.item.input_audio_transcription.completed") >= 1


# ---- whosaid listen -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def speech_wav(sample_audio, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("listen") / "phrase.wav"
    silence = np.zeros(16_000, np.float32)
    samples = np.concatenate([silence, sample_audio.samples[int(8.3 * 16_000) : 160_000], silence])
    path.write_bytes(encode(samples, 16_000, "wav"))
    return path


def test_whosaid_listen_prints_the_captions_of_a_file(server: str, speech_wav: Path, capsys) -> None:
    from whosaid.cli.main import main

    assert main(["listen", str(speech_wav), "--url", server, "--api-key", API_KEY, "--speed", "4"]) == 0
    assert capsys.readouterr().out == "hello there\n"
    assert main(["listen", str(speech_wav), "--url", server, "--api-key", API_KEY, "--speed", "4", "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = [event["type"] for event in events]
    assert kinds[0] == "input_audio_buffer.speech_started" and kinds[-1].endswith(".completed")
    assert all(event["t"] >= 0 for event in events)


def test_whosaid_listen_streams_an_input_device_until_it_ends(server: str, speech_wav: Path, capsys) -> None:
    """--microphone reads an FFmpeg input device as it delivers: here FFmpeg's lavfi device,
    which plays the file in real time (four times faster), as a sound card would deliver it."""
    from whosaid.cli.main import main

    device = f"amovie={speech_wav},arealtime=speed=4"
    command = ["listen", "--microphone", device, "--input-format", "lavfi", "--url", server, "--api-key", API_KEY]
    assert main(command) == 0
    captured = capsys.readouterr()
    assert captured.out == "hello there\n"
    assert "listening; Ctrl-C ends the session" in captured.err


def test_whosaid_listen_needs_one_source_and_a_device_that_opens(server: str, speech_wav: Path, capsys) -> None:
    from whosaid.cli.main import main

    assert main(["listen", "--url", server]) == 2
    assert main(["listen", str(speech_wav), "--microphone", "--url", server]) == 2
    assert capsys.readouterr().err.count("give an audio file or --microphone, one of them") == 2
    assert main(["listen", "--microphone", "no-such-card", "--input-format", "alsa", "--url", server]) == 1
    assert "whosaid listen: the microphone: cannot open no-such-card (alsa): " in capsys.readouterr().err


def test_whosaid_listen_says_why_the_server_refused(server: str, speech_wav: Path, capsys) -> None:
    from whosaid.cli.main import main

    assert main(["listen", str(speech_wav), "--url", server, "--api-key", "wrong"]) == 1
    assert "refused the session: 401 invalid API key" in capsys.readouterr().err


def test_a_client_that_vanishes_while_held_back_leaves_no_session_behind(
    server: str, stub: StubRecognizer, speech: bytes
) -> None:
    stub.gate.clear()
    client = session(server)
    no_vad(client)
    one_turn = list(pieces(speech, piece_s=0.5))[3]
    for _ in range(MAX_PENDING_TURNS + 2):  # the server stops reading after the last commit
        client.append(one_turn)
        client.send({"type": "input_audio_buffer.commit"})
    seen = 0
    while seen < MAX_PENDING_TURNS + 2:
        seen += client.recv(timeout_s=10)["type"] == "input_audio_buffer.committed"
    client.ws.socket.close()
    stub.gate.set()
    wait_until(
        lambda: metric_value(server, "whosaid_websocket_sessions", route="/v1/realtime") == 0, 20, "the session to end"
    )
    wait_until(lambda: metric_value(server, "whosaid_jobs_running") == 0, 10, "its jobs to end")
