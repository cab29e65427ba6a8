"""The engine behind the server, loaded once in a background thread at start-up.

Loading takes from seconds to minutes (downloads, moving weights to the GPU); doing it in the
background lets /health answer at once and /ready report progress, as orchestrators expect.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

from whosaid.engine import Engine
from whosaid.errors import WhosaidError
from whosaid.server.errors import ApiError

logger = logging.getLogger(__name__)

EngineFactory = Callable[[], Engine]
#: Seconds a client should wait before retrying while the models load.
LOADING_RETRY_AFTER_S = 5


class EngineState:
    """loading -> ready, or loading -> failed. Read from any thread; written once, by the loader."""

    def __init__(self, factory: EngineFactory) -> None:
        self._factory = factory
        self._engine: Optional[Engine] = None
        self._failure: Optional[str] = None
        self._thread: Optional[threading.Thread] = None
        self.load_duration_s: Optional[float] = None

    def start_loading(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._load, name="whosaid-model-loader", daemon=True)
            self._thread.start()

    def _load(self) -> None:
        started = time.perf_counter()
        try:
            engine = self._factory()
        except WhosaidError as error:
            self._failure = str(error)
            logger.error("models failed to load: %s", error, exc_info=error)
        except Exception as error:  # noqa: BLE001 - any failure must reach /ready, not kill a thread silently
            self._failure = f"model loading failed: {type(error).__name__}: {error}"
            logger.exception("models failed to load")
        else:
            self.load_duration_s = time.perf_counter() - started
            self._engine = engine

    @property
    def ready(self) -> bool:
        return self._engine is not None

    @property
    def engine(self) -> Optional[Engine]:
        """The loaded engine, None while loading or after a failure."""
        return self._engine

    def require_engine(self) -> Engine:
        """The loaded engine, or the 503 that explains why there is none."""
        if self._engine is not None:
            return self._engine
        raise self.not_ready_error()

    def not_ready_error(self) -> ApiError:
        if self._failure is not None:
            # Permanent until an operator fixes the settings and restarts: no Retry-After.
            return ApiError(503, "model_load_error", self._failure)
        return ApiError(
            503,
            "model_loading",
            "the models are still loading; retry shortly",
            headers={"Retry-After": str(LOADING_RETRY_AFTER_S)},
        )
