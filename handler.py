"""Hugging Face Inference Endpoints custom handler.

The inference toolkit imports this file with the repository on sys.path, builds
`EndpointHandler(model_dir)` once and calls it per request with
`{"inputs": <base64 str | audio bytes>, "parameters": {...}}`. Models come from environment
variables (ASR_MODEL, ASSISTANT_MODEL, DIARIZATION_MODEL, HF_TOKEN); see config.py.
"""

from __future__ import annotations

import logging
from typing import Any

from whosaid.engine import Engine
from whosaid.errors import InvalidInputError
from whosaid.runtime.cancellation import TimeBudget

logger = logging.getLogger(__name__)


class EndpointHandler:
    def __init__(self, path: str = "") -> None:
        # `path` is the repository the toolkit mounted; the models are named by ModelSettings.
        # A ModelLoadError (DEVICE=cuda where torch cannot use the GPU, a missing model) is
        # raised as is: the endpoint fails to start with its message instead of serving wrong.
        self.engine = Engine.from_settings()
        runtime = self.engine.runtime
        # The toolkit configures the root logger at INFO, so this reaches the endpoint's logs.
        logger.info(
            "whosaid handler ready: device=%s dtype=%s attn_implementation=%s asr_model=%s",
            runtime.device,
            runtime.dtype,
            runtime.attn_implementation,
            runtime.asr_model,
        )
        # The platform has no queue in front of the handler: a runaway request must end on its own.
        self.budget = TimeBudget()

    def __call__(self, data: dict[str, Any]) -> dict[str, Any]:
        """Transcribe (and diarize) one request. Raises the core's typed errors: the toolkit
        turns them into an error response carrying the message. Audio longer than
        MAX_AUDIO_DURATION_S raises AudioTooLongError (code audio_too_long) before any model runs,
        as the server's 413."""
        if not isinstance(data, dict) or "inputs" not in data:
            raise InvalidInputError(
                'the request body must be {"inputs": <base64 audio>, "parameters": {...}}'
            )
        return self.engine.run(data["inputs"], data.get("parameters"), budget=self.budget).to_dict()
