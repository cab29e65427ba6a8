"""Live captions: how close the live text comes to the same server's answer for the whole file.

Starts `python -m whosaid serve` (CPU, the chosen model, the built-in diarizer), asks it for each
recording's transcript as a file (`/v1/audio/transcriptions`, language en), then streams the
recording to /v1/realtime through `whosaid listen`'s client, paced in real time, `--runs` times
(turns, and so the text, depend on which hypotheses had time to run), and scores the completed
transcripts joined against the file's text. Pooled WER: the word errors of every recording over
the words of every file transcript (a recording whose file transcript is empty is left out).
Default recordings: pyannote's sample and the ten AMI snippets in tests/data/ami.

    python -m benchmarks.server.realtime_wer --model models/whisper-tiny.en --runs 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.common.clips import sample_dir
from benchmarks.common.wer import normalise_text, word_error_rate
from benchmarks.server.local_server import start_live_caption_server, wait_until_ready
from whosaid.cli.listen import read_pcm, session_config, stream

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = [sample_dir() / "sample.wav", *sorted((REPO_ROOT / "tests" / "data" / "ami").glob("ami_trn0?.wav"))]


def file_text(url: str, path: Path) -> str:
    import requests

    with open(path, "rb") as audio:
        response = requests.post(
            f"{url}/v1/audio/transcriptions",
            files={"file": (path.name, audio, "audio/wav")},
            data={"response_format": "json", "language": "en"},
            timeout=600,
        )
    response.raise_for_status()
    return response.json()["text"]


def live_text(url: str, path: Path) -> str:
    session = session_config(language="en", prompt=None, silence_ms=500)
    events = [event for _, event in stream(url, read_pcm(path), session=session)]
    completed = [event["transcript"] for event in events if event["type"].endswith(".completed")]
    return " ".join(text for text in completed if text)


def pooled(rows: list[dict[str, Any]], run: int) -> float:
    scored = [row for row in rows if row["words"]]
    errors = sum(row["wer"][run] * row["words"] for row in scored)
    return errors / sum(row["words"] for row in scored)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/whisper-tiny.en")
    parser.add_argument("--runs", type=int, default=2, help="live sessions per recording")
    parser.add_argument("--recordings", type=Path, nargs="*", default=RECORDINGS)
    parser.add_argument("--output", type=Path, help="write every recording's texts and WERs as JSON here")
    args = parser.parse_args()
    server = start_live_caption_server(args.model, "realtime-wer")
    rows: list[dict[str, Any]] = []
    try:
        wait_until_ready(server)
        for path in args.recordings:
            reference = file_text(server.base_url, path)
            lives = [live_text(server.base_url, path) for _ in range(args.runs)]
            words = len(normalise_text(reference).split())
            wers = [word_error_rate(reference, live) or 0.0 for live in lives] if words else []
            rows.append({"recording": path.name, "words": words, "wer": wers, "file": reference, "live": lives})
            scores = {"recording": path.name, "words": words, "wer": [round(wer, 3) for wer in wers]}
            print(json.dumps(scores), flush=True)
    finally:
        server.stop()
    summary = {"model": Path(args.model).name, "runs": args.runs}
    summary["pooled_wer"] = [round(pooled(rows, run), 3) for run in range(args.runs)]
    print(json.dumps(summary), flush=True)
    if args.output:
        args.output.write_text(json.dumps({**summary, "recordings": rows}, indent=2))


if __name__ == "__main__":
    main()
