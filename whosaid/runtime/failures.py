"""One stage of a request's failures made into the core's errors (whosaid.errors), so that the
edges see only typed errors: the device running out of memory, or anything unexpected."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

from whosaid.errors import InferenceError, OutOfMemoryError, WhosaidError
from whosaid.runtime.device import is_out_of_memory

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def as_core_errors(stage: str, *, where: str = "") -> Iterator[None]:
    """Around one stage of a request ("speech recognition"): our own errors pass through; the
    device running out of memory becomes OutOfMemoryError (a 5xx, worth a retry); any other
    exception is logged and becomes an InferenceError naming the stage (and `where` in it, such
    as " in window 3.0-33.0 s"), with the original as its cause."""
    try:
        yield
    except WhosaidError:
        raise
    except Exception as error:
        if is_out_of_memory(error):
            raise OutOfMemoryError(
                f"{stage} ran out of device memory; retry later or with a smaller batch_size"
            ) from error
        logger.exception("%s failed%s", stage, where)
        raise InferenceError(f"{stage} failed{where}: {type(error).__name__}: {error}") from error
