"""What the engine needs from speech recognition: the `Recognizer` protocol, implemented by
`SpeechRecognizer` (Whisper) and by the tests' stand-ins, and the `AsrOutput` it returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

from whosaid.audio.loading import Audio
from whosaid.config import InferenceConfig
from whosaid.recognition.segments import Span
from whosaid.results import Chunk
from whosaid.runtime.cancellation import StopSignal
from whosaid.runtime.device import ModelRuntime

# How a transcript was decoded (AsrOutput.decoding, the response's `decoding`).
ASSISTED = "assisted"
BATCHED = "batched"


@dataclass(frozen=True)
class AsrOutput:
    chunks: tuple[Chunk, ...]
    language: Optional[str]
    decoding: str  # ASSISTED or BATCHED
    # What the response should tell the client: windows whose looping text was cut.
    warnings: tuple[str, ...] = ()


class Recognizer(Protocol):
    """Speech recognition as the engine calls it."""

    @property
    def has_assistant(self) -> bool:
        """Whether an assistant model is loaded (requests may then ask for assisted decoding)."""

    @property
    def runtime(self) -> ModelRuntime:
        """Where and how the model runs, as /ready, /metrics and the start-up log report it."""

    def transcribe(
        self,
        audio: Audio,
        config: InferenceConfig,
        *,
        should_stop: Optional[StopSignal] = None,
        on_window: Optional[Callable[[Sequence[Span]], None]] = None,
    ) -> AsrOutput:
        """The transcript's chunks. `should_stop` is checked between pieces of work (its
        JobStoppedError ends the job); `on_window` gets each window's spans, in order, once
        decoded."""

    def transcribe_tracks(
        self, tracks: Sequence[Audio], config: InferenceConfig, *, should_stop: Optional[StopSignal] = None
    ) -> list[AsrOutput]:
        """Each of several tracks of one recording (a call's channels) transcribed as on its
        own, one AsrOutput each, in order; the tracks' windows may be decoded together."""

    def trimmed(self, margin_s: float) -> "Recognizer":
        """The same recognition (the same models) for short audio heard live: each batch's
        encoder input cut to its audio and `margin_s` more, not Whisper's 30 s."""
