"""Whisper speech recognition: model loading, and transcription of the speech windows the VAD
finds, decoded in batches (greedy, the lean loop of whosaid.recognition.greedy) or one at a time with
speculative decoding (assisted). Both paths fall back to beam search where Whisper's own quality
checks fail, so they give the same transcript; the assistant only changes how fast. Both read
the request's DecodingOptions the same way: prompt and hotwords as previous text, the language
once or per window, and word timestamps (whosaid.recognition.word_timing) for the windows decoded.

A batch of windows goes through named stages (`SpeechRecognizer._transcribe_track_windows` reads
them top to bottom), each a function over one `WindowDecoding` per window: detect language, decode,
retry with beams, cut loops, split segments, time words, to audio times, to spans; then the rest of
each window whose decoding stopped short, from where it stopped, through the same stages. A batch holds
one audio's windows (`transcribe`), or those of several tracks of one recording, a call's channels
(`transcribe_tracks`), each window cut from its track. A segment has one
shape from the decoder to the spans: whosaid.recognition.segments.DecodedSegment."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TypeVar

import numpy as np

from whosaid.audio.loading import Audio
from whosaid.audio.vad import (
    JOINED_WINDOW_PAUSE_S,
    SpeechWindow,
    VoiceActivityDetector,
    plan_fewest_windows,
    plan_joined_windows,
    plan_windows,
)
from whosaid.config import WHISPER_SAMPLE_RATE_HZ, WHISPER_WINDOW_S, InferenceConfig, ModelSettings
from whosaid.errors import InferenceError, InvalidParametersError
from whosaid.recognition.encoding import MEL_FRAMES_PER_S, encode_frames
from whosaid.recognition.greedy import (
    WHISPER_TIME_PRECISION_S,
    FallbackOptions,
    GreedyWhisperDecoder,
    WindowTokens,
    complete_segments,
    is_repetitive,
    is_silence,
    left_undecoded_from,
    needs_fallback,
    split_segments,
)
from whosaid.recognition.loading import load_assistant, load_whisper
from whosaid.recognition.logits_rules import DecodingOptions
from whosaid.recognition.protocol import ASSISTED, BATCHED, AsrOutput
from whosaid.recognition.segments import DecodedSegment, Span, clean_chunks
from whosaid.recognition.word_timing import DecodedWindow, WordTimer
from whosaid.results import Word
from whosaid.runtime.cancellation import StopSignal
from whosaid.runtime.device import ModelRuntime
from whosaid.runtime.failures import as_core_errors
from whosaid.runtime.memory import release_memory_between_stages

W = TypeVar("W")  # a window of a batch: a SpeechWindow, or a TrackWindow
# With per-window languages, a pause this long between speech regions (about 1 s of silence:
# the VAD pads each region by 0.2 s) ends a window, so that a language switch at a pause starts
# a window of its own; windows are otherwise packed up to 30 s and would hold both languages.
LANGUAGE_SWITCH_PAUSE_S = 0.6
# Windows per encoder pass (see SpeechRecognizer.encode).
ENCODER_WINDOWS_PER_PASS_CPU = 1
ENCODER_WINDOWS_PER_PASS_GPU = 8
# On CPU, the most memory the greedy decoder's cross-attention keys and values may take at once:
# a batch of more windows is decoded in parts of at most that many (SpeechRecognizer.decoder_rows).
# Each window holds them for every decoder layer (whisper-base: 6 x 2 x 1500 frames x 512 x 4
# bytes, 37 MB), so a batch of 24 held 0.9 GB whatever the recording's length; the encoder still
# runs over the whole batch (benchmarks/CHANGELOG.md, "Memory against recording length").
DECODER_CROSS_BYTES_CPU = 320 * 2**20
# A window whose tokens leave its rest undecoded (greedy.left_undecoded_from) is decoded again
# from there, as openai/whisper's next window starts there, when at least this much of it is left
# and its tokens reached at least this far: less is the VAD's padding after the last words, and
# every further pass then moves on by a second at least.
UNDECODED_REST_MIN_S = 1.0
#: A trimmed recognizer's (`trimmed`) cap on the tokens of a window: this many per second of its
#: audio, plus TRIMMED_TOKENS_BASE. Fast speech is a few tokens a second in every language; a loop
#: on a short input would otherwise run to the model's 448 positions, then again with beams.
TRIMMED_TOKENS_PER_S = 15.0
TRIMMED_TOKENS_BASE = 20
#: A trimmed recognizer's window that says a phrase of 2 to this many words three times in a row
#: is decoded again with beams (or left out, for drafts): a whole short sentence may loop.
TRIMMED_LOOP_PHRASE_WORDS = 12


class SpeechRecognizer:
    """A loaded Whisper model (and optional assistant), ready to transcribe `Audio`: the
    Recognizer the engine runs in production."""

    def __init__(
        self,
        model: Any,
        processor: Any,
        assistant: Any = None,
        vad: Optional[VoiceActivityDetector] = None,
        *,
        fallback: FallbackOptions = FallbackOptions(),
        language_switch_pause_s: float = LANGUAGE_SWITCH_PAUSE_S,
        assisted_max_duration_s: float = 0.0,
        window_pause_s: Optional[float] = None,
        encoder_margin_s: Optional[float] = None,
    ) -> None:
        self.model = model
        self.processor = processor
        self.assistant = assistant
        self.vad = vad if vad is not None else VoiceActivityDetector.load()
        self.fallback = fallback
        self.language_switch_pause_s = language_switch_pause_s
        # The longest audio 'auto' assists (whosaid.recognition.assisted.assisted_max_duration_s).
        self.assisted_max_duration_s = assisted_max_duration_s
        # None: contiguous windows, pauses kept; else speech joined, pauses cut to this (vad.py).
        self.window_pause_s = window_pause_s
        # None: every window encoded as Whisper's 30 s; else only its audio and this much of the
        # padding after it (`trimmed`).
        self.encoder_margin_s = encoder_margin_s
        # None: a window may decode as many tokens as the model's positions allow; else at most
        # this many per second of its audio (plus TRIMMED_TOKENS_BASE; `trimmed`).
        self.max_tokens_per_s: Optional[float] = None
        # False: a window failing Whisper's checks is left out, not decoded again with beams.
        self.retry_with_beams = True
        self.decoder = GreedyWhisperDecoder(model, fallback)
        self.word_timer = WordTimer(model, processor.tokenizer)
        generation_config = model.generation_config
        self.is_multilingual = bool(getattr(generation_config, "is_multilingual", False)) and bool(
            getattr(generation_config, "lang_to_id", None)
        )
        self.languages: dict[str, int] = dict(getattr(generation_config, "lang_to_id", None) or {})

    @classmethod
    def from_settings(cls, settings: ModelSettings) -> "SpeechRecognizer":
        from whosaid.recognition.assisted import assisted_max_duration_s

        model, processor = load_whisper(settings)
        assistant = None
        if settings.assistant_model:
            assistant = load_assistant(settings.assistant_model, model, settings)
        max_duration_s = assisted_max_duration_s(settings, model.device.type)
        pause_s = JOINED_WINDOW_PAUSE_S if settings.speech_windows == "joined" else None
        return cls(model, processor, assistant, assisted_max_duration_s=max_duration_s, window_pause_s=pause_s)

    def trimmed(self, margin_s: float, *, retry_with_beams: bool = True) -> "SpeechRecognizer":
        """This recognizer (the same models) encoding each batch's audio and `margin_s` of the
        padding after it, in whole seconds, instead of Whisper's 30 s: a short window's encoder
        pass costs about its length, not 30 s's. For live captions, whose turns are seconds long;
        Whisper was trained on 30 s inputs, so the margin keeps the padding its timestamps and
        end-of-text are read against (benchmarks/CHANGELOG.md gives the WER per margin). Its
        windows decode at most TRIMMED_TOKENS_PER_S tokens per second of their audio: a second of
        audio that sends Whisper into a loop costs a fraction of a second, not the tens of seconds
        that 448 tokens greedy and again with beams take. Without `retry_with_beams`, a window
        whose greedy tokens fail Whisper's checks is left out instead of decoded again with beams
        (a draft that a later decoding replaces anyway). A window that says a phrase three times
        in a row fails the checks too (`FallbackOptions.loop_phrase_words`): a turn's loop is too
        short for the compression ratio to tell."""
        trimmed = copy.copy(self)
        trimmed.fallback = dataclasses.replace(self.fallback, loop_phrase_words=TRIMMED_LOOP_PHRASE_WORDS)
        trimmed.encoder_margin_s = margin_s
        trimmed.max_tokens_per_s = TRIMMED_TOKENS_PER_S
        trimmed.retry_with_beams = retry_with_beams
        return trimmed

    @property
    def has_assistant(self) -> bool:
        return self.assistant is not None

    @functools.cached_property
    def runtime(self) -> ModelRuntime:
        """Read once from the loaded model: what it really runs with, not what was asked."""
        return ModelRuntime.of(self.model)

    def uses_assistant(self, config: InferenceConfig, duration_s: float) -> bool:
        """'auto' assists up to the measured crossover duration (whosaid.recognition.assisted.assists)."""
        from whosaid.recognition.assisted import assists

        return assists(self.assistant, config, duration_s, self.assisted_max_duration_s)

    def decoding_options(self, config: InferenceConfig) -> DecodingOptions:
        """The request's decoder options, checked against this model."""
        language = self._resolve_language(config)
        return DecodingOptions.for_request(
            config,
            self.model.generation_config,
            language=language,
            # A given language forces one; an English-only model has nothing to detect.
            multilingual=config.multilingual and language is None and self.is_multilingual,
        )

    def transcribe(
        self,
        audio: Audio,
        config: InferenceConfig,
        *,
        should_stop: Optional[StopSignal] = None,
        on_window: Optional[Callable[[Sequence[Span]], None]] = None,
    ) -> AsrOutput:
        """`should_stop` is checked before each window batch: a job stopped there (time budget
        spent, client gone, shutdown) raises its JobStoppedError and frees the models.
        `on_window` gets each window's spans (none for a silent window) once its batch is
        decoded, in order (streamed responses, progress); then the first batch is one window
        (window_batches), so the first text comes after one window's decoding."""
        options = self.decoding_options(config)
        language = options.language
        assisted = self.uses_assistant(config, audio.duration_s)
        windows = self._windows(audio, config.chunk_length_s, multilingual=options.multilingual)
        batch_size = 1 if assisted else config.effective_batch_size
        spans: list[Span] = []
        warnings: list[str] = []
        first_alone = on_window is not None or bool(options.initial_prompt)
        batches = window_batches([TrackWindow(0, window) for window in windows], batch_size, first_alone=first_alone)
        for number, batch in enumerate(batches):
            assistant = self.assistant if assisted else None
            window_spans, (language,), batch_warnings = self._transcribe_batch(
                (audio,), batch, number, [language], options, prompted=not number, assistant=assistant, stop=should_stop
            )
            warnings += [warning for warning in batch_warnings if warning is not None]
            for one_window_spans in window_spans:
                spans += one_window_spans
                if on_window is not None:
                    on_window(one_window_spans)
        return AsrOutput(
            chunks=clean_chunks(spans, audio.duration_s),
            language=language or self._default_language(),
            decoding=ASSISTED if assisted else BATCHED,
            warnings=tuple(warnings),
        )

    def transcribe_tracks(
        self, tracks: Sequence[Audio], config: InferenceConfig, *, should_stop: Optional[StopSignal] = None
    ) -> list[AsrOutput]:
        """Several tracks of one recording (a call's channels), one AsrOutput each, in order: each
        track's own windows, language and prompt as `transcribe` gives it them, but the windows of
        all the tracks decoded in shared batches, fewer and fuller than a track's alone. A track's
        windows are joined across its pauses where that takes fewer (plan_fewest_windows). With
        the assistant (a window at a time), the tracks go one by one. `should_stop` as in
        `transcribe`."""
        options = self.decoding_options(config)
        if not tracks or self.uses_assistant(config, max(track.duration_s for track in tracks)):
            return [self.transcribe(track, config, should_stop=should_stop) for track in tracks]
        windows = [
            TrackWindow(number, window)
            for number, track in enumerate(tracks)
            for window in self._windows(track, config.chunk_length_s, multilingual=options.multilingual, fewest=True)
        ]
        batches = track_batches(windows, config.effective_batch_size, prompted=bool(options.initial_prompt))
        spans, languages, warnings = self._transcribe_track_batches(tracks, batches, options, should_stop)
        return [
            AsrOutput(
                chunks=clean_chunks(spans[number], track.duration_s),
                language=languages[number] or self._default_language(),
                decoding=BATCHED,
                warnings=tuple(warnings[number]),
            )
            for number, track in enumerate(tracks)
        ]

    def _transcribe_track_batches(
        self,
        tracks: Sequence[Audio],
        batches: Sequence[tuple[Sequence[TrackWindow], bool]],
        options: DecodingOptions,
        should_stop: Optional[StopSignal],
    ) -> tuple[list[list[Span]], list[Optional[str]], list[list[str]]]:
        """`track_batches`' batches decoded in turn: each track's spans, language and warnings."""
        languages = [options.language] * len(tracks)
        spans: list[list[Span]] = [[] for _ in tracks]
        warnings: list[list[str]] = [[] for _ in tracks]
        for number, (batch, prompted) in enumerate(batches):
            window_spans, languages, window_warnings = self._transcribe_batch(
                tracks, batch, number, languages, options, prompted=prompted, stop=should_stop
            )
            for window, one_window_spans, warning in zip(batch, window_spans, window_warnings, strict=True):
                spans[window.track] += one_window_spans
                warnings[window.track] += [warning] if warning is not None else []
        return spans, languages, warnings

    def _transcribe_batch(
        self,
        tracks: Sequence[Audio],
        windows: Sequence[TrackWindow],
        number: int,
        languages: Sequence[Optional[str]],
        options: DecodingOptions,
        *,
        prompted: bool,
        assistant: Any = None,
        stop: Optional[StopSignal] = None,
    ) -> tuple[list[list[Span]], list[Optional[str]], list[Optional[str]]]:
        """The `number`th batch of windows (`_transcribe_track_windows`), conditioned on the
        initial prompt when `prompted`. `stop` is checked before it, and by the lean loop at
        every token."""
        if stop is not None:
            stop.check()
        if number:
            # What the last batch freed, back to the OS before this one peaks on top of it.
            release_memory_between_stages(max(track.duration_s for track in tracks))
        previous = self.previous_tokens(options, first_window=prompted)
        # The whole request fails: say where, so that the audio can be checked or cut there.
        with as_core_errors("speech recognition", where=f" in {_span_name([one.window for one in windows])}"):
            return self._transcribe_track_windows(
                tracks, windows, languages, options, previous, assistant=assistant, should_stop=stop
            )

    def _windows(
        self, audio: Audio, max_window_s: float, *, multilingual: bool, fewest: bool = False
    ) -> list[SpeechWindow]:
        """The speech windows of `audio`: contiguous, or joined as the recognizer is set
        (`window_pause_s`); with `fewest` and contiguous windows set, joined where that takes
        fewer (plan_fewest_windows); with `multilingual`, a window ends at a language switch's pause."""
        pause_s = self.window_pause_s

        def plan(regions: Sequence[tuple[float, float]]) -> list[SpeechWindow]:
            if pause_s is not None:
                return plan_joined_windows(regions, max_window_s, pause_s)
            if fewest:
                return plan_fewest_windows(regions, max_window_s, JOINED_WINDOW_PAUSE_S)
            return plan_windows(regions, max_window_s)

        regions = self.vad.speech_regions(audio.reader, max_region_s=max_window_s)
        if not multilingual:
            return plan(regions)
        windows: list[SpeechWindow] = []
        group: list[tuple[float, float]] = []
        for region in regions:
            if group and region[0] - group[-1][1] >= self.language_switch_pause_s:
                windows += plan(group)
                group = []
            group.append(region)
        return windows + plan(group)

    def previous_tokens(self, options: DecodingOptions, *, first_window: bool) -> list[int]:
        """The text a window is conditioned on, as faster-whisper builds it: the hotwords on every
        window, then the initial prompt on the first (GreedyWhisperDecoder.prompt keeps the last
        223 tokens, half of Whisper's context)."""
        texts = [options.hotwords] + ([options.initial_prompt] if first_window else [])
        tokenizer = self.processor.tokenizer
        return [token for text in texts if text for token in tokenizer.encode(" " + text, add_special_tokens=False)]

    def _default_language(self) -> Optional[str]:
        return None if self.is_multilingual else "en"

    def _resolve_language(self, config: InferenceConfig) -> Optional[str]:
        from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

        if not self.is_multilingual:
            if config.language not in (None, "en", "english"):
                raise InvalidParametersError(
                    f"this model only understands English; language={config.language!r} needs a "
                    "multilingual Whisper model"
                )
            if config.task == "translate":
                raise InvalidParametersError(
                    "task='translate' needs a multilingual Whisper model; this one is English-only"
                )
            return None
        if config.language is None:
            return None
        code = TO_LANGUAGE_CODE.get(config.language, config.language)
        if code not in LANGUAGES or f"<|{code}|>" not in self.languages:
            raise InvalidParametersError(
                f"unknown language {config.language!r}: send a Whisper language code such as "
                "'en', 'fr', 'de' or its English name, or leave it out to detect the language"
            )
        return code

    def _detect_languages(self, encoder_states: Any) -> list[str]:
        """The language of each window, read from the encoder output already computed."""
        from transformers.modeling_outputs import BaseModelOutput

        token_ids = self.model.detect_language(encoder_outputs=BaseModelOutput(last_hidden_state=encoder_states))
        tokens = self.processor.tokenizer.convert_ids_to_tokens([int(token) for token in token_ids])
        return [token.strip("<|>") for token in tokens]

    def _generate_kwargs(self, language: Optional[str], task: str) -> dict[str, Any]:
        if not self.is_multilingual:
            return {}
        return {"task": task, "language": language}

    def features(self, windows: Sequence[np.ndarray]) -> Any:
        """Log-mel features of each window, padded to Whisper's 30 s: (windows, mel bins, 3000)."""
        inputs = self.processor.feature_extractor(
            list(windows), sampling_rate=WHISPER_SAMPLE_RATE_HZ, return_tensors="pt"
        )
        return inputs.input_features.to(self.model.device, self.model.dtype)

    def encode(self, features: Any) -> Any:
        """The encoder's output for `features` (windows, mel bins, frames), computed a few windows
        at a time: its activations then stay bounded whatever the batch size, and on CPU one
        window's 1500 frames already fill the cores. Features shorter than 30 s (`trimmed`) go
        through the encoder's layers with the first of its positions (`encode_frames`)."""
        import torch

        encoder = self.model.get_encoder()

        def forward(part: Any) -> Any:
            if part.shape[-1] < WHISPER_WINDOW_S * MEL_FRAMES_PER_S:
                return encode_frames(encoder, part)
            return encoder(part).last_hidden_state

        step = ENCODER_WINDOWS_PER_PASS_CPU if features.device.type == "cpu" else ENCODER_WINDOWS_PER_PASS_GPU
        parts = [forward(features[first : first + step]) for first in range(0, len(features), step)]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _transcribe_track_windows(
        self,
        tracks: Sequence[Audio],
        windows: Sequence[TrackWindow],
        languages: Sequence[Optional[str]],
        options: DecodingOptions,
        previous: Sequence[int] = (),
        *,
        assistant: Any = None,
        should_stop: Optional[StopSignal] = None,
    ) -> tuple[list[list[Span]], list[Optional[str]], list[Optional[str]]]:
        """A batch of windows, each cut from its track, through the recognizer's stages, in order:
        encode, detect the language, decode (the lean batched loop, or speculative decoding with
        `assistant`), conditioned on `previous` text tokens; retry with beams where Whisper's
        checks fail; drop silence; cut loops; split into segments; time words when `options`
        asks; map joined windows back to the audio; make the spans. Returns each window's spans on
        its track's time line (none for a silent window), each track's language (`languages`:
        each one's so far; see `_detect_languages_of`) and each window's warning, if it still
        looped after beam search (its text cut at its last good segment). Then the rest of each
        window whose decoding stopped short (`_undecoded_rests`), from where it stopped, through
        the same stages, as openai/whisper's next window starts there; its spans follow the
        window's."""
        spans, languages, warnings, rests = self._window_stages(
            tracks, windows, languages, options, previous, assistant, should_stop
        )
        while rests:
            rest_windows = [TrackWindow(windows[row].track, rest) for row, rest in rests]
            rest_spans, languages, rest_warnings, more = self._window_stages(
                tracks, rest_windows, languages, options, previous, assistant, should_stop
            )
            for (row, _), one_rest_spans, warning in zip(rests, rest_spans, rest_warnings, strict=True):
                spans[row] += one_rest_spans
                warnings[row] = warnings[row] or warning
            rests = [(rests[rest_row][0], rest) for rest_row, rest in more]
        return spans, languages, warnings

    def _window_stages(
        self,
        tracks: Sequence[Audio],
        windows: Sequence[TrackWindow],
        languages: Sequence[Optional[str]],
        options: DecodingOptions,
        previous: Sequence[int],
        assistant: Any,
        should_stop: Optional[StopSignal] = None,
    ) -> tuple[list[list[Span]], list[Optional[str]], list[Optional[str]], list[tuple[int, SpeechWindow]]]:
        """`_transcribe_track_windows`' stages over one batch of windows: its spans, languages and
        warnings, and each window whose decoding stopped short with the rest it left."""
        import torch

        features, lengths = self._features_of(tracks, windows)
        with torch.inference_mode():
            batch = EncodedBatch(
                features, self.encode(features), options, previous, lengths, self._token_cap(lengths), should_stop
            )
            row_languages, languages = self._detect_languages_of(batch, [w.track for w in windows], languages)
            decoded = self._decode(batch, [window.window for window in windows], row_languages, assistant)
            decoded = [self._retry_with_beams(batch, window) for window in decoded]
            speech = [window for window in decoded if not is_silence(window.greedy, self.fallback)]
            speech = [self._cut_loop(batch, window) for window in speech]
            speech = [self._split_segments(window) for window in speech]
            if (options.word_timestamps or not options.timestamps) and speech:
                speech = self._time_words(batch, speech)
            speech = [_to_audio_times(window) for window in speech]
        warnings: list[Optional[str]] = [None] * len(windows)
        for window in speech:
            warnings[window.row] = window.warning
        spans = self._to_spans(len(windows), speech, words=options.word_timestamps)
        rests = _undecoded_rests(speech, self.decoder.timestamp_begin) if options.timestamps else []
        return spans, languages, warnings, rests

    def _features_of(self, tracks: Sequence[Audio], windows: Sequence[TrackWindow]) -> tuple[Any, list[int]]:
        """The windows' features, and each window's length in samples (for word timing)."""
        samples = [window.window.samples(tracks[window.track].reader) for window in windows]
        features = self.features(samples)
        if self.encoder_margin_s is not None:
            longest_s = max(len(one) for one in samples) / WHISPER_SAMPLE_RATE_HZ
            seconds = min(math.ceil(longest_s + self.encoder_margin_s), WHISPER_WINDOW_S)
            features = features[..., : int(seconds * MEL_FRAMES_PER_S)]
        return features, [len(one) for one in samples]

    def _token_cap(self, lengths: Sequence[int]) -> Optional[int]:
        """The most tokens a window of a batch of these lengths (samples) may decode; None: the
        model's positions decide (`max_tokens_per_s`)."""
        if self.max_tokens_per_s is None:
            return None
        longest_s = max(lengths) / WHISPER_SAMPLE_RATE_HZ
        return math.ceil(longest_s * self.max_tokens_per_s) + TRIMMED_TOKENS_BASE

    def _detect_languages_of(
        self, batch: EncodedBatch, tracks: Sequence[int], known: Sequence[Optional[str]]
    ) -> tuple[list[Optional[str]], list[Optional[str]]]:
        """Stage 'detect language': each window's language (its track in `tracks`), and each
        track's (`known`: the one given, else the one its earlier windows found, else None).
        With `multilingual`, each window's own (a track's is the one given, else its first
        window's); else the one given, or its track's first window's for a multilingual model,
        on every window of the track."""
        known = list(known)
        if batch.options.multilingual:
            languages: list[Optional[str]] = list(self._detect_languages(batch.encoder_states))
            for row, track in enumerate(tracks):
                known[track] = known[track] or languages[row]
            return languages, known
        for row, track in enumerate(tracks):
            if self.is_multilingual and known[track] is None:
                known[track] = self._detect_languages(batch.encoder_states[row : row + 1])[0]
        return [known[track] for track in tracks], known

    def _decode(
        self,
        batch: EncodedBatch,
        windows: Sequence[SpeechWindow],
        languages: Sequence[Optional[str]],
        assistant: Any,
    ) -> list[WindowDecoding]:
        """Stage 'decode': greedy tokens of each window, the windows that share a prompt (one
        language) decoded together; with `assistant`, speculative drafts scored by the lean loop's
        rules, so that the fallback reads the same measures."""
        options, states = batch.options, batch.encoder_states
        results: list[Any] = [None] * len(windows)
        for rows, prompt in self._prompt_groups(languages, options, batch.previous):
            if assistant is None:
                decoded = [
                    result
                    for part in _parts(rows, self.decoder_rows(states))
                    for result in self._decode_greedy(batch, states[part], prompt)
                ]
            else:
                drafts = self.generate_tokens(
                    batch.features[rows],
                    states[rows],
                    languages[rows[0]],
                    options.task,
                    batch.previous,
                    options=options,
                    assistant_model=assistant,
                    **self._capped(prompt, batch.max_new_tokens),
                )
                decoded = [
                    self.decoder.score(states[row : row + 1], prompt, row_tokens, options)
                    for row, row_tokens in zip(rows, drafts, strict=True)
                ]
            for row, result in zip(rows, decoded, strict=True):
                results[row] = result
        return [
            WindowDecoding(row, window, language, result, result.tokens)
            for row, (window, language, result) in enumerate(zip(windows, languages, results, strict=True))
        ]

    def _decode_greedy(self, batch: EncodedBatch, states: Any, prompt: Sequence[int]) -> list[WindowTokens]:
        """The lean loop on some of a batch's windows (`states`), under its options and cap."""
        return self.decoder.decode(
            states,
            prompt,
            batch.options,
            is_repeating=self._is_repeating,
            max_new_tokens=batch.max_new_tokens,
            should_stop=batch.should_stop,
        )

    def _retry_with_beams(self, batch: EncodedBatch, window: WindowDecoding) -> WindowDecoding:
        """Stage 'retry with beams': a window whose greedy tokens fail Whisper's checks (and is
        not silence) decoded again with beam search. One window per beam search: it holds
        num_beams rows of keys and values per window (benchmarks/CHANGELOG.md, "Numbers behind the
        code's choices"), and few windows fall back."""
        greedy = window.greedy
        if is_silence(greedy, self.fallback) or not needs_fallback(greedy, self.text(greedy.tokens), self.fallback):
            return window
        if not self.retry_with_beams:
            return dataclasses.replace(window, tokens=())
        row = window.row
        (tokens,) = self.generate_tokens(
            batch.features[row : row + 1],
            batch.encoder_states[row : row + 1],
            window.language,
            batch.options.task,
            batch.previous,
            options=batch.options,
            num_beams=self.fallback.num_beams,
            **self._capped(self._window_prompt(batch, window), batch.max_new_tokens),
        )
        return dataclasses.replace(window, tokens=tuple(tokens))

    def _cut_loop(self, batch: EncodedBatch, window: WindowDecoding) -> WindowDecoding:
        """Stage 'cut loops': a window whose tokens still fill the room the model's positions
        leave (a loop, beam search included) is cut after its last good segment, with a warning."""
        prompt = self._window_prompt(batch, window)
        room, limit = self.decoder.positions_room(prompt), self.decoder.max_target_positions
        if batch.max_new_tokens is not None and batch.max_new_tokens < room:
            room = limit = batch.max_new_tokens
        if len(window.tokens) < room:
            return window
        kept = complete_segments(window.tokens, self.decoder.timestamp_begin, self._is_repeating)
        return dataclasses.replace(window, tokens=tuple(kept), warning=self._loop_warning(window.window, kept, limit))

    def _window_prompt(self, batch: EncodedBatch, window: WindowDecoding) -> list[int]:
        """The tokens a window of the batch was decoded from."""
        return self.decoder.prompt(
            window.language, batch.options.task, batch.previous, timestamps=batch.options.timestamps
        )

    def _capped(self, prompt: Sequence[int], cap: Optional[int]) -> dict[str, int]:
        """`generate_tokens`' max_new_tokens under a batch's cap (nothing: its default)."""
        return {} if cap is None else {"max_new_tokens": min(self.decoder.max_new_tokens(prompt), cap)}

    def _split_segments(self, window: WindowDecoding) -> WindowDecoding:
        """Stage 'segments': the window's tokens cut at their timestamps (`segments`)."""
        return dataclasses.replace(window, segments=tuple(self.segments(window.window, window.tokens)))

    def _time_words(self, batch: EncodedBatch, speech: Sequence[WindowDecoding]) -> list[WindowDecoding]:
        """Stage 'time words': every segment of the windows with speech gets its words (one
        alignment pass for them all), its times moved to its words' as openai/whisper does."""
        timed = self.word_timer.window_words(
            batch.encoder_states[[window.row for window in speech]],
            [
                DecodedWindow(
                    # Aligned without the previous text, as openai/whisper does.
                    start_sequence=tuple(self.decoder.prompt(window.language, batch.options.task)),
                    segments=window.segments,
                    offset_s=window.window.offset_s,
                    samples=batch.lengths[window.row],
                    language=window.language,
                    split=not batch.options.timestamps,
                )
                for window in speech
            ],
        )
        return [
            dataclasses.replace(window, segments=tuple(segments))
            for window, segments in zip(speech, timed, strict=True)
        ]

    def _to_spans(self, count: int, speech: Sequence[WindowDecoding], *, words: bool) -> list[list[Span]]:
        """Stage 'to spans': each window's segments as spans, in window order (none for a window
        that was silence), with their words where the request asked for them (`words`; a window
        decoded without timestamps has them regardless, to cut its chunks)."""
        spans: list[list[Span]] = [[] for _ in range(count)]
        for window in speech:
            language = window.language or self._default_language()
            spans[window.row] = [
                Span(
                    segment.start_s, segment.end_s, self.text(segment.tokens), segment.words if words else (), language
                )
                for segment in window.segments
            ]
        return spans

    def decoder_rows(self, encoder_states: Any) -> int:
        """How many windows of `encoder_states` (windows, frames, width) the greedy decoder
        takes at once: on CPU as many as DECODER_CROSS_BYTES_CPU holds the cross-attention keys
        and values of (at least one), elsewhere all of them (GPU memory is not the process's,
        and a GPU wants its batch)."""
        windows, frames, width = encoder_states.shape
        if encoder_states.device.type != "cpu":
            return max(1, windows)
        per_window = len(self.decoder.step.layers) * 2 * frames * width * encoder_states.element_size()
        return max(1, DECODER_CROSS_BYTES_CPU // per_window)

    def _loop_warning(self, window: SpeechWindow, kept: Sequence[int], limit: int) -> str:
        """What the response says about a window whose decoding looped to its `limit` of tokens
        (Whisper's context, or a trimmed recognizer's cap), beam search included, and was cut to
        `kept`."""
        problem = (
            f"window {window.start_s:.1f}-{window.end_s:.1f} s: Whisper repeated itself until its "
            f"{limit}-token limit, with beam search too"
        )
        if not kept:
            return f"{problem}; its text was left out"
        kept_s = window.offset_s + (kept[-1] - self.decoder.timestamp_begin) * WHISPER_TIME_PRECISION_S
        kept_s = window.to_audio_s(min(kept_s, window.end_offset_s), is_end=True)
        return f"{problem}; its text after {kept_s:.1f} s was left out"

    def _prompt_groups(
        self, languages: Sequence[Optional[str]], options: DecodingOptions, previous: Sequence[int]
    ) -> list[tuple[list[int], list[int]]]:
        """Rows that share a decoder prompt (one per language), with that prompt."""
        groups: dict[Optional[str], list[int]] = {}
        for row, language in enumerate(languages):
            groups.setdefault(language, []).append(row)
        return [
            (rows, self.decoder.prompt(language, options.task, previous, timestamps=options.timestamps))
            for language, rows in groups.items()
        ]

    def generate_tokens(
        self,
        features: Any,
        encoder_states: Any,
        language: Optional[str],
        task: str,
        previous: Sequence[int] = (),
        *,
        options: Optional[DecodingOptions] = None,
        **kwargs: Any,
    ) -> list[list[int]]:
        """transformers' Whisper `generate` on windows already encoded (beam search, speculative
        decoding), conditioned on `previous` text tokens and ruled by `options` (None: the
        model's own) as the lean loop is: the generated tokens of each window, without prompt
        and end-of-text. One generate call per window batch, so nothing after the window is
        decoded. Greedy, it gives the lean loop's tokens (tests/asr/test_decoding_paths.py)."""
        import torch
        from transformers.modeling_outputs import BaseModelOutput

        if options is None:
            options = DecodingOptions.for_model(self.model.generation_config)
        prompt = self.decoder.prompt(language, task, previous, timestamps=options.timestamps)
        # Room for what follows decoding (scoring, word alignment) in the model's positions.
        kwargs.setdefault("max_new_tokens", self.decoder.max_new_tokens(prompt))
        if previous:
            # <|startofprev|> and the text, exactly as GreedyWhisperDecoder.prompt puts them.
            start_sequence_length = len(self.decoder.prompt(language, task, timestamps=options.timestamps))
            kwargs["prompt_ids"] = torch.tensor(prompt[:-start_sequence_length], device=features.device)
        output = self.model.generate(
            features,
            encoder_outputs=BaseModelOutput(last_hidden_state=encoder_states),
            return_timestamps=options.timestamps,
            return_dict_in_generate=True,
            force_unique_generate_call=True,
            **self._generate_kwargs(language, task),
            **{**options.generate_kwargs(), **kwargs},
        )
        return [self._generated(sequence, prompt) for sequence in output.sequences.tolist()]

    def _generated(self, sequence: list[int], prompt: Sequence[int]) -> list[int]:
        """What `generate` decoded after `prompt`, without end-of-text and what follows it."""
        if sequence[: len(prompt)] != prompt:
            raise InferenceError(f"generate did not start from the prompt {prompt}: {sequence[: len(prompt)]}")
        eos = self.decoder.eos_token_id
        generated = sequence[len(prompt) :]
        return generated[: generated.index(eos)] if eos in generated else generated

    def text(self, tokens: Sequence[int]) -> str:
        """The text of decoded tokens, timestamps and special tokens left out."""
        return self.processor.tokenizer.decode(
            [token for token in tokens if token < self.decoder.timestamp_begin], skip_special_tokens=True
        )

    def _is_repeating(self, tokens: list[int]) -> bool:
        return is_repetitive(self.text(tokens), self.fallback)

    def segments(self, window: SpeechWindow, tokens: Sequence[int]) -> list[DecodedSegment]:
        """A window's segments, on the audio's time line for a contiguous window, on its own for
        a joined one (mapped back once its words are timed). Whisper's timestamps count from the
        window's start; a timestamp in the padding after the window's audio means its end."""
        return split_segments(tokens, self.decoder.timestamp_begin, window.offset_s, window.end_offset_s)


@dataclass(frozen=True)
class EncodedBatch:
    """A batch of windows as the stages read it."""

    features: Any  # log-mel features, (windows, mel bins, frames)
    encoder_states: Any  # the encoder's output, (windows, frames, width)
    options: DecodingOptions
    previous: Sequence[int]  # the text tokens every window is conditioned on
    lengths: Sequence[int]  # each window's length in samples
    max_new_tokens: Optional[int] = None  # the most tokens a window may decode (None: the model's)
    should_stop: Optional[StopSignal] = None  # checked by the lean loop at every token


@dataclass(frozen=True)
class TrackWindow:
    """A speech window of one of the tracks a batch's windows are cut from (`transcribe_tracks`:
    a call's channels; one audio is track 0)."""

    track: int
    window: SpeechWindow


@dataclass(frozen=True)
class WindowDecoding:
    """One window of a batch as it goes through the stages, each stage a copy with its part
    filled in."""

    row: int  # its row in the batch: of the features, the encoder states and the spans returned
    window: SpeechWindow
    language: Optional[str]
    greedy: WindowTokens  # the first decoding's measures: they decide beam search and silence
    tokens: tuple[int, ...]  # its tokens: the first decoding's, beam search's, or cut after a loop
    segments: tuple[DecodedSegment, ...] = ()
    warning: Optional[str] = None  # what the response says about a loop that was cut


def _to_audio_times(decoding: WindowDecoding) -> WindowDecoding:
    """Stage 'to audio times': a joined window's segments and words moved from its own times to
    the audio's (a contiguous window's are already the audio's)."""
    window = decoding.window
    if not window.joined:
        return decoding
    return dataclasses.replace(decoding, segments=tuple(_segment_to_audio_times(window, s) for s in decoding.segments))


def _segment_to_audio_times(window: SpeechWindow, segment: DecodedSegment) -> DecodedSegment:
    start_s = window.to_audio_s(segment.start_s, is_end=False)
    end_s = max(window.to_audio_s(segment.end_s, is_end=True), start_s)
    words = []
    for word in segment.words:
        word_start_s = window.to_audio_s(word.start_s, is_end=False)
        word_end_s = max(window.to_audio_s(word.end_s, is_end=True), word_start_s)
        words.append(Word(word.text, round(word_start_s, 3), round(word_end_s, 3), word.probability))
    return DecodedSegment(segment.tokens, round(start_s, 3), round(end_s, 3), tuple(words))


def _undecoded_rests(speech: Sequence[WindowDecoding], timestamp_begin: int) -> list[tuple[int, SpeechWindow]]:
    """Each contiguous window of `speech` whose tokens leave its rest undecoded (at least
    UNDECODED_REST_MIN_S of it, after at least that much decoded), with that rest as a window of
    its own: (its row, the rest). A joined window's rest is left as it is."""
    rests = []
    for window in speech:
        stopped_s = left_undecoded_from(window.tokens, timestamp_begin)
        if window.window.joined or stopped_s is None or stopped_s < UNDECODED_REST_MIN_S:
            continue
        start_s = window.window.start_s + stopped_s
        if window.window.end_s - start_s >= UNDECODED_REST_MIN_S:
            rests.append((window.row, SpeechWindow(start_s, window.window.end_s)))
    return rests


def window_batches(windows: Sequence[W], batch_size: int, *, first_alone: bool = True) -> list[Sequence[W]]:
    """The windows in decoding order, `batch_size` at a time; with `first_alone`, the first on
    its own before them: its text then comes after one window's decoding, which is what a stream
    or a progress display waits for first, and an initial prompt conditions it alone. Without a
    stream, progress or prompt the windows go in full batches: a batch of 1 then 3 windows reads
    every decoder weight in twice as many steps as one of 4 (benchmarks/CHANGELOG.md, "Cross-attention
    per frame in int8, and the first window alone only for streams"). So a stream's text may
    differ from the non-streamed answer's where a window's batch moves a token: in float32 only
    by float rounding (the same text in every case measured); in int8 a batch's rows share the
    decoder layers' activation scale."""
    if not windows:
        return []
    start = 1 if first_alone else 0
    head = [windows[:1]] if first_alone else []
    return head + [windows[first : first + batch_size] for first in range(start, len(windows), batch_size)]


def track_batches(
    windows: Sequence[TrackWindow], batch_size: int, *, prompted: bool
) -> list[tuple[Sequence[TrackWindow], bool]]:
    """The windows of several tracks (in track order) in shared batches of `batch_size`, each
    batch with whether the initial prompt conditions it. With `prompted`, each track's first
    window goes in the first batches, prompted, as `transcribe` decodes a track's first window
    alone with the prompt; the other windows follow, unprompted."""
    if not prompted:
        return [(batch, False) for batch in window_batches(windows, batch_size, first_alone=False)]
    first = [not number or windows[number - 1].track != window.track for number, window in enumerate(windows)]
    firsts = [window for window, is_first in zip(windows, first, strict=True) if is_first]
    rest = [window for window, is_first in zip(windows, first, strict=True) if not is_first]
    return [(batch, True) for batch in window_batches(firsts, batch_size, first_alone=False)] + [
        (batch, False) for batch in window_batches(rest, batch_size, first_alone=False)
    ]


def _parts(rows: Sequence[int], most: int) -> list[list[int]]:
    """`rows` in order, in as few parts of at most `most` as there can be, of sizes that differ by
    one at most: 18 rows at most 8 are 6, 6 and 6, not 8, 8 and 2 (a part's steps cost about the
    same at 6 rows as at 8, as each reads every decoder weight)."""
    count = -(-len(rows) // most)
    size, extra = divmod(len(rows), count) if rows else (0, 0)
    parts, first = [], 0
    for index in range(count):
        end = first + size + (index < extra)
        parts.append(list(rows[first:end]))
        first = end
    return parts


def _span_name(windows: Sequence[SpeechWindow]) -> str:
    """ "window 1203.4-1233.4 s", or "windows ..." for a batch of several."""
    noun = "window" if len(windows) == 1 else "windows"
    return f"{noun} {windows[0].start_s:.1f}-{windows[-1].end_s:.1f} s"
