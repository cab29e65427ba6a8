"""Live captions: how soon the words come, per model and number of sessions.

Starts `python -m whosaid serve` (CPU, the chosen model, the built-in diarizer) and streams real
speech to /v1/realtime through `whosaid listen`'s client, paced in real time, from 1, 2 and 4
sessions at once. Each session streams pyannote's sample and three AMI snippets one after
another (2 minutes), session i starting with recording i.
Per turn it records:

- `completed` latency: from `speech_stopped` to the turn's `completed` event;
- first-delta latency: from the start of the turn's speech (its `audio_start_ms` plus the
  300 ms prefix padding, as sent) to its first delta;

and per session the lag after its audio ends (last `completed` minus the end of the audio): a
session holds real time when that lag stays bounded (a few seconds) instead of growing with the
recording. Real-time factor: the session's wall time from first audio to last `completed`,
over its audio's duration. Run to run the medians move by a second or more (a turn's latency
depends on which hypotheses happened to run before it), so `--repeats` runs each row several
times and pools the turns.

    python -m benchmarks.server.realtime_latency --model models/whisper-base --sessions 1,2,4 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
from pathlib import Path
from typing import Any

from benchmarks.common.clips import sample_dir
from benchmarks.server.local_server import start_live_caption_server, wait_until_ready
from whosaid.cli.listen import TAIL_SILENCE_S, read_pcm, session_config, stream

REPO_ROOT = Path(__file__).resolve().parents[2]
PREFIX_PADDING_S = 0.3
RECORDINGS = [sample_dir() / "sample.wav", *sorted((REPO_ROOT / "tests" / "data" / "ami").glob("ami_trn0[0-2].wav"))]


def one_session(url: str, pcm: bytes, out: dict[str, Any]) -> None:
    events = list(stream(url, pcm, session=session_config(language="en", prompt=None, silence_ms=500)))
    audio_s = len(pcm) / 48_000
    started: dict[str, float] = {}
    stopped: dict[str, float] = {}
    first_delta: dict[str, float] = {}
    completed: dict[str, float] = {}
    for elapsed_s, event in events:
        kind, item = event["type"], event.get("item_id")
        if kind == "input_audio_buffer.speech_started":
            started[item] = event["audio_start_ms"] / 1000 + PREFIX_PADDING_S
        elif kind == "input_audio_buffer.speech_stopped":
            stopped[item] = elapsed_s
        elif kind.endswith(".delta"):
            first_delta.setdefault(item, elapsed_s)
        elif kind.endswith(".completed") and event["transcript"]:
            completed[item] = elapsed_s
    out["completed_s"] = [completed[item] - stopped[item] for item in completed if item in stopped]
    out["first_delta_s"] = [
        first_delta[item] - started[item] for item in completed if item in started and item in first_delta
    ]
    last = max(completed.values(), default=audio_s)
    out["lag_s"] = last - (audio_s + TAIL_SILENCE_S)
    out["real_time_factor"] = last / (audio_s + TAIL_SILENCE_S)


def one_after_another(pcms: list[bytes], first: int) -> bytes:
    """The recordings' PCM joined, starting with recording `first`."""
    return b"".join(pcms[(first + index) % len(pcms)] for index in range(len(pcms)))


def run_sessions(url: str, pcms: list[bytes], count: int) -> list[dict[str, Any]]:
    """`count` sessions at once, session i streaming the recordings from recording i."""
    results: list[dict[str, Any]] = [{} for _ in range(count)]
    threads = [
        threading.Thread(target=one_session, args=(url, one_after_another(pcms, index), results[index]))
        for index in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def median_p90(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/whisper-base")
    parser.add_argument("--sessions", default="1,2,4", help="comma-separated session counts")
    parser.add_argument("--repeats", type=int, default=1, help="runs per row, their turns pooled")
    parser.add_argument("--output", type=Path, help="write the rows, with every turn's latencies, as JSON here")
    args = parser.parse_args()
    counts = [int(count) for count in args.sessions.split(",")]
    pcms = [read_pcm(path) for path in RECORDINGS]
    server = start_live_caption_server(args.model, "realtime-bench", {"REALTIME_MAX_SESSIONS": str(max(counts))})
    rows = []
    try:
        wait_until_ready(server)
        one_session(server.base_url, pcms[0][: 48_000 * 5], {})  # warm-up: first calls load kernels
        for count in counts:
            results: list[dict[str, Any]] = []
            for _ in range(args.repeats):
                results.extend(run_sessions(server.base_url, pcms, count))
            completed = [value for result in results for value in result.get("completed_s", [])]
            first = [value for result in results for value in result.get("first_delta_s", [])]
            row = {
                "model": Path(args.model).name,
                "sessions": count,
                "repeats": args.repeats,
                "turns": len(completed),
                "completed_median_s": median_p90(completed)[0],
                "completed_p90_s": median_p90(completed)[1],
                "first_delta_median_s": median_p90(first)[0],
                "first_delta_p90_s": median_p90(first)[1],
                "worst_lag_s": max(result["lag_s"] for result in results),
                "worst_real_time_factor": max(result["real_time_factor"] for result in results),
            }
            # The file keeps every turn's latencies too, so that runs can be pooled afterwards.
            rows.append({**row, "completed_s": completed, "first_delta_s": first})
            print(
                json.dumps({key: round(value, 2) if isinstance(value, float) else value for key, value in row.items()}),
                flush=True,
            )
    finally:
        server.stop()
    if args.output:
        args.output.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
