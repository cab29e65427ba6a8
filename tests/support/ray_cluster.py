"""One local Ray cluster shared by the tests that need one (Ray's own advice: starting a cluster
costs seconds, so tests share it): two CPUs, no dashboard, a small object store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_CPUS = 2


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """The cluster's address, for drivers started as processes (`--address`). Its workers import
    this checkout's `whosaid` (PYTHONPATH as the cluster starts), whatever is installed."""
    import ray

    # Tests reach no network: Ray would report usage statistics.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), saved)))
    try:
        ray.init(
            num_cpus=CLUSTER_CPUS,
            include_dashboard=False,
            object_store_memory=256 * 1024 * 1024,
            log_to_driver=False,
        )
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def wait_until_idle(timeout_s: float = 60.0) -> None:
    """Until every CPU of the cluster is free again: the actors of a finished or killed driver
    are gone (Ray stops a job's actors when its driver ends, within seconds)."""
    import time

    import ray

    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0.0) < CLUSTER_CPUS:
        assert time.monotonic() < deadline, f"the cluster still runs actors: {ray.available_resources()}"
        time.sleep(0.2)
