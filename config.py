"""Model settings (environment variables) and per-request parameters of the handler.

    ASR_MODEL          Whisper model id or directory (required)
    ASSISTANT_MODEL    assistant for speculative decoding (optional)
    ASSISTED_MAX_DURATION_S  assisted='auto' assists audio up to this long (30 on CUDA, 0 on CPU)
    DIARIZATION_MODEL  pyannote pipeline id or directory (optional)
    HF_TOKEN           token for gated models (a secret)
    DEVICE, DTYPE, ATTN_IMPLEMENTATION   'auto' by default

Request parameters: task, batch_size, assisted, chunk_length_s, sampling_rate, language,
num_speakers, min_speakers, max_speakers. The definitions live in whosaid/config.py.
"""

from whosaid.config import InferenceConfig, ModelSettings, get_model_settings

__all__ = ["InferenceConfig", "ModelSettings", "get_model_settings"]
