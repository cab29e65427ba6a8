"""whosaid.runtime.parallel: batches side by side on one thread each, in order, the thread count
put back afterwards, and the same result whatever the thread count."""

from __future__ import annotations

import threading

import pytest
import torch

from tests.support.threads import torch_threads
from whosaid.runtime.parallel import map_batches, one_thread_per_operation


def test_batches_run_in_order_on_one_thread_each_and_the_count_is_put_back() -> None:
    seen: list[tuple[int, int, bool]] = []

    def work(batch: int) -> int:
        seen.append((batch, torch.get_num_threads(), torch.is_inference_mode_enabled()))
        return batch * 10

    with torch_threads(2):
        assert map_batches(work, list(range(7)), side_by_side=True) == [0, 10, 20, 30, 40, 50, 60]
        assert torch.get_num_threads() == 2
    assert sorted(seen) == [(batch, 1, True) for batch in range(7)]


def test_two_threads_run_batches_at_once() -> None:
    both_started = threading.Barrier(2, timeout=10)

    def work(batch: int) -> int:
        both_started.wait()  # breaks (BrokenBarrierError) unless two batches run at the same time
        return batch

    with torch_threads(2):
        assert map_batches(work, [1, 2], side_by_side=True) == [1, 2]


def test_the_count_is_put_back_when_a_batch_fails() -> None:
    def work(batch: int) -> int:
        raise ValueError(f"batch {batch}")

    with torch_threads(2):
        with pytest.raises(ValueError, match="batch"):
            map_batches(work, [1, 2, 3], side_by_side=True)
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError, match="inside"):
            with one_thread_per_operation():
                assert torch.get_num_threads() == 1
                raise RuntimeError("inside")
        assert torch.get_num_threads() == 2


def test_the_result_does_not_depend_on_the_thread_count() -> None:
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(256, 256, generator=generator)
    batches = [torch.randn(8, 256, generator=generator) for _ in range(5)]
    results = {}
    for threads in (1, 2):
        with torch_threads(threads):
            results[threads] = torch.cat(
                map_batches(lambda x: torch.tanh(x @ weights) @ weights, batches, side_by_side=True)
            )
    assert torch.equal(results[1], results[2])


def test_overlapping_blocks_put_the_count_back_whatever_order_they_end_in() -> None:
    # Two jobs diarizing at once (MAX_CONCURRENT_JOBS=2): the first to start ends first.
    with torch_threads(2):
        first = one_thread_per_operation()
        second = one_thread_per_operation()
        first.__enter__()
        second.__enter__()
        assert torch.get_num_threads() == 1
        first.__exit__(None, None, None)
        assert torch.get_num_threads() == 1  # the second job still runs
        second.__exit__(None, None, None)
        assert torch.get_num_threads() == 2


def test_not_side_by_side_runs_in_order_with_the_thread_count_untouched() -> None:
    seen: list[tuple[int, int, bool, str]] = []

    def work(batch: int) -> int:
        seen.append(
            (batch, torch.get_num_threads(), torch.is_inference_mode_enabled(), threading.current_thread().name)
        )
        return -batch

    with torch_threads(2):
        assert map_batches(work, [3, 1, 2], side_by_side=False) == [-3, -1, -2]
    caller = threading.current_thread().name
    assert seen == [(3, 2, True, caller), (1, 2, True, caller), (2, 2, True, caller)]
