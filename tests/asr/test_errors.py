"""A stage's failure as the core's errors (as_core_errors): what the edges answer with."""

from __future__ import annotations

import pytest
import torch

from whosaid.errors import InferenceError, InvalidAudioError, OutOfMemoryError
from whosaid.runtime.failures import as_core_errors


def test_an_unexpected_failure_is_an_inference_error_naming_the_stage_and_where() -> None:
    with pytest.raises(InferenceError) as raised:
        with as_core_errors("speech recognition", where=" in window 3.0-33.0 s"):
            raise ValueError("shapes (3,) and (4,) not aligned")
    assert str(raised.value) == (
        "speech recognition failed in window 3.0-33.0 s: ValueError: shapes (3,) and (4,) not aligned"
    )
    assert raised.value.code == "inference_error" and isinstance(raised.value.__cause__, ValueError)


def test_running_out_of_device_memory_is_worth_a_retry() -> None:
    with pytest.raises(OutOfMemoryError) as raised:
        with as_core_errors("speaker diarization", where=" in window 3.0-33.0 s"):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert str(raised.value) == (
        "speaker diarization ran out of device memory; retry later or with a smaller batch_size"
    )
    assert raised.value.code == "out_of_memory"


def test_the_cores_own_errors_pass_unchanged() -> None:
    error = InvalidAudioError("the audio could not be decoded")
    with pytest.raises(InvalidAudioError) as raised:
        with as_core_errors("speech recognition"):
            raise error
    assert raised.value is error
