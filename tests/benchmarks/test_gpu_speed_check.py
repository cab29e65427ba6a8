"""scripts/gpu_speed_check.py is run on a GPU machine in one call, where a broken script costs a
GPU session: its CPU smoke run (the 8 s clip, this project and the plain transformers pipeline)
runs here, as `python -m scripts.gpu_speed_check` from the repository root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Slow (the GPU script run as a process): `make test-fast` leaves them to the full suite.
pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_cpu_smoke_run_prints_the_table_with_a_wer_per_row(tmp_path: Path) -> None:
    rows_path = tmp_path / "rows.json"
    result = subprocess.run(
        [sys.executable, "-m", "scripts.gpu_speed_check", "--device", "cpu", "--quick",
         "--implementations", "whosaid,transformers", "--output", str(rows_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| clip | implementation | batch | median s | RTF | WER |" in result.stdout
    rows = json.loads(rows_path.read_text())
    assert [(row["implementation"], row["batch_size"], row["clip"]) for row in rows] == [
        ("whosaid", 1, "short"), ("transformers", 1, "short")
    ]
    for row in rows:
        assert row["audio_s"] == pytest.approx(8.0) and row["median_s"] > 0
        assert "new jersey" in row["text"].lower() and 0 <= row["wer"] < 0.5
        assert f"| short (8 s) | {row['implementation']} | 1 |" in result.stdout


def test_a_gpu_run_without_a_gpu_says_what_to_do() -> None:
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so the message is checked on every machine.
    result = subprocess.run(
        [sys.executable, "-m", "scripts.gpu_speed_check"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
    )
    assert result.returncode == 1
    assert "sees no CUDA GPU; use --device cpu --quick for a smoke run" in result.stderr
