"""scripts/gpu_diarizer_check.py is run on a GPU machine in one call, where a broken script costs
a GPU session: its CPU smoke run (the sample and two AMI snippets) runs here, as
`python -m scripts.gpu_diarizer_check --device cpu` from the repository root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the script run as a process, with the real models

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_cpu_smoke_run_checks_the_segmentation_and_prints_the_der_table() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scripts.gpu_diarizer_check", "--device", "cpu", "--snippets", "2"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    segmentation = next(line for line in lines if line.get("check") == "segmentation")
    assert segmentation["shared_first_convolution"] is True
    assert segmentation["max_abs_difference"] < 1e-3 and segmentation["argmax_agreement"] >= 0.999
    files = [line["file"] for line in lines if line.get("check") == "diarization"]
    assert files == ["sample", "ami_trn00", "ami_trn01"]
    summary = lines[-1]
    assert summary["check"] == "summary" and summary["failed"] is False
    assert summary["sample_der"] <= 0.06  # the bound tests/core/test_builtin_diarizer.py holds
    assert "| file | seconds | DER | speakers |" in result.stdout
