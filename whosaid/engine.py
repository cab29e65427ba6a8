"""The core: decode once, recognise, diarize, attach speakers. Shared by every edge."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from whosaid.audio.loading import Audio, AudioInput, load_audio
from whosaid.config import DEFAULT_MAX_AUDIO_DURATION_S, InferenceConfig, ModelSettings, get_model_settings
from whosaid.errors import InvalidParametersError, ModelLoadError
from whosaid.recognition.protocol import AsrOutput, Recognizer
from whosaid.recognition.recognizer import SpeechRecognizer
from whosaid.recognition.text_deltas import TextDeltas
from whosaid.results import Chunk, Diarization, SpeakerIdentity, SpeakerSegment, SpeakerTurn, Transcript
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
from whosaid.speakers.channels import (
    ChannelResult,
    channel_label,
    is_drowned,
    merge_channels,
    turns_of_words,
    without_crosstalk,
    without_drowned_speech,
)
from whosaid.speakers.diarizer import load_diarizer
from whosaid.speakers.known import KnownVoice, SpeakerIdentifier, decode_reference, load_voice_library
from whosaid.speakers.protocols import Diarizer

logger = logging.getLogger(__name__)
#: Speech regions are judged for crosstalk in pieces of at most this length (split at pauses), so
#: that the other party's faint turn is found apart from the channel's own speech beside it.
DROWNED_REGION_S = 4.0


class JobListener(Protocol):
    """Progress of one job, called from the thread that runs it (streamed responses)."""

    def accepted(self, duration_s: float) -> None:
        """The audio decoded and is within the limits: the job will not fail on its input."""

    def text(self, delta: str) -> None:
        """More of the transcript's text, in order."""


class Engine:
    """Loaded models and the one way to run them. Build once; call from any thread that holds
    the edge's concurrency slot (the models are not meant for parallel calls). Every edge decodes
    through `load_audio` (a file on disk as a Path: `run_job` takes the CLI's files too), so audio
    over `max_audio_duration_s` (MAX_AUDIO_DURATION_S) is refused the same way everywhere, before
    any model runs."""

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
        """A request's audio (or a file on disk, given as a Path), decoded once; AudioTooLongError
        past the length limit, and the stop signal's error when the job is stopped while decoding."""
        return load_audio(
            inputs,
            sampling_rate_hz=config.sampling_rate,
            max_duration_s=self.max_audio_duration_s,
            should_stop=should_stop,
            multichannel=config.multichannel,
        )

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
        """A request whose parameters are parsed, from its raw inputs (or a file's Path) to its
        transcript (the expensive part, for a worker thread). Audio over MAX_AUDIO_DURATION_S (AudioTooLongError)
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
        if audio.channels:
            return self._transcribe_channels(audio, config, warnings, should_stop, on_text, voices)
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

    def _transcribe_channels(
        self,
        audio: Audio,
        config: InferenceConfig,
        warnings: Sequence[str],
        should_stop: Optional[StopSignal],
        on_text: Optional[Callable[[str], None]],
        voices: tuple[KnownVoice, ...],
    ) -> Transcript:
        """multichannel=true on a recording of several channels: each channel transcribed on its
        own (a silent one skipped; silence within one skipped by the speech windows), crosstalk
        dropped (whosaid.speakers.channels), and the channels merged by time. A channel's speaker
        is its channel_names entry, else the known voice it matches, else CHANNEL_N; with a
        diarizer, speakers are found within each channel, and a channel of several speakers
        labels them CHANNEL_N/SPEAKER_MM. The text comes whole to `on_text`, once merged."""
        names = [name.strip() for name in config.channel_names or ()]
        if len(names) > len(audio.channels):
            raise InvalidParametersError(
                f"channel_names gives {len(names)} names, but the audio holds {len(audio.channels)} channels"
            )
        asr_config = config.model_copy(update={"return_timestamps": "word"})
        all_warnings = list(warnings)
        heard, outputs = self._hear_channels(audio, asr_config, should_stop)
        language = next((asr.language for asr in outputs if asr.language), None)
        decoding = outputs[0].decoding if outputs else None
        for asr in outputs:
            all_warnings += [warning for warning in asr.warnings if warning not in all_warnings]
        kept, dropped = without_crosstalk(heard, audio.channels)
        results: list[ChannelResult] = []
        identities: list[SpeakerIdentity] = []
        for channel, track in enumerate(audio.channels):
            if not heard[channel]:
                continue
            chunks = kept[channel]
            base = channel_label(channel, names)
            if self.diarizer is None:
                segments = (SpeakerSegment(base, 0.0, 0.0, "", tuple(chunks), channel),) if chunks else ()
                results.append(ChannelResult(channel, segments, tuple(turns_of_words(chunks, base, channel))))
                continue
            if should_stop is not None:
                should_stop.check()
            release_memory_between_stages(track.duration_s)
            with as_core_errors("speaker diarization"):
                diarization = self.diarizer.diarize(track, config.speaker_hints())
            found: tuple[SpeakerIdentity, ...] = ()
            if self.speaker_identifier is not None and (voices or config.return_speaker_embeddings):
                with as_core_errors("speaker identification"):
                    diarization, found = self.speaker_identifier.identify(
                        track, diarization, voices, with_embeddings=config.return_speaker_embeddings
                    )
            diarization = _channel_speech(diarization, audio.channels, channel)
            segments = assign_speakers(chunks, diarization.exclusive_turns) if chunks else ()
            speakers = sorted({turn.speaker for turn in diarization.turns} | {s.speaker for s in segments})
            known = {identity.speaker for identity in found if identity.name is not None}
            named = channel < len(names)
            labels = {
                speaker: _speaker_label(speaker, base, len(speakers), named=named, known=known) for speaker in speakers
            }
            identities += [
                dataclasses.replace(identity, speaker=labels.get(identity.speaker, identity.speaker))
                for identity in found
            ]
            results.append(
                ChannelResult(
                    channel,
                    tuple(
                        dataclasses.replace(segment, speaker=labels[segment.speaker], channel=channel)
                        for segment in segments
                    ),
                    tuple(SpeakerTurn(t.start_s, t.end_s, labels[t.speaker], channel) for t in diarization.turns),
                )
            )
        chunks, segments, turns = merge_channels(results)
        text = "".join(chunk.text for chunk in chunks).strip()
        if dropped:
            logger.info("multichannel: %d words dropped as crosstalk", dropped)
        if on_text is not None and text:
            on_text(text)
        return Transcript(
            text=text,
            chunks=chunks,
            duration_s=audio.duration_s,
            language=language if language is not None else config.language,
            speakers=segments,
            turns=turns,
            diarized=True,
            decoding=decoding,
            warnings=tuple(all_warnings),
            word_timestamps=config.return_timestamps == "word",
            multilingual=config.multilingual,
            speaker_identities=tuple(identities),
            channels=len(audio.channels),
        )

    def _hear_channels(
        self, audio: Audio, config: InferenceConfig, should_stop: Optional[StopSignal]
    ) -> tuple[list[tuple[Chunk, ...]], list[AsrOutput]]:
        """Each channel's chunks (none for a silent one), and the recognizer's output for each
        channel that is not silent. The other party heard faintly on a channel is silenced
        first, not transcribed and then dropped; the channels' windows are decoded in shared
        batches (SpeechRecognizer.transcribe_tracks)."""
        vad = getattr(self.recognizer, "vad", None)
        channels = [channel for channel, track in enumerate(audio.channels) if not track.is_silent()]
        tracks = []
        for channel in channels:
            track = audio.channels[channel]
            if vad is not None:
                track, silenced_s = without_drowned_speech(
                    audio.channels, channel, vad.speech_regions(track.reader, max_region_s=DROWNED_REGION_S)
                )
                logger.debug("multichannel: channel %d: %.1f s of crosstalk skipped", channel, silenced_s)
            tracks.append(track)
        with as_core_errors("speech recognition"):
            outputs = self.recognizer.transcribe_tracks(tracks, config, should_stop=should_stop)
        heard: list[tuple[Chunk, ...]] = [() for _ in audio.channels]
        for channel, asr in zip(channels, outputs, strict=True):
            heard[channel] = asr.chunks
        return heard, outputs

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


def _channel_speech(diarization: Diarization, channels: Sequence[Audio], channel: int) -> Diarization:
    """A channel's diarization without the turns that are another channel's speech heard faintly."""

    def kept(turns: Sequence[SpeakerTurn]) -> tuple[SpeakerTurn, ...]:
        return tuple(turn for turn in turns if not is_drowned(channels, channel, turn.start_s, turn.end_s))

    return dataclasses.replace(
        diarization, turns=kept(diarization.turns), exclusive_turns=kept(diarization.exclusive_turns)
    )


def _speaker_label(speaker: str, base: str, count: int, *, named: bool, known: set[str]) -> str:
    """The label of a speaker diarized within a channel: the channel's name or label when it is
    the channel's only speaker (a known voice's name when the request did not name the channel);
    among several, a known voice's name, else `base`/SPEAKER_NN."""
    if count == 1:
        return speaker if speaker in known and not named else base
    return speaker if speaker in known else f"{base}/{speaker}"


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
