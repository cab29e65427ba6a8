"""What word timestamps cost and how close they are to faster-whisper's.

On pyannote's 30 s sample: this project's Engine transcribes with return_timestamps "segment"
and "word" alternately, `--repeats` times each after one warm-up of each (median wall and CPU
times printed); faster-whisper (`word_timestamps=True`, greedy, the CTranslate2 checkpoint the
transformers weights were converted from) times the same words, and the median |start| and |end|
differences over the words both transcripts share are printed.

    python -m benchmarks.asr.word_timestamps                  # whisper-base, 5 repeats
    python -m benchmarks.asr.word_timestamps --repeats 1      # a quick look
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import statistics
import time
from pathlib import Path

from benchmarks.common.models import resolve_model


def _normalised(word: str) -> str:
    return re.sub(r"[^\w']", "", word.lower())


Timed = tuple[str, float, float]  # (word, start_s, end_s)


def matched_words(ours: list[Timed], theirs: list[Timed]) -> list[tuple[Timed, Timed]]:
    """Pairs of the same word in both transcripts, aligned on the normalised text."""
    matcher = difflib.SequenceMatcher(
        None, [_normalised(w[0]) for w in ours], [_normalised(w[0]) for w in theirs], autojunk=False
    )
    return [
        (ours[block.a + offset], theirs[block.b + offset])
        for block in matcher.get_matching_blocks()
        for offset in range(block.size)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import importlib.util

    from whosaid.audio.loading import load_audio_file
    from whosaid.config import InferenceConfig, ModelSettings
    from whosaid.engine import Engine

    spec = importlib.util.find_spec("pyannote.audio")
    assert spec is not None and spec.origin is not None, "pyannote.audio ships the sample"
    wav = Path(spec.origin).parent / "sample" / "sample.wav"
    paths = resolve_model(args.model)
    engine = Engine.from_settings(ModelSettings(asr_model=paths.transformers_model, device="cpu"))
    audio = load_audio_file(wav)
    configs = {
        name: InferenceConfig.from_parameters({"language": "en", "return_timestamps": name})[0]
        for name in ("segment", "word")
    }
    times_s: dict[str, list[float]] = {name: [] for name in configs}
    # CPU seconds of this process too: on a shared machine wall time measures the neighbours.
    cpu_s: dict[str, list[float]] = {name: [] for name in configs}
    transcript = None
    for repeat in range(args.repeats + 1):
        for name, config in configs.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            result = engine.transcribe(audio, config)
            if repeat:  # the first round warms up
                times_s[name].append(time.perf_counter() - started)
                cpu_s[name].append(time.process_time() - started_cpu)
            if name == "word":
                transcript = result
    for name in configs:
        wall, cpu = statistics.median(times_s[name]), statistics.median(cpu_s[name])
        print(f"return_timestamps={name}: median {wall:.2f} s wall, {cpu:.2f} s CPU over {args.repeats} runs")
    for label, values in (("wall", times_s), ("CPU", cpu_s)):
        extra = statistics.median(values["word"]) - statistics.median(values["segment"])
        print(f"word timestamps cost ({label}): {extra:+.2f} s ({extra / statistics.median(values['segment']):+.0%})")

    from faster_whisper import WhisperModel

    model = WhisperModel(str(paths.ct2_model), device="cpu", compute_type="float32", cpu_threads=os.cpu_count() or 1)
    segments, _ = model.transcribe(str(wav), language="en", beam_size=1, word_timestamps=True)
    theirs = [(w.word, w.start, w.end) for segment in segments for w in segment.words]
    ours = [(w.text, w.start_s, w.end_s) for chunk in transcript.chunks for w in chunk.words]
    pairs = matched_words(ours, theirs)
    start_s = statistics.median(abs(a[1] - b[1]) for a, b in pairs)
    end_s = statistics.median(abs(a[2] - b[2]) for a, b in pairs)
    print(f"{len(pairs)} of {len(ours)} words matched faster-whisper's {len(theirs)}")
    print(f"median |start difference| {start_s * 1000:.0f} ms, median |end difference| {end_s * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
