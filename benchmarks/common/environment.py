"""What a result was measured on: machine, library versions, code revision and load.

Numbers from a shared 2-core machine mean little without the load average that came with them,
and nothing at all without the versions, so every results file carries this.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

REPO_ROOT = Path(__file__).resolve().parents[2]

# What the benchmarks measure: a change here changes the numbers (benchmarks/ itself does not).
CODE_UNDER_TEST = ("whosaid", "handler.py", "config.py", "diarization_utils.py", "requirements.txt")
# Distributions whose versions change the numbers.
PACKAGES = ("torch", "transformers", "ctranslate2", "faster-whisper", "pyannote.audio", "numpy")


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages, as `uptime` prints them."""
    return [round(value, 2) for value in os.getloadavg()]


def usable_cpus() -> int:
    """CPUs this process may run on (affinity and cgroup cpusets), not the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def memory_total_gib() -> Optional[float]:
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    return None


def gpu_name() -> Optional[str]:
    """The first GPU's name from nvidia-smi, without importing torch into the caller."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        output = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return output.strip().splitlines()[0] if output.strip() else None


def package_versions() -> dict[str, Optional[str]]:
    versions: dict[str, Optional[str]] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_revision() -> Optional[str]:
    """HEAD's short hash, with "+dirty" when tracked files differ from it."""
    commit = _git("rev-parse", "--short", "HEAD")
    if commit is None:
        return None
    return commit.strip() + ("+dirty" if code_changes() else "")


def code_changes() -> list[str]:
    """Files of the code under test that differ from HEAD (`git status --porcelain` lines), so
    that a result measured on a working tree in flux says so, and on which files."""
    status = _git("status", "--porcelain", "--", *CODE_UNDER_TEST)
    return [line.strip() for line in (status or "").splitlines() if line.strip()]


def _git(*args: str) -> Optional[str]:
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def utc_minute() -> str:
    """Now, as result files write their "started" and "finished" times."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def result_head(benchmark: str, started: str) -> dict[str, Any]:
    """The fields a result file begins with: which benchmark, when it ran, and on what machine."""
    return {"benchmark": benchmark, "started": started, "finished": utc_minute(), "machine": machine_info()}


def machine_info() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "usable_cpus": usable_cpus(),
        "logical_cpus": os.cpu_count(),
        "memory_gib": memory_total_gib(),
        "gpu": gpu_name(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "git": git_revision(),
        "code_changes": code_changes(),
    }


def describe_machine(info: dict[str, Any]) -> str:
    """One markdown line: what the tables were measured on."""
    packages = ", ".join(f"{name} {version}" for name, version in info["packages"].items() if version)
    gpu = info["gpu"] or "no GPU"
    return (
        f"{info['cpu']}, {info['usable_cpus']} usable CPUs (of {info['logical_cpus']}), "
        f"{info['memory_gib']} GiB RAM, {gpu}; Python {info['python']}; {packages}; "
        f"git {info['git']}"
        + (f" (uncommitted: {', '.join(info['code_changes'])})" if info.get("code_changes") else "")
    )


# torch and CTranslate2 both run their CPU kernels on GNU OpenMP, whose idle threads spin
# (OMP_WAIT_POLICY=active behaviour) before they sleep. On a machine whose cores other work also
# wants, spinning threads steal each other's time (the figures: benchmarks/CHANGELOG.md). PASSIVE keeps
# the numbers steady; "default" leaves the variable as it is.
OMP_WAIT_POLICIES = ("passive", "default", "active")
DEFAULT_OMP_WAIT_POLICY = "passive"


def add_omp_wait_policy_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--omp-wait-policy", choices=OMP_WAIT_POLICIES, default=DEFAULT_OMP_WAIT_POLICY,
        help=f"OMP_WAIT_POLICY for {what}: 'passive' (default) keeps timings steady on a shared "
        "machine, where OpenMP's spinning threads can make runs several times slower and "
        "erratic; 'default' leaves the environment as it is",
    )


def omp_environment(policy: str) -> dict[str, str]:
    """Environment variables that apply `policy` to a child process."""
    return {} if policy == "default" else {"OMP_WAIT_POLICY": policy.upper()}
