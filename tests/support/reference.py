"""The reference the fast paths are checked against: transformers' greedy `generate` on each
speech window (speculative with an assistant), no fallback, through the recognizer's public API."""

from __future__ import annotations

from typing import Any, Optional

from whosaid.audio.loading import Audio
from whosaid.config import WHISPER_WINDOW_S
from whosaid.recognition.recognizer import SpeechRecognizer
from whosaid.recognition.segments import Span, clean_chunks
from whosaid.results import Chunk


def transcribe_with_generate(
    recognizer: SpeechRecognizer, audio: Audio, generate_kwargs: dict[str, Any], *, assistant: Any = None
) -> tuple[Chunk, ...]:
    """Chunks from `generate`, one call per VAD window of at most 30 s."""
    import torch

    language: Optional[str] = generate_kwargs.get("language")
    task = generate_kwargs.get("task", "transcribe")
    default_language = language or (None if recognizer.is_multilingual else "en")
    spans = []
    for window in recognizer.vad.windows(audio.samples, WHISPER_WINDOW_S):
        features = recognizer.features([window.samples(audio.samples)])
        with torch.inference_mode():
            encoder_states = recognizer.model.get_encoder()(features).last_hidden_state
            kwargs = {"assistant_model": assistant} if assistant is not None else {}
            (tokens,) = recognizer.generate_tokens(features, encoder_states, language, task, **kwargs)
        spans += [
            Span(segment.start_s, segment.end_s, recognizer.text(segment.tokens), (), default_language)
            for segment in recognizer.segments(window, tokens)
        ]
    return clean_chunks(spans, audio.duration_s)
