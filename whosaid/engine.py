"""The core: decode once, recognise, diarize, attach speakers. Shared by every edge."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from whosaid.audio.loading import Audio, AudioInput, load_audio, load_audio_file
from whosaid.config import DEFAULT_MAX_AUDIO_DURATION_S, InferenceConfig, ModelSettings, get_model_settings
from whosaid.errors import InvalidParametersError, ModelLoadError
from whosaid.recognition.protocol import Recognizer
from whosaid.recognition.recognizer import SpeechRecognizer
from whosaid.recognition.text_deltas import TextDeltas
from whosaid.results import Transcript
from whosaid.runtime.cancellation import StopSignal, TimeBudget
from whosaid.runtime.device import ModelRuntime
from whosaid.runtime.failures import as_core_errors
from whosaid.runtime.memory import (
    freeze_loaded_objects,
    memory_released_on_failure,
    release_memory_after,
    release_memory_between_stages,
    unmap_freed_large_blocks,
)
from whosaid.speakers.attribution import assign_speakers
from whosaid.speakers.diarizer import load_diarizer
from whosaid.speakers.known import KnownVoice, SpeakerIdentifier, decode_reference, load_voice_library
from whosaid.speakers.protocols import Diarizer

logger = logging.getLogger(__name__)


class JobListener(Protocol):
    """Progress of one job, called from the thread that runs it (streamed responses)."""

    def accepted(self, duration_s: float) -> None:
        """The audio decoded and is within the limits: the job will not fail on its input."""

    def text(self, delta: str) -> None:
        """More of the transcript's text, in order."""


class Engine:
    """Loaded models and the one way to run them. Build once; call from any thread that holds
    the edge's concurrency slot (the models are not meant for parallel calls). Every edge decodes
    through `load_audio` / `load_audio_file`, so audio over `max_audio_duration_s`
    (MAX_AUDIO_DURATION_S) is refused the same way everywhere, before any model runs."""

    def __init__(
        self,
        recognizer: Recognizer,
        diarizer: Optional[Diarizer] = None,
        *,
        max_audio_duration_s: float = DEFAULT_MAX_AUDIO_DURATION_S,
        speaker_identifier: Optional[SpeakerIdentifier] = None,
    ) -> None:
        self.recognizer = recognizer
        self.diarizer = diarizer
        self.max_audio_duration_s = max_audio_duration_s
        #: Names speakers from known voices (the built-in diarizer's encoder); None without one.
        self.speaker_identifier = speaker_identifier

    @classmethod
    def from_settings(cls, settings: Optional[ModelSettings] = None) -> "Engine":
        settings = settings or get_model_settings()
        started = time.perf_counter()
        recognizer = SpeechRecognizer.from_settings(settings)
        diarizer = load_diarizer(settings) if settings.diarization_model else None
        identifier = _speaker_identifier(settings, recognizer, diarizer)
        engine = cls(
            recognizer, diarizer, max_audio_duration_s=settings.max_audio_duration_s, speaker_identifier=identifier
        )
        runtime = engine.runtime
        # From here on, a request's large tensors go back to the OS when freed.
        unmap_freed_large_blocks()
        freeze_loaded_objects()
        logger.info(
            "models loaded in %.1f s: asr=%s assistant=%s diarization=%s device=%s dtype=%s "
            "attn_implementation=%s",
            time.perf_counter() - started,
            settings.asr_model,
            settings.assistant_model,
            settings.diarization_model,
            runtime.device,
            runtime.dtype,
            runtime.attn_implementation,
        )
        return engine

    @property
    def runtime(self) -> ModelRuntime:
        """Device, dtype and attention of the loaded ASR model."""
        return self.recognizer.runtime

    def parse_parameters(self, parameters: Optional[dict[str, Any]]) -> tuple[InferenceConfig, list[str]]:
        return InferenceConfig.from_parameters(
            parameters,
            has_assistant=self.recognizer.has_assistant,
            has_diarizer=self.diarizer is not None,
        )

    def load_audio(
        self, inputs: AudioInput, config: InferenceConfig, *, should_stop: Optional[StopSignal] = None
    ) -> Audio:
        """A request's audio, decoded once; AudioTooLongError past the length limit, and the
        stop signal's error when the job is stopped while decoding."""
        return load_audio(
            inputs,
            sampling_rate_hz=config.sampling_rate,
            max_duration_s=self.max_audio_duration_s,
            should_stop=should_stop,
        )

    def load_audio_file(self, path: Path) -> Audio:
        return load_audio_file(path, max_duration_s=self.max_audio_duration_s)

    def run(
        self,
        inputs: AudioInput,
        parameters: Optional[dict[str, Any]] = None,
        *,
        budget: Optional[TimeBudget] = None,
    ) -> Transcript:
        """A request as the handler gets it: raw inputs and a parameters dict. With `budget`,
        the job stops with TimeBudgetExceededError once its time for this audio is spent."""
        config, warnings = self.parse_parameters(parameters)
        return self.run_job(inputs, config, warnings=warnings, budget=budget)

    def run_job(
        self,
        inputs: AudioInput,
        config: InferenceConfig,
        *,
        warnings: Sequence[str] = (),
        stop: Optional[StopSignal] = None,
        budget: Optional[TimeBudget] = None,
        listener: Optional[JobListener] = None,
    ) -> Transcript:
        """A request whose parameters are parsed, from its raw inputs to its transcript (the
        expensive part, for a worker thread). Audio over MAX_AUDIO_DURATION_S (AudioTooLongError)
        and known-speaker references that are not usable fail first, before `budget` starts on
        `stop` and before `listener` hears that the audio is accepted. Memory is handed back when
        the job fails, and after long audio."""
        signal = StopSignal() if stop is None else stop

        # A function of its own: when it raises, its frame (and the audio it holds) is finished,
        # so memory_released_on_failure can drop it.
        started_s = time.monotonic()

        def job() -> Transcript:
            audio = self.load_audio(inputs, config, should_stop=signal)
            voices = self.known_voices(config)
            if budget is not None:
                # Counted from the job's start: decoding hours of audio takes its share too.
                signal.start_budget(budget, audio.duration_s, started_monotonic_s=started_s)
            if listener is not None:
                listener.accepted(audio.duration_s)
            return self.transcribe(
                audio,
                config,
                warnings=warnings,
                should_stop=signal,
                on_text=listener.text if listener is not None else None,
                voices=voices,
            )

        with memory_released_on_failure():
            transcript = job()
        release_memory_after(transcript.duration_s)
        return transcript

    def transcribe(
        self,
        audio: Audio,
        config: InferenceConfig,
        *,
        warnings: Sequence[str] = (),
        should_stop: Optional[StopSignal] = None,
        on_text: Optional[Callable[[str], None]] = None,
        voices: Optional[tuple[KnownVoice, ...]] = None,
    ) -> Transcript:
        """`on_text` gets the transcript's text piece by piece, a piece per window with text
        once its batch is decoded, from this thread; the pieces join into the returned
        transcript's `text` exactly. `voices`: `known_voices(config)`, when the caller has
        checked the references already."""
        # References are checked first: a bad one fails the request before any model runs on it.
        if voices is None:
            voices = self.known_voices(config)
        if audio.is_silent():
            # Whisper invents text ("Thank you for watching") on silence; answer with nothing.
            return Transcript(
                text="",
                chunks=(),
                duration_s=audio.duration_s,
                language=config.language,
                diarized=self.diarizer is not None,
                warnings=tuple(warnings),
            )
        with as_core_errors("speech recognition"):
            # Speakers are attributed word by word, so a diarizer needs the words' times (the
            # response lists them only when the request asked).
            asr_config = config
            if self.diarizer is not None:
                asr_config = config.model_copy(update={"return_timestamps": "word"})
            on_window = TextDeltas(on_text).add_window if on_text is not None else None
            asr = self.recognizer.transcribe(audio, asr_config, should_stop=should_stop, on_window=on_window)
        speakers, turns, identities = (), (), ()
        if self.diarizer is not None:
            if should_stop is not None:
                should_stop.check()
            # What speech recognition freed stays in the heap's arenas, fragmented, and the
            # diarizer's peak would come on top of it: hand it back first.
            release_memory_between_stages(audio.duration_s)
            with as_core_errors("speaker diarization"):
                diarization = self.diarizer.diarize(audio, config.speaker_hints())
            if self.speaker_identifier is not None and (voices or config.return_speaker_embeddings):
                with as_core_errors("speaker identification"):
                    diarization, identities = self.speaker_identifier.identify(
                        audio, diarization, voices, with_embeddings=config.return_speaker_embeddings
                    )
            turns = diarization.turns
            speakers = assign_speakers(asr.chunks, diarization.exclusive_turns)
        return Transcript(
            text="".join(chunk.text for chunk in asr.chunks).strip(),
            chunks=asr.chunks,
            duration_s=audio.duration_s,
            language=asr.language,
            speakers=speakers,
            turns=turns,
            diarized=self.diarizer is not None,
            decoding=asr.decoding,
            warnings=(*warnings, *asr.warnings),
            word_timestamps=config.return_timestamps == "word",
            multilingual=config.multilingual,
            speaker_identities=identities,
        )

    def known_voices(self, config: InferenceConfig) -> tuple[KnownVoice, ...]:
        """The voice library plus the request's references, decoded and embedded; a reference
        that is not usable audio is an InvalidAudioError naming its speaker."""
        references = config.known_speaker_references_given()
        if self.speaker_identifier is None:
            if references or config.return_speaker_embeddings:
                raise InvalidParametersError(
                    "known speakers and speaker embeddings need the built-in diarizer: start the "
                    "service with DIARIZATION_MODEL=builtin"
                )
            return ()
        decoded = [
            (name, decode_reference(name, reference, max_duration_s=self.max_audio_duration_s))
            for name, reference in references
        ]
        with as_core_errors("speaker identification"):
            return self.speaker_identifier.voices(decoded)


def _speaker_identifier(
    settings: ModelSettings, recognizer: SpeechRecognizer, diarizer: Optional[Diarizer]
) -> Optional[SpeakerIdentifier]:
    """Known speakers with the built-in diarizer: its CAM++ encoder embeds the voices, and
    VOICES_DIR is embedded here, once."""
    from whosaid.speakers.builtin import BuiltinDiarizer

    if not isinstance(diarizer, BuiltinDiarizer):
        if settings.voices_dir:
            raise ModelLoadError("VOICES_DIR needs the built-in diarizer: set DIARIZATION_MODEL=builtin")
        return None
    identifier = SpeakerIdentifier(diarizer.embedding, recognizer.vad, threshold=settings.known_speaker_threshold)
    if settings.voices_dir:
        identifier.library = load_voice_library(Path(settings.voices_dir), identifier)
    return identifier
