"""The speed benchmark's numbers and tables: timing statistics, WER and DER of each measurement,
this project's ratios to its baselines, and the markdown that speed-latest.md holds."""

from __future__ import annotations

import statistics
from typing import Any, Optional

from benchmarks.asr.speed_implementations import IMPLEMENTATIONS
from benchmarks.common.clips import Clip, word_error_rate
from benchmarks.common.environment import describe_machine
from benchmarks.common.report import fmt, fmt_load, markdown_table
from benchmarks.common.scoring import new_metric

# pyannote.metrics' collar is the total width around each reference boundary: 0.5 is +-0.25 s,
# which is what NIST md-eval (and most papers) call "collar 0.25".
DER_COLLARS = {"der": 0.0, "der_collar_0.25": 0.5}
# (this project's row, baseline, how they compare): like for like first, then each at its own defaults.
COMPARISONS = [
    ("whosaid", "faster-whisper-fp32-greedy", "same strategy (greedy), float32"),
    ("whosaid", "transformers-greedy", "same strategy (greedy), float32"),
    ("whosaid-int8", "faster-whisper-int8-greedy", "same strategy (greedy), int8"),
    ("whosaid", "faster-whisper-fp32-greedy-timestamps", "same strategy and tokens (greedy, timestamps), float32"),
    ("whosaid-int8", "faster-whisper-int8-greedy-timestamps", "same strategy and tokens (greedy, timestamps), int8"),
    ("whosaid", "faster-whisper-fp32", "own defaults, float32"),
    ("whosaid", "transformers", "own defaults, float32"),
    ("whosaid-int8", "faster-whisper-int8", "own defaults, int8"),
]


def score(record: dict[str, Any], clip: Clip) -> dict[str, Any]:
    """Summary numbers of one measurement: timing statistics, RTF, WER or DER."""
    if "error" in record:
        return {}
    times = record["times_s"]
    median = statistics.median(times)
    summary: dict[str, Any] = {
        "median_s": median,
        "min_s": min(times),
        "max_s": max(times),
        "rtf": median / clip.duration_s,
        "audio_s": clip.duration_s,
    }
    output = record["output"]
    if "text" in output:
        summary["wer"] = word_error_rate(clip.reference_text, output["text"])
    if "turns" in output:
        summary.update(diarization_error_rates(clip, output["turns"]))
    return summary


def diarization_error_rates(clip: Clip, turns: list[list[Any]]) -> dict[str, Any]:
    """DER against sample.rttm over the whole clip, without and with a +-0.25 s collar.
    Overlapped speech is scored (skip_overlap=False): each turn is a track of its own, so an
    overlap-aware diarizer's overlapping turns both count, and a diarizer with one speaker at a
    time misses the second speaker of an overlap, as a user would experience it."""
    from pyannote.core import Annotation, Segment, Timeline

    reference, hypothesis = Annotation(), Annotation()
    for index, turn in enumerate(clip.reference_turns):
        reference[Segment(turn.start_s, turn.end_s), index] = turn.speaker
    for index, (start_s, end_s, speaker) in enumerate(turns):
        hypothesis[Segment(start_s, end_s), index] = speaker
    uem = Timeline([Segment(0.0, clip.duration_s)])
    rates: dict[str, Any] = {"speakers_found": len(set(hypothesis.labels()))}
    for key, collar in DER_COLLARS.items():
        metric = new_metric(collar)
        rates[key] = float(metric(reference, hypothesis, uem=uem))
    return rates


def ratio(numerator: Optional[float], denominator: Optional[float]) -> Optional[float]:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def added_mib(row: dict[str, Any]) -> Optional[float]:
    """What running the clips added to the process once its model was loaded: peak RSS minus
    the RSS right after loading. It leaves out what both systems pay before any work (the
    interpreter, `import torch`, the weights), which a peak RSS ratio mixes in."""
    peak, loaded = row.get("peak_rss_mib"), row.get("rss_after_load_mib")
    if peak is None or loaded is None:
        return None
    return peak - loaded


def headline_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each clip and each of COMPARISONS measured: this project's median time and peak memory
    divided by the baseline's, with both WERs."""
    by_clip: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_clip.setdefault(row["clip"], {})[row["implementation"]] = row
    ratios = []
    for clip, measured in by_clip.items():
        for ours_name, baseline, comparison in COMPARISONS:
            ours, theirs = measured.get(ours_name), measured.get(baseline)
            if ours is None or theirs is None or "median_s" not in ours or "median_s" not in theirs:
                continue
            ratios.append(
                {
                    "clip": clip,
                    "implementation": ours_name,
                    "baseline": baseline,
                    "comparison": comparison,
                    "time_ratio": ratio(ours["median_s"], theirs["median_s"]),
                    "memory_ratio": ratio(ours.get("peak_rss_mib"), theirs.get("peak_rss_mib")),
                    "added_memory_ratio": ratio(added_mib(ours), added_mib(theirs)),
                    "wer": ours.get("wer"),
                    "baseline_wer": theirs.get("wer"),
                }
            )
    return ratios


def render_markdown(result: dict[str, Any]) -> str:
    settings = result["settings"]
    rows = result["rows"]
    clip_label = {row["clip"]: f"{row['clip']} ({row['audio_s']:.0f} s)" for row in rows if "audio_s" in row}
    lines = [
        f"# Speed and quality: {settings['model']}, batch_size {settings['batch_size']}",
        "",
        f"Measured {result['finished']} on {describe_machine(result['machine'])}.",
        f"Median of {settings['repeats']} run(s) after {settings['warmup']} warm-up, each "
        f"implementation and clip in its own process with {settings['threads']} CPU threads "
        f"(OMP_WAIT_POLICY {settings.get('omp_wait_policy', 'default')}), the implementations of a clip "
        "run in turn, one run each per round, so that they meet the same load. "
        "RTF = wall time / audio duration (below 1 is faster than real time). Peak RSS = the "
        "process's VmHWM (model, runtime and decoding); added MiB = peak RSS minus the RSS once "
        "the model was loaded, what the runs themselves added. WER: lowercase, punctuation removed, "
        "against sample.stm (repeated for repeated clips). Load average (1/5/15 min) as the "
        "process started: this machine is shared, so read the times with it.",
        "",
    ]
    asr_rows = [row for row in rows if IMPLEMENTATIONS[row["implementation"]].group != "diarization"]
    lines.append(
        markdown_table(
            [
                "clip",
                "implementation",
                "decoding",
                "precision",
                "batch",
                "threads",
                "median s",
                "min–max s",
                "RTF",
                "peak RSS MiB",
                "added MiB",
                "load s",
                "WER",
                "load avg",
            ],
            [
                [
                    clip_label.get(row["clip"], row["clip"]),
                    row["implementation"]
                    + (
                        f" ({row['decoding']})"
                        if row.get("decoding")
                        and not row["implementation"].startswith("whosaid")
                        or row.get("decoding") == "assisted"
                        else ""
                    ),
                    IMPLEMENTATIONS[row["implementation"]].strategy,
                    IMPLEMENTATIONS[row["implementation"]].precision,
                    1 if row.get("decoding") == "assisted" else settings["batch_size"],
                    settings["threads"],
                    fmt(row.get("median_s")),
                    f"{row['min_s']:.2f}–{row['max_s']:.2f}" if "min_s" in row else "failed",
                    fmt(row.get("rtf"), 3),
                    fmt(row.get("peak_rss_mib"), 0),
                    fmt(added_mib(row), 0),
                    fmt(row.get("load_s"), 1),
                    fmt(row.get("wer"), 3),
                    fmt_load(row.get("load_average_before")),
                ]
                for row in asr_rows
            ],
        )
    )
    if result["ratios"]:
        lines += [
            "",
            "## This project ÷ baseline (below 1: this project is faster / smaller)",
            "",
            "Like for like (the same decoding strategy and precision) first, then each at its own defaults.",
            "",
            markdown_table(
                [
                    "clip",
                    "this project",
                    "baseline",
                    "compared at",
                    "time ratio",
                    "peak memory ratio",
                    "added memory ratio",
                    "WER",
                    "baseline WER",
                ],
                [
                    [
                        clip_label.get(r["clip"], r["clip"]),
                        r["implementation"],
                        r["baseline"],
                        r["comparison"],
                        fmt(r["time_ratio"]),
                        fmt(r["memory_ratio"]),
                        fmt(r.get("added_memory_ratio")),
                        fmt(r["wer"], 3),
                        fmt(r["baseline_wer"], 3),
                    ]
                    for r in sorted(result["ratios"], key=lambda r: (r["clip"], "defaults" in r["comparison"]))
                ],
            ),
        ]
    diarization_rows = [row for row in rows if IMPLEMENTATIONS[row["implementation"]].group == "diarization"]
    asr_median_s = {row["clip"]: row.get("median_s") for row in rows if row["implementation"] == "whosaid"}
    if diarization_rows:
        lines += [
            "",
            f"## Diarization ({settings['diarization']})",
            "",
            "DER against sample.rttm over the whole clip, overlaps scored; 'collar 0.25' forgives "
            "±0.25 s around reference boundaries (pyannote.metrics collar=0.5, NIST md-eval's 0.25).",
            "",
            markdown_table(
                [
                    "clip",
                    "median s",
                    "RTF",
                    "÷ whosaid ASR",
                    "peak RSS MiB",
                    "DER",
                    "DER collar 0.25",
                    "speakers",
                    "load avg",
                ],
                [
                    [
                        clip_label.get(row["clip"], row["clip"]),
                        fmt(row.get("median_s")),
                        fmt(row.get("rtf"), 3),
                        fmt(ratio(row.get("median_s"), asr_median_s.get(row["clip"]))),
                        fmt(row.get("peak_rss_mib"), 0),
                        fmt(row.get("der"), 3),
                        fmt(row.get("der_collar_0.25"), 3),
                        row.get("speakers_found"),
                        fmt_load(row.get("load_average_before")),
                    ]
                    for row in diarization_rows
                ],
            ),
        ]
    failures = [row for row in rows if "error" in row]
    if failures:
        lines += ["", "## Failed", ""]
        lines += [f"- {row['clip']} / {row['implementation']}: {row['error']}" for row in failures]
    used = list(dict.fromkeys(row["implementation"] for row in rows))
    lines += ["", "Implementations:", ""]
    lines += [f"- `{name}`: {IMPLEMENTATIONS[name].description}" for name in used]
    return "\n".join(lines)
