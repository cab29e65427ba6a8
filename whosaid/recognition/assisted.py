"""When a request is decoded with the assistant: the rule behind `assisted: "auto"`."""

from __future__ import annotations

from typing import Any

#: assisted="auto" assists audio up to this many seconds, by device type, unless
#: ASSISTED_MAX_DURATION_S says otherwise. CPU: speculative decoding lost at every length
#: measured (benchmarks/asr/assisted.py with a make-assistant assistant, untuned and tuned), so 'auto'
#: never assists there. CUDA: one Whisper window, where published figures for whisper-large-v3
#: with distil-large-v3 show the gain turn into a loss. The numbers: benchmarks/CHANGELOG.md,
#: "Speculative decoding on CPU".
DEFAULT_ASSISTED_MAX_DURATION_S = {"cpu": 0.0, "cuda": 30.0}


def assisted_max_duration_s(settings: Any, device_type: str) -> float:
    """The longest audio 'auto' may assist: ASSISTED_MAX_DURATION_S, or the default for the
    device the models run on (the crossover belongs to the pair of models and the device)."""
    limit = settings.assisted_max_duration_s
    if limit is None:
        limit = DEFAULT_ASSISTED_MAX_DURATION_S.get(device_type, 0.0)
    return float(limit)


def assists(assistant: Any, config: Any, duration_s: float, max_duration_s: float) -> bool:
    """The request's `assisted` resolved: true and false as sent; 'auto' assists when an
    assistant is loaded, the request did not ask for batches of several windows (an explicit
    `batch_size` above 1), and the audio lasts at most `max_duration_s`, the pair's crossover duration.
    Speculative decoding runs one window at a time, so the longer the audio, the more windows
    batched decoding decodes together for the price of one."""
    if config.assisted != "auto":
        return bool(config.assisted)
    if assistant is None or ("batch_size" in config.model_fields_set and config.batch_size > 1):
        return False
    return duration_s <= max_duration_s
