"""A long meeting end to end: real meeting speech (the AMI snippets in tests/data/ami and
pyannote's sample) joined with pauses into a recording of --minutes, encoded as MP3, sent to
`python -m whosaid serve` on loopback with `response_format=diarized_json` (or to the Inference
Endpoints handler in this process with `return_timestamps: "word"`).

It checks what a user relies on: 200, every word of the transcript once and in order across the
speaker segments, more than one speaker. It prints the wall time, the real-time factor and the
peak memory (VmHWM) of the process that did the work.

    python -m benchmarks.memory.long_meeting --minutes 45                 # through the server
    python -m benchmarks.memory.long_meeting --minutes 45 --edge handler  # through handler.py
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

import av
import numpy as np

from benchmarks.common.clips import sample_samples
from benchmarks.server.local_server import free_port, memory_mb, start_server, wait_until_ready
from whosaid.audio.loading import load_audio_file

REPO_ROOT = Path(__file__).resolve().parents[2]
AMI_DIR = REPO_ROOT / "tests" / "data" / "ami"
SAMPLE_RATE_HZ = 16_000
MP3_BIT_RATE = 32_000  # a 45-minute meeting stays under the 25 MiB upload limit
PAUSE_RANGE_S = (0.5, 4.0)


def build_meeting(minutes: float, seed: int = 0) -> np.ndarray:
    """The snippets in a fixed order, again and again, with pauses of random length between them."""
    pieces = [load_audio_file(path).samples for path in sorted(AMI_DIR.glob("ami_*.wav"))] + [sample_samples()]
    rng = np.random.default_rng(seed)
    target = int(minutes * 60 * SAMPLE_RATE_HZ)
    parts, length, index = [], 0, 0
    while length < target:
        piece = pieces[index % len(pieces)]
        pause = np.zeros(int(rng.uniform(*PAUSE_RANGE_S) * SAMPLE_RATE_HZ), np.float32)
        parts += [piece, pause]
        length += len(piece) + len(pause)
        index += 1
    return np.concatenate(parts)[:target]


def encode_mp3(samples: np.ndarray, bit_rate: int = MP3_BIT_RATE) -> bytes:
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp3") as container:
        stream = container.add_stream("mp3", rate=SAMPLE_RATE_HZ, layout="mono")
        stream.bit_rate = bit_rate
        pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
        step = SAMPLE_RATE_HZ * 10
        for start in range(0, len(pcm), step):
            frame = av.AudioFrame.from_ndarray(pcm[None, start : start + step], format="s16", layout="mono")
            frame.sample_rate = SAMPLE_RATE_HZ
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


def words_once_in_order(text: str, segments: list[str]) -> bool:
    return " ".join(text.split()) == " ".join(" ".join(segments).split())


def through_server(mp3: bytes, duration_s: float) -> dict:
    import requests

    port = free_port()
    log_path = REPO_ROOT / "benchmarks" / "results" / "tmp" / "long_meeting_server.log"
    server = start_server(
        str(REPO_ROOT / "models" / "whisper-base"), assistant=None, diarization="builtin", port=port,
        log_path=log_path, extra_env={},
    )
    try:
        wait_until_ready(server)
        started = time.monotonic()
        response = requests.post(
            f"{server.base_url}/v1/audio/transcriptions",
            files={"file": ("meeting.mp3", mp3, "audio/mpeg")},
            data={"model": "whisper-1", "response_format": "diarized_json", "language": "en"},
            timeout=3 * 3600,
        )
        elapsed_s = time.monotonic() - started
        result = {"edge": "server", "status": response.status_code, "seconds": round(elapsed_s, 1)}
        result["peak_rss_mib"] = round(memory_mb(server.process.pid)["VmHWM"])
        if response.status_code != 200:
            result["body"] = response.text[:2000]
            return result
        body = response.json()
        segments = body.get("segments", [])
        result["words_once_in_order"] = words_once_in_order(body["text"], [s["text"] for s in segments])
        result["speakers"] = sorted({s["speaker"] for s in segments})
        result["segments"] = len(segments)
        result["words"] = len(body["text"].split())
        result["rtf"] = round(elapsed_s / duration_s, 4)
        return result
    finally:
        server.stop()


def through_handler(mp3: bytes, duration_s: float) -> dict:
    import base64

    os.environ.update(ASR_MODEL=str(REPO_ROOT / "models" / "whisper-base"), DIARIZATION_MODEL="builtin")
    os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")
    sys.path.insert(0, str(REPO_ROOT))
    from handler import EndpointHandler

    handler = EndpointHandler(str(REPO_ROOT))
    started = time.monotonic()
    response = handler(
        {"inputs": base64.b64encode(mp3).decode(), "parameters": {"language": "en", "return_timestamps": "word"}}
    )
    elapsed_s = time.monotonic() - started
    chunks_text = "".join(chunk["text"] for chunk in response["chunks"])
    return {
        "edge": "handler",
        "status": 200,
        "seconds": round(elapsed_s, 1),
        "rtf": round(elapsed_s / duration_s, 4),
        "peak_rss_mib": round(memory_mb(os.getpid())["VmHWM"]),
        "words_once_in_order": words_once_in_order(chunks_text, [s["text"] for s in response["speakers"]]),
        "speakers": sorted({s["speaker"] for s in response["speakers"]}),
        "segments": len(response["speakers"]),
        "words": len(response["text"].split()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=45.0)
    parser.add_argument("--edge", choices=("server", "handler"), default="server")
    parser.add_argument("--save", type=Path, help="also write the recording (MP3) here")
    args = parser.parse_args(argv)
    samples = build_meeting(args.minutes)
    mp3 = encode_mp3(samples)
    if args.save:
        args.save.write_bytes(mp3)
    duration_s = len(samples) / SAMPLE_RATE_HZ
    print(f"recording: {duration_s / 60:.1f} min, MP3 {len(mp3) / 2**20:.1f} MiB", flush=True)
    result = (through_server if args.edge == "server" else through_handler)(mp3, duration_s)
    result.update(minutes=round(duration_s / 60, 1), mp3_mib=round(len(mp3) / 2**20, 1))
    print(json.dumps(result, indent=2))
    ok = result["status"] == 200 and result.get("words_once_in_order") and len(result.get("speakers", [])) > 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
