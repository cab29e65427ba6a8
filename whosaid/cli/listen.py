"""`whosaid listen`: live captions with speakers from a server's /v1/realtime.

Streams an audio file, paced in real time (or `--speed` times faster), or the microphone
(`--microphone`: any FFmpeg input device, until Ctrl-C), to a whosaid server over OpenAI's
Realtime transcription protocol, and prints the captions as they come: the words of the
turn being spoken on one line that grows (on a terminal), then each finished turn's parts with
their speakers. `--json` prints every server event instead, one JSON object a line, with the
seconds since the first audio was sent (`t`). Any file FFmpeg decodes works; it is sent as 24 kHz
16-bit mono PCM, as the protocol takes it.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Union

#: The protocol's audio: 16-bit little-endian mono PCM at 24 kHz.
PCM_RATE_HZ = 24_000
#: Audio per message.
PIECE_S = 0.1
#: Silence sent after the file, so that the server's VAD hears the last turn end.
TAIL_SILENCE_S = 1.5
#: FFmpeg's input device and the microphone's name on it, by platform (`--input-format`,
#: `--microphone DEVICE` choose others: pulse, jack, lavfi, a card such as hw:1).
MICROPHONES = {"linux": ("alsa", "default"), "darwin": ("avfoundation", ":0"), "win32": ("dshow", "audio=Microphone")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("audio", type=Path, nargs="?", help="an audio file, streamed as if it were being spoken")
    parser.add_argument(
        "--microphone",
        nargs="?",
        const="",
        metavar="DEVICE",
        help="stream a microphone instead of a file, until Ctrl-C: FFmpeg's input DEVICE (default: the "
        "system's, 'default' through ALSA on Linux, ':0' through AVFoundation on macOS)",
    )
    parser.add_argument("--input-format", help="FFmpeg's input device format for --microphone (alsa, pulse, ...)")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default: %(default)s)")
    parser.add_argument("--api-key", default=os.environ.get("API_KEY"), help="the server's API key (default: $API_KEY)")
    parser.add_argument("--language", help="spoken language, e.g. en (default: detected)")
    parser.add_argument("--prompt", help="text that conditions the transcription (names, spellings)")
    parser.add_argument(
        "--speed", type=float, default=1.0, help="send the audio this many times faster than real time (default: 1)"
    )
    parser.add_argument("--silence-ms", type=int, default=500, help="a pause this long ends a turn (default: 500)")
    parser.add_argument("--json", action="store_true", help="print every server event as a JSON line")


def run(args: argparse.Namespace) -> int:
    from whosaid.errors import WhosaidError

    if args.speed <= 0:
        print("whosaid listen: --speed must be above 0", file=sys.stderr)
        return 2
    if (args.audio is None) == (args.microphone is None):
        print("whosaid listen: give an audio file or --microphone, one of them", file=sys.stderr)
        return 2
    stop = threading.Event()
    audio: Union[bytes, Iterator[bytes]]
    try:
        if args.audio is not None:
            audio = read_pcm(args.audio)
        else:
            audio = capture_pcm(args.microphone, args.input_format, stop)
    except (OSError, WhosaidError) as error:
        print(f"whosaid listen: {args.audio or 'the microphone'}: {error}", file=sys.stderr)
        return 1
    session = session_config(language=args.language, prompt=args.prompt, silence_ms=args.silence_ms)
    printer = JsonPrinter() if args.json else CaptionPrinter(sys.stdout.isatty())
    previous = signal.getsignal(signal.SIGINT)
    if args.microphone is not None:
        print("whosaid listen: listening; Ctrl-C ends the session", file=sys.stderr)
        _stop_on_interrupt(stop, previous)
    try:
        for elapsed_s, event in stream(args.url, audio, api_key=args.api_key, session=session, speed=args.speed):
            printer(elapsed_s, event)
    except ListenError as error:
        print(f"whosaid listen: {error}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, previous)
    return 0


def _stop_on_interrupt(stop: threading.Event, previous: Any) -> None:
    """The first Ctrl-C ends the capture (the turn being spoken is still transcribed); a second
    one interrupts as usual."""

    def handler(number: int, frame: Any) -> None:
        stop.set()
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, handler)


def capture_pcm(device: str, input_format: Optional[str], stop: threading.Event) -> Iterator[bytes]:
    """An input device's audio as 24 kHz 16-bit mono PCM, as it arrives, until `stop` is set or
    the device ends. The device is opened here (an OSError when it cannot be), read lazily."""
    import av

    default_format, default_device = MICROPHONES.get(sys.platform, ("alsa", "default"))
    try:
        container = av.open(device or default_device, format=input_format or default_format)
    except (av.FFmpegError, ValueError) as error:
        raise OSError(f"cannot open {device or default_device} ({input_format or default_format}): {error}") from error

    def pieces() -> Iterator[bytes]:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=PCM_RATE_HZ)
        try:
            for frame in container.decode(audio=0):
                for out in resampler.resample(frame):
                    yield out.to_ndarray().reshape(-1).astype("<i2").tobytes()
                if stop.is_set():
                    return
        finally:
            container.close()

    return pieces()


class ListenError(Exception):
    """The server refused the session or sent an error event."""


def read_pcm(path: Path) -> bytes:
    """A file's audio as 24 kHz 16-bit mono PCM."""
    import numpy as np

    from whosaid.audio.loading import load_audio_file

    audio = load_audio_file(path)
    import av

    frame = av.AudioFrame.from_ndarray(audio.samples.reshape(1, -1), format="flt", layout="mono")
    frame.sample_rate = audio.sample_rate_hz
    resampler = av.AudioResampler(format="s16", layout="mono", rate=PCM_RATE_HZ)
    pieces = [out.to_ndarray().reshape(-1) for out in resampler.resample(frame)]
    pieces += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    return np.concatenate(pieces).astype("<i2").tobytes()


def session_config(*, language: Optional[str], prompt: Optional[str], silence_ms: int) -> dict[str, Any]:
    transcription: dict[str, Any] = {"model": "whisper-1"}
    if language:
        transcription["language"] = language
    if prompt:
        transcription["prompt"] = prompt
    turn_detection = {"type": "server_vad", "silence_duration_ms": silence_ms}
    return {
        "type": "transcription",
        "audio": {"input": {"transcription": transcription, "turn_detection": turn_detection}},
    }


def stream(
    url: str,
    audio: Union[bytes, Iterable[bytes]],
    *,
    api_key: Optional[str] = None,
    session: Optional[dict[str, Any]] = None,
    speed: float = 1.0,
    timeout_s: float = 600.0,
) -> Iterator[tuple[float, dict[str, Any]]]:
    """Every server event of a session that streams `audio` (then TAIL_SILENCE_S of silence), with
    the seconds since the first audio went out; ends once the audio is sent and every committed
    turn is completed or has failed. PCM bytes (a file's) are paced `speed` times real time;
    pieces (a device's) go out as they come."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    ws_url = url.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        socket = connect(f"{ws_url}/v1/realtime?intent=transcription", additional_headers=headers, max_size=None)
    except InvalidStatus as error:
        raise ListenError(f"the server refused the session: {_refusal(error)}") from error
    except OSError as error:
        raise ListenError(f"cannot reach {url}: {error}") from error
    with socket:
        lock = threading.Lock()

        def send(event: dict[str, Any]) -> None:
            with lock:
                socket.send(json.dumps(event))

        def receive() -> dict[str, Any]:
            event = json.loads(socket.recv(timeout=timeout_s))
            if event["type"] == "error":
                raise ListenError(f"{event['error']['code']}: {event['error']['message']}")
            return event

        receive()  # session.created
        if session is not None:
            send({"type": "session.update", "session": session})
            receive()  # session.updated
        silence = bytes(int(PCM_RATE_HZ * TAIL_SILENCE_S) * 2)
        if isinstance(audio, bytes):
            pieces: Iterable[bytes] = _paced(audio + silence, speed)
        else:
            pieces = itertools.chain(audio, _paced(silence, 1.0))
        started = time.monotonic()

        def send_audio() -> None:
            for piece in pieces:
                send({"type": "input_audio_buffer.append", "audio": base64.b64encode(piece).decode()})
            # Answered once every append before it was handled: the end of the audio.
            send({"type": "session.update", "session": {"type": "transcription"}})

        sender = threading.Thread(target=send_audio, name="whosaid-listen-sender", daemon=True)
        sender.start()
        committed = finished = 0
        audio_done = False
        while not audio_done or committed > finished:
            event = receive()
            kind = event["type"]
            if kind == "session.updated":
                audio_done = True
                continue
            committed += kind == "input_audio_buffer.committed"
            finished += kind.endswith((".completed", ".failed"))
            yield time.monotonic() - started, event
        sender.join(timeout=5)


def _paced(pcm: bytes, speed: float) -> Iterator[bytes]:
    """`pcm` in PIECE_S pieces, each when real time (times `speed`) reaches it."""
    step = int(PCM_RATE_HZ * PIECE_S) * 2
    started = time.monotonic()
    for number, start in enumerate(range(0, len(pcm), step)):
        wait_s = started + number * PIECE_S / speed - time.monotonic()
        if wait_s > 0:
            time.sleep(wait_s)
        yield pcm[start : start + step]


def _refusal(error: Any) -> str:
    response = error.response
    try:
        return f"{response.status_code} {json.loads(response.body)['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return str(response.status_code)


class JsonPrinter:
    def __call__(self, elapsed_s: float, event: dict[str, Any]) -> None:
        print(json.dumps({"t": round(elapsed_s, 3), **event}, ensure_ascii=False), flush=True)


class CaptionPrinter:
    """Finished turns as `[start-end] SPEAKER: text` lines; on a terminal, the turn being spoken
    grows on the line below them."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self.partial: dict[str, str] = {}
        self.segments: dict[str, list[dict[str, Any]]] = {}

    def __call__(self, elapsed_s: float, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind.endswith(".delta"):
            self.partial[event["item_id"]] = self.partial.get(event["item_id"], "") + event["delta"]
            if self.live:
                text = self.partial[event["item_id"]]
                print(f"\r\033[K… {text[-150:]}", end="", flush=True)
        elif kind.endswith(".segment"):
            self.segments.setdefault(event["item_id"], []).append(event)
        elif kind.endswith(".completed"):
            if self.live:
                print("\r\033[K", end="")
            segments = self.segments.pop(event["item_id"], [])
            self.partial.pop(event["item_id"], None)
            for segment in segments:
                print(
                    f"[{segment['start']:7.2f}-{segment['end']:7.2f}] {segment['speaker']}: {segment['text'].strip()}"
                )
            if not segments and event["transcript"]:
                print(event["transcript"])
            sys.stdout.flush()
        elif kind.endswith(".failed"):
            print(f"(a turn failed: {event['error']['message']})", file=sys.stderr)
