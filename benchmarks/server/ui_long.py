"""The HTML transcript of a long meeting in headless Chromium: how long it takes to draw, how
many elements it holds, how long a seek (word highlight) and a rename take.

    python -m benchmarks.server.ui_long [--hours 1] [--speakers 10]

The transcript is made up (no model runs): a meeting of `--speakers` people taking turns of
2-20 s, three words a second, every tenth turn overlapping the next by 1 s, so its size is an
hour of speech at a conversational rate. Prints one markdown table row.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from tests.support.browser import chromium
from whosaid.formats import render
from whosaid.results import Chunk, SpeakerSegment, SpeakerTurn, Transcript, Word

WORDS_PER_S = 3.0


def meeting(hours: float, speakers: int, seed: int = 0) -> Transcript:
    rng = random.Random(seed)
    duration_s = hours * 3600.0
    segments, turns, chunks = [], [], []
    start_s, index = 0.0, 0
    while start_s < duration_s - 2.0:
        length_s = min(rng.uniform(2.0, 20.0), duration_s - start_s)
        speaker = f"SPEAKER_{rng.randrange(speakers):02d}"
        count = max(1, int(length_s * WORDS_PER_S))
        step_s = length_s / count
        words = tuple(
            Word(f" word{index + k}", start_s + k * step_s, start_s + (k + 0.8) * step_s, 0.9) for k in range(count)
        )
        index += count
        chunk = Chunk(start_s, start_s + length_s, "".join(w.text for w in words), words)
        chunks.append(chunk)
        segments.append(SpeakerSegment(speaker, chunk.start_s, chunk.end_s, chunk.text.strip(), (chunk,)))
        overlap_s = 1.0 if len(turns) % 10 == 9 else 0.0
        turns.append(SpeakerTurn(start_s, min(duration_s, start_s + length_s + overlap_s), speaker))
        start_s += length_s
    return Transcript(
        text="".join(c.text for c in chunks).strip(),
        chunks=tuple(chunks),
        duration_s=duration_s,
        speakers=tuple(segments),
        turns=tuple(turns),
        diarized=True,
        word_timestamps=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--speakers", type=int, default=10)
    args = parser.parse_args()
    transcript = meeting(args.hours, args.speakers)
    words = sum(len(c.words) for c in transcript.chunks)
    with tempfile.TemporaryDirectory() as folder:
        page_path = Path(folder) / "meeting.html"
        page_path.write_text(render(transcript, "html", file_id="meeting"), encoding="utf-8")
        size_mb = page_path.stat().st_size / 1e6
        with chromium(Path(folder) / "profile") as page:
            page.open(page_path.as_uri())
            page.wait_for("window.whosaidViewer !== undefined", timeout_s=120)
            timing = page.evaluate(
                "(() => { const t = performance.getEntriesByType('navigation')[0];"
                " return [t.domContentLoadedEventEnd, t.loadEventEnd]; })()"
            )
            elements = page.evaluate("document.getElementsByTagName('*').length")
            spans = page.evaluate("document.querySelectorAll('.w').length")
            seek_ms = page.evaluate(
                "(() => { const v = window.whosaidViewer, t0 = performance.now();"
                " for (let i = 0; i < 1000; i++) v.follow((i * 3.7) % v.data.duration);"
                " return (performance.now() - t0) / 1000; })()"
            )
            rename_ms = page.evaluate(
                "(() => { const t0 = performance.now(); window.whosaidViewer.rename('SPEAKER_00', 'Ann');"
                " return performance.now() - t0; })()"
            )
    print("| hours | speakers | words | segments | turns | file MB | loaded (ms) | elements | word elements"
          " | one highlight (ms) | one rename (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {args.hours:g} | {args.speakers} | {words} | {len(transcript.speakers)} | {len(transcript.turns)}"
        f" | {size_mb:.1f} | {timing[1]:.0f} | {elements} | {spans} | {seek_ms:.3f} | {rename_ms:.0f} |"
    )


if __name__ == "__main__":
    main()
