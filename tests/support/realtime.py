"""Live-session helpers: audio as a realtime client sends it (24 kHz 16-bit PCM in base64
pieces), paced like a microphone, and a plain WebSocket client for protocol tests."""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any, Callable, Iterator, Optional

import numpy as np

PCM_RATE_HZ = 24_000
#: 100 ms per message, as browser and SDK examples send.
PIECE_S = 0.1


def pcm24(samples_16k: np.ndarray) -> bytes:
    """16 kHz float samples -> 24 kHz little-endian 16-bit PCM (FFmpeg's resampler, via PyAV)."""
    import av

    samples = np.ascontiguousarray(samples_16k, np.float32).reshape(1, -1)
    frame = av.AudioFrame.from_ndarray(samples, format="flt", layout="mono")
    frame.sample_rate = 16_000
    resampler = av.AudioResampler(format="s16", layout="mono", rate=PCM_RATE_HZ)
    pieces = [out.to_ndarray().reshape(-1) for out in resampler.resample(frame)]
    pieces += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    return np.concatenate(pieces).astype("<i2").tobytes()


def pieces(pcm: bytes, piece_s: float = PIECE_S) -> Iterator[str]:
    """base64 messages of `piece_s` of audio each."""
    step = int(PCM_RATE_HZ * piece_s) * 2
    for start in range(0, len(pcm), step):
        yield base64.b64encode(pcm[start : start + step]).decode()


def paced(send: Callable[[str], None], pcm: bytes, *, speed: float = 1.0, piece_s: float = PIECE_S) -> float:
    """Send `pcm` as a microphone would, `speed` times faster than real time, on a schedule
    (no drift); returns the monotonic time the last piece went out."""
    started = time.monotonic()
    for number, audio in enumerate(pieces(pcm, piece_s)):
        wait_s = started + number * piece_s / speed - time.monotonic()
        if wait_s > 0:
            time.sleep(wait_s)
        send(audio)
    return time.monotonic()


class RawClient:
    """A realtime session through `websockets` itself: JSON events in and out, with timeouts."""

    def __init__(
        self, url: str, *, headers: Optional[dict[str, str]] = None, subprotocols: Optional[list[str]] = None
    ) -> None:
        from websockets.sync.client import connect

        ws_url = url.replace("http://", "ws://", 1)
        self.ws = connect(
            ws_url, additional_headers=headers or {}, subprotocols=subprotocols, open_timeout=30, legacy=True
        )
        self.lock = threading.Lock()

    def send(self, event: Any) -> None:
        with self.lock:
            self.ws.send(event if isinstance(event, (str, bytes)) else json.dumps(event))

    def append(self, audio: str) -> None:
        self.send({"type": "input_audio_buffer.append", "audio": audio})

    def recv(self, timeout_s: float = 30.0) -> dict:
        return json.loads(self.ws.recv(timeout=timeout_s))

    def until(self, kind: str, timeout_s: float = 60.0) -> list[dict]:
        """Events up to and including the first of type `kind`."""
        deadline = time.monotonic() + timeout_s
        events = []
        while True:
            event = self.recv(max(deadline - time.monotonic(), 0.01))
            events.append(event)
            if event["type"] == kind:
                return events

    def close(self) -> None:
        self.ws.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sdk_session(
    base_url: str,
    api_key: str,
    pcm: bytes,
    *,
    session: Optional[dict] = None,
    speed: float = 1.0,
    tail_silence_s: float = 1.5,
    timeout_s: float = 300.0,
) -> list[tuple[float, dict]]:
    """A live session through the openai SDK (`client.realtime.connect`, intent=transcription):
    sends `pcm` paced `speed` times real time, then `tail_silence_s` of silence so that the last
    turn ends, and returns every server event with its arrival time (seconds from the first
    append), once every committed turn is completed or has failed."""
    from openai import OpenAI

    client = OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0)
    events: list[tuple[float, dict]] = []
    with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
        killer = threading.Timer(timeout_s, connection.close)
        killer.start()
        try:
            first = connection.recv().to_dict()
            assert first["type"] == "session.created", first
            if session is not None:
                connection.session.update(session=session)
                answer = connection.recv().to_dict()
                assert answer["type"] == "session.updated", answer
            started = time.monotonic()
            audio = pcm + bytes(int(PCM_RATE_HZ * tail_silence_s) * 2)

            def send_all() -> None:
                paced(lambda piece: connection.input_audio_buffer.append(audio=piece), audio, speed=speed)
                # Answered once every append before it was handled: the end of the audio.
                connection.session.update(session={"type": "transcription"})

            sender = threading.Thread(target=send_all, daemon=True)
            sender.start()
            committed = finished = 0
            audio_done = False
            while not audio_done or committed > finished:
                event = connection.recv().to_dict()
                kind = event["type"]
                assert kind != "error", event
                if kind == "session.updated":
                    audio_done = True
                    continue
                events.append((time.monotonic() - started, event))
                committed += kind == "input_audio_buffer.committed"
                finished += kind.endswith((".completed", ".failed"))
        finally:
            killer.cancel()
    return events
