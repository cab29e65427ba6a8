"""The benchmark scripts run and write their tables, so that they cannot rot unnoticed.

Smoke runs only: tiny inputs, one repetition, and no assertion on any timing (benchmarks print
numbers; they never pass or fail on them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_ASR = REPO_ROOT.parent / "shared" / "data" / "asr"
ASR_IMPLEMENTATIONS = (
    "whosaid", "whosaid-int8", "whosaid-no-timestamps", "whosaid-int8-no-timestamps",
    "transformers", "transformers-greedy",
    "faster-whisper-fp32", "faster-whisper-fp32-greedy", "faster-whisper-int8", "faster-whisper-int8-greedy",
    "faster-whisper-fp32-greedy-timestamps", "faster-whisper-int8-greedy-timestamps",
)
SCRIPT_TIMEOUT_S = 600  # a hung script fails the test instead of the whole run


def run_script(*argv: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert result.returncode == 0, (
        f"{argv} exited with {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    )
    return result


def only_file(directory: Path, pattern: str) -> Path:
    matches = sorted(directory.glob(pattern))
    assert len(matches) == 1, f"expected one {pattern} in {directory}, found {matches}"
    return matches[0]


@pytest.mark.slow
def test_speed_smoke_compares_all_implementations(tmp_path: Path) -> None:
    run_script("-m", "benchmarks.asr.speed", "--smoke", "--output-dir", str(tmp_path))

    result = json.loads(only_file(tmp_path, "speed-*.json").read_text())
    rows = {row["implementation"]: row for row in result["rows"]}
    assert set(rows) == set(ASR_IMPLEMENTATIONS)
    for name, row in rows.items():
        assert "error" not in row, f"{name}: {row.get('error')}\n{row.get('log_tail')}"
        assert row["median_s"] > 0 and row["peak_rss_mib"] > 0
        assert 0 <= row["wer"] <= 3  # a real transcript of real speech, not an empty string
        assert "new jersey" in row["output"]["text"].lower()
    assert {ratio["baseline"] for ratio in result["ratios"]} == {
        name for name in ASR_IMPLEMENTATIONS if not name.startswith("whosaid")
    }
    table = (tmp_path / "speed-latest.md").read_text()
    for name in ASR_IMPLEMENTATIONS:
        assert f"| {name} |" in table


@pytest.mark.slow
def test_speed_times_assisted_modes_and_diarization(
    tmp_path: Path, tiny_whisper, random_diarizer_dir: Path, monkeypatch
) -> None:
    monkeypatch.setenv("ASSISTED_MAX_DURATION_S", "30")  # on CPU 'auto' assists only when told to
    main = tiny_whisper("bench-main", seed=0)
    assistant = tiny_whisper("bench-distil", seed=1, decoder_layers=1, encoder_of=main)
    run_script(
        "-m",
        "benchmarks.asr.speed",
        "--model",
        str(main),
        "--implementations",
        "",
        "--assistant",
        str(assistant),
        "--diarization",
        str(random_diarizer_dir),
        "--clips",
        "smoke",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--output-dir",
        str(tmp_path),
    )

    rows = {row["implementation"]: row for row in json.loads(only_file(tmp_path, "speed-*.json").read_text())["rows"]}
    assert set(rows) == {"whosaid-assisted", "whosaid-unassisted", "whosaid-auto", "diarization"}
    assert [rows[name].get("decoding") for name in ("whosaid-assisted", "whosaid-unassisted", "whosaid-auto")] == [
        "assisted",
        "batched",
        "assisted",  # auto assists audio up to ASSISTED_MAX_DURATION_S
    ]
    # random weights: the DER is meaningless, but it is computed, with and without a collar
    assert 0 <= rows["diarization"]["der"] and 0 <= rows["diarization"]["der_collar_0.25"]
    assert "## Diarization" in (tmp_path / "speed-latest.md").read_text()


@pytest.fixture(scope="module")
def payloads(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from benchmarks.run import prepare_payloads

    return prepare_payloads(tmp_path_factory.mktemp("k6-audio"))


def inspect_k6(script: str, payloads: dict, **env: str) -> subprocess.CompletedProcess:
    """`k6 inspect`: runs the script's init code (audio loading, option parsing) and prints its
    options, without sending a request. `inspect` ignores the process environment, hence -e."""
    from benchmarks.run import K6_DIR, find_k6

    env = {"SHORT_AUDIO": payloads["short"]["path"], "LONG_AUDIO": payloads["long"]["path"], **env}
    variables = [argument for key, value in env.items() for argument in ("-e", f"{key}={value}")]
    return subprocess.run(
        [str(find_k6()), "inspect", *variables, str(K6_DIR / script)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("script", ["transcribe.js", "ramp.js"])
def test_k6_scripts_load_and_declare_error_thresholds(payloads: dict, script: str) -> None:
    inspected = inspect_k6(script, payloads)
    assert inspected.returncode == 0, inspected.stderr
    options = json.loads(inspected.stdout)
    assert options["thresholds"]["http_req_failed"] == ["rate<0.01"]
    assert options["thresholds"]["checks"] == ["rate>0.99"]
    assert "p(95)" in options["summaryTrendStats"]


def test_k6_rejects_an_unknown_scenario(payloads: dict) -> None:
    inspected = inspect_k6("transcribe.js", payloads, SCENARIOS="short_asisted")
    assert inspected.returncode != 0
    assert "unknown scenario short_asisted" in inspected.stdout + inspected.stderr


@pytest.mark.slow
def test_runner_against_a_real_server(tmp_path: Path) -> None:
    from whosaid.cli.main import COMMANDS

    if "serve" not in COMMANDS:
        pytest.skip("the server (`python -m whosaid serve`) is not in this checkout")
    # ASSISTED=auto: the runner's probe meets a server without an assistant, whose refusal must
    # mark the assisted scenario as skipped without counting as a failed request.
    run_script(
        "-m",
        "benchmarks.run",
        "--model",
        "whisper-tiny.en",
        "--scenarios",
        "short_assisted,short_not_assisted",
        "--assisted",
        "auto",
        "--iterations",
        "2",
        "--ramp-stages",
        "1s:1",
        "--skip-speed",
        "--output-dir",
        str(tmp_path),
    )

    result = json.loads(only_file(tmp_path, "k6-*.json").read_text())
    transcribe = result["runs"]["transcribe"]
    assert transcribe["exit_code"] == 0
    summary = transcribe["summary"]
    assert summary["metrics"]["short_not_assisted"]["values"]["count"] == 2
    assert summary["metrics"]["http_req_failed"]["values"]["rate"] == 0
    assert summary["whosaid"]["scenarios"]["short_assisted"]["status"] == "skipped"
    assert result["runs"]["ramp"]["exit_code"] == 0
    table = (tmp_path / "k6-latest.md").read_text()
    assert "| short_not_assisted | 8 |" in table and "skipped: the server refused an assisted request: HTTP 4" in table
    assert (tmp_path / "k6-latest.png").stat().st_size > 0


def test_added_memory_is_the_peak_over_the_rss_after_loading() -> None:
    from benchmarks.asr.speed_report import added_mib, headline_ratios

    ours = {
        "clip": "30", "implementation": "whosaid", "median_s": 2.0,
        "peak_rss_mib": 1300.0, "rss_after_load_mib": 1000.0,
    }
    theirs = {
        "clip": "30", "implementation": "faster-whisper-fp32-greedy", "median_s": 2.5,
        "peak_rss_mib": 800.0, "rss_after_load_mib": 400.0,
    }
    assert added_mib(ours) == 300.0 and added_mib({"peak_rss_mib": 5.0}) is None
    (ratio,) = headline_ratios([ours, theirs])
    assert ratio["memory_ratio"] == 1300.0 / 800.0 and ratio["added_memory_ratio"] == 0.75
    assert ratio["time_ratio"] == 0.8


def test_shifted_silence_is_put_before_the_samples_and_nothing_else_changes() -> None:
    import numpy as np

    from benchmarks.asr.shifted_wer import shifted

    samples = np.arange(1, 5, dtype=np.float32)
    assert np.array_equal(shifted(samples, 0), samples)
    moved = shifted(samples, 20)  # 20 ms at 16 kHz: 320 samples of silence
    assert moved.dtype == np.float32 and moved.shape == (324,)
    assert not moved[:320].any() and np.array_equal(moved[320:], samples)


@pytest.mark.slow
def test_shifted_wer_scores_every_shift_of_every_implementation(tmp_path: Path) -> None:
    import statistics

    from benchmarks.common.wer import word_error_rate

    implementations = ("whosaid", "faster-whisper-fp32-greedy")
    run_script(
        "-m", "benchmarks.asr.shifted_wer", "--model", "whisper-tiny.en", "--clips", "smoke", "--shifts-ms", "0,20",
        "--implementations", ",".join(implementations), "--output-dir", str(tmp_path),
    )

    result = json.loads(only_file(tmp_path, "shifted-wer-*.json").read_text())
    reference = result["settings"]["clips"]["smoke"]["reference"]
    assert reference == "This is Diane in New Jersey."
    assert [row["implementation"] for row in result["rows"]] == list(implementations)
    for row in result["rows"]:
        assert [run["shift_ms"] for run in row["runs"]] == [0, 20]
        wers = [run["wer"] for run in row["runs"]]
        assert wers == [word_error_rate(reference, run["text"]) for run in row["runs"]]
        assert all("new jersey" in run["text"].lower() for run in row["runs"])
        assert (row["mean"], row["min"], row["max"]) == (statistics.fmean(wers), min(wers), max(wers))
    table = (tmp_path / "shifted-wer-latest.md").read_text()
    assert "WER with 0, 20 ms of silence first; whisper-tiny.en" in table
    for row in result["rows"]:
        assert f"| smoke | {row['implementation']} |" in table and f"| {row['mean']:.3f} |" in table


def test_shifted_wer_refuses_an_unknown_implementation() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.asr.shifted_wer", "--implementations", "whosaid,nope"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S,
    )
    assert result.returncode != 0 and "unknown implementation(s) nope; choose from whosaid," in result.stderr


def test_wer_real_normalises_as_whisper_does_and_pools_errors_over_words() -> None:
    from benchmarks.asr.wer_real import errors, pooled

    # Bracketed tags go, case and punctuation do not count, contractions expand on both sides.
    assert errors("I have a [noise] cold, <VOCNOISE> isn't it?", "i have a cold is not it", "en") == (0, 7)
    assert errors("Ça va, Müller?", "ca va muller", "fr") == (2, 3)  # accents are letters here
    assert errors("the cat sat down", "the cat sad", "en") == (2, 4)
    rows = [{"language": "en", "errors": 2, "words": 4}, {"language": "de", "errors": 1, "words": 16}]
    assert pooled(rows) == 3 / 20 and pooled(rows, "en") == 0.5 and pooled(rows, "de") == 1 / 16


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_ASR / "README.md").is_file(), reason=f"no transcribed speech in {SHARED_ASR}")
def test_wer_real_scores_real_clips_in_their_language(tmp_path: Path) -> None:
    from benchmarks.asr.wer_real import clips, errors

    names = ("ljspeech_LJ001-0004", "picovoice_leopard_en")
    assert {clip.name: clip.language for clip in clips() if clip.name in names} == dict.fromkeys(names, "en")
    assert {clip.language for clip in clips()} == {"en", "de", "fr"}
    run_script(
        "-m", "benchmarks.asr.wer_real", "--model", "whisper-tiny.en", "--implementations", "whosaid",
        "--clips", ",".join(names), "--output-dir", str(tmp_path),
    )
    rows = json.loads(only_file(tmp_path, "wer-real-*.json").read_text())["rows"]
    references = {clip.name: clip.reference for clip in clips()}
    assert [row["clip"] for row in rows] == sorted(names)
    for row in rows:
        assert (row["errors"], row["words"]) == errors(references[row["clip"]], row["text"], "en")
        assert row["errors"] <= 0.2 * row["words"]  # read sentences: whisper-tiny.en gets most words
    pooled_wer = sum(row["errors"] for row in rows) / sum(row["words"] for row in rows)
    line = f"| whosaid | greedy (5 beams where Whisper's checks fail) | float32 | {pooled_wer:.3f} | {pooled_wer:.3f} |"
    assert line in (tmp_path / "wer-real-latest.md").read_text()


def test_batch_ray_per_actor_throughput_counts_only_finished_recordings(tmp_path: Path) -> None:
    from benchmarks.server.batch_ray import per_actor

    rows = [
        {"worker": "a:1", "status": "ok", "duration_s": 30.0, "elapsed_s": 10.0},
        {"worker": "a:1", "status": "ok", "duration_s": 30.0, "elapsed_s": 5.0},
        {"worker": "b:2", "status": "ok", "duration_s": 12.0, "elapsed_s": 6.0},
        {"worker": "b:2", "status": "error", "duration_s": None, "elapsed_s": 0.1},
    ]
    table = tmp_path / "results.jsonl"
    table.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert per_actor(table) == {
        "a:1": {"files": 2, "audio_s": 60.0, "busy_s": 15.0, "audio_hours_per_hour": 4.0},
        "b:2": {"files": 1, "audio_s": 12.0, "busy_s": 6.0, "audio_hours_per_hour": 2.0},
    }


def test_memory_growth_points_are_kind_and_minutes() -> None:
    import argparse

    from benchmarks.memory.memory_growth import DEFAULT_POINTS, parse_point

    assert parse_point("speech:20") == ("speech", 20.0) and parse_point("silence:0.5") == ("silence", 0.5)
    assert [parse_point(point)[0] for point in DEFAULT_POINTS].count("speech") == 3
    for bad in ("speech", "music:3", "speech:"):
        with pytest.raises(argparse.ArgumentTypeError, match="KIND:MINUTES"):
            parse_point(bad)


@pytest.mark.slow
def test_decoder_parts_alternates_both_modes_and_finds_the_same_text(tmp_path: Path) -> None:
    """Two rounds on half a minute of meeting speech with whisper-tiny.en: the modes alternate
    (bounded, whole, then whole, bounded), each run in its own process, and the text is the same."""
    result = run_script(
        "-m", "benchmarks.memory.decoder_parts", "--minutes", "0.5", "--rounds", "2",
        "--model", "models/whisper-tiny.en", "--threads", "1", "--output-dir", str(tmp_path),
    )
    rounds = [line.split(":")[0] for line in result.stdout.splitlines() if line.startswith("round ")]
    assert rounds == ["round 1 bounded", "round 1 whole", "round 2 whole", "round 2 bounded"]
    data = json.loads(only_file(tmp_path, "decoder-parts-*.json").read_text())
    assert [run["mode"] for run in data["runs"]] == ["bounded", "whole", "whole", "bounded"]
    assert len({run["text"] for run in data["runs"]}) == 1 and data["runs"][0]["text"].strip()
    assert "same text: True" in (tmp_path / "decoder-parts-latest.md").read_text()
