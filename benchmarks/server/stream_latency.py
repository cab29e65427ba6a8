"""When a streamed transcription's first words arrive: `stream=true` through the real `openai`
SDK against `python -m whosaid serve` on loopback, on the ten AMI snippets of tests/data/ami
joined into one 5-minute meeting. Prints the seconds to the first `transcript.text.delta`, to
`transcript.text.done`, their ratio and the number of deltas, for each of `--runs` requests.

    python -m benchmarks.server.stream_latency                       # whisper-base, the built-in diarizer
    python -m benchmarks.server.stream_latency --diarization none    # ASR only
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.server.local_server import REPO_ROOT, free_port, start_server, wait_until_ready

AMI_DIR = REPO_ROOT / "tests" / "data" / "ami"


def meeting_flac() -> tuple[bytes, float]:
    from tests.support.audio_files import encode
    from whosaid.audio.loading import load_audio_file

    samples = np.concatenate([load_audio_file(path).samples for path in sorted(AMI_DIR.glob("ami_trn*.wav"))])
    return encode(samples, 16_000, "flac"), samples.size / 16_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "whisper-base"))
    parser.add_argument("--diarization", default="builtin", help="builtin (the default server's), or none")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()

    from openai import OpenAI

    audio, duration_s = meeting_flac()
    diarization = None if args.diarization == "none" else args.diarization
    server = start_server(
        args.model, assistant=None, diarization=diarization, port=free_port(),
        log_path=Path("/tmp") / f"whosaid-stream-latency-{time.time_ns()}.log", extra_env={"DEVICE": "cpu"},
    )
    try:
        wait_until_ready(server)
        client = OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=900)
        print(f"{duration_s:.0f} s of audio, model {Path(args.model).name}, diarization {args.diarization}")
        for run in range(args.runs):
            started = time.monotonic()
            first_s = None
            deltas = 0
            for event in client.audio.transcriptions.create(
                model="whisper-1", file=("meeting.flac", audio), stream=True, extra_body={"language": "en"}
            ):
                if event.type == "transcript.text.delta":
                    deltas += 1
                    first_s = first_s if first_s is not None else time.monotonic() - started
            total_s = time.monotonic() - started
            print(
                f"run {run + 1}: first delta {first_s:.1f} s, done {total_s:.1f} s "
                f"({100 * (first_s or total_s) / total_s:.0f} % of the request), {deltas} deltas"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
