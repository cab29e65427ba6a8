"""Whisper speech recognition: model loading, and transcription of the speech windows the VAD
finds, decoded in batches (greedy, the lean loop of whosaid.recognition.greedy) or one at a time with
speculative decoding (assisted). Both paths fall back to beam search where Whisper's own quality
checks fail, so they give the same transcript; the assistant only changes how fast. Both read
the request's DecodingOptions the same way: prompt and hotwords as previous text, the language
once or per window, and word timestamps (whosaid.recognition.word_timing) for the windows decoded."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

import numpy as np

from whosaid.audio.loading import Audio
from whosaid.audio.vad import (
    JOINED_WINDOW_PAUSE_S,
    SpeechWindow,
    VoiceActivityDetector,
    plan_joined_windows,
    plan_windows,
)
from whosaid.config import WHISPER_SAMPLE_RATE_HZ, InferenceConfig, ModelSettings
from whosaid.errors import InferenceError, InvalidParametersError
from whosaid.recognition.greedy import (
    WHISPER_TIME_PRECISION_S,
    FallbackOptions,
    GreedyWhisperDecoder,
    complete_segments,
    is_repetitive,
    is_silence,
    needs_fallback,
    split_segments,
)
from whosaid.recognition.loading import load_assistant, load_whisper
from whosaid.recognition.logits_rules import DecodingOptions
from whosaid.recognition.protocol import ASSISTED, BATCHED, AsrOutput
from whosaid.recognition.segments import Span, clean_chunks
from whosaid.recognition.word_timing import DecodedWindow, SegmentTokens, WordTimer
from whosaid.results import Word
from whosaid.runtime.cancellation import StopSignal
from whosaid.runtime.device import ModelRuntime
from whosaid.runtime.failures import as_core_errors
from whosaid.runtime.memory import release_memory_between_stages

# With per-window languages, a pause this long between speech regions (about 1 s of silence:
# the VAD pads each region by 0.2 s) ends a window, so that a language switch at a pause starts
# a window of its own; windows are otherwise packed up to 30 s and would hold both languages.
LANGUAGE_SWITCH_PAUSE_S = 0.6
# Windows per encoder pass (see SpeechRecognizer.encode).
ENCODER_WINDOWS_PER_PASS_CPU = 1
ENCODER_WINDOWS_PER_PASS_GPU = 8


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
        for number, batch in enumerate(window_batches(windows, batch_size, first_alone=first_alone)):
            if should_stop is not None:
                should_stop.check()
            if number:
                # What the last batch freed, back to the OS before this one peaks on top of it.
                release_memory_between_stages(audio.duration_s)
            previous = self.previous_tokens(options, first_window=number == 0)
            # The whole request fails: say where, so that the audio can be checked or cut there.
            with as_core_errors("speech recognition", where=f" in {_span_name(batch)}"):
                window_spans, language, batch_warnings = self._transcribe_windows(
                    audio, batch, language, options, previous, assistant=self.assistant if assisted else None
                )
            warnings += batch_warnings
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

    def _windows(self, audio: Audio, max_window_s: float, *, multilingual: bool) -> list[SpeechWindow]:
        if not multilingual:
            return self.vad.windows(audio.reader, max_window_s, pause_s=self.window_pause_s)
        pause_s = self.window_pause_s

        def plan(regions: Sequence[tuple[float, float]]) -> list[SpeechWindow]:
            if pause_s is None:
                return plan_windows(regions, max_window_s)
            return plan_joined_windows(regions, max_window_s, pause_s)

        windows: list[SpeechWindow] = []
        group: list[tuple[float, float]] = []
        for region in self.vad.speech_regions(audio.reader, max_region_s=max_window_s):
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
        window's 1500 frames already fill the cores."""
        import torch

        encoder = self.model.get_encoder()
        step = ENCODER_WINDOWS_PER_PASS_CPU if features.device.type == "cpu" else ENCODER_WINDOWS_PER_PASS_GPU
        parts = [encoder(features[first : first + step]).last_hidden_state for first in range(0, len(features), step)]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _transcribe_windows(
        self,
        audio: Audio,
        windows: Sequence[SpeechWindow],
        language: Optional[str],
        options: DecodingOptions,
        previous: Sequence[int] = (),
        *,
        assistant: Any = None,
    ) -> tuple[list[list[Span]], Optional[str], list[str]]:
        """Greedy tokens for each window (the lean batched loop, or speculative decoding with
        `assistant`), conditioned on `previous` text tokens, beam search where Whisper's checks
        fail, silence dropped, words timed when `options` asks. Returns each window's spans on the
        audio's time line (none for a silent window), the language (detected on the first window
        when unknown and kept, unless `options.multilingual` detects each window's own) and a
        warning for each window still looping after beam search, whose text is cut at its last
        good segment."""
        import torch

        task = options.task
        features = self.features([window.samples(audio.reader) for window in windows])
        with torch.inference_mode():
            encoder_states = self.encode(features)
            if options.multilingual:
                languages: list[Optional[str]] = list(self._detect_languages(encoder_states))
                language = language or languages[0]
            else:
                if self.is_multilingual and language is None:
                    language = self._detect_languages(encoder_states[:1])[0]
                languages = [language] * len(windows)
            results: list[Any] = [None] * len(windows)
            for rows, prompt in self._prompt_groups(languages, task, previous):
                if assistant is None:
                    decoded = self.decoder.decode(
                        encoder_states[rows], prompt, options, is_repeating=self._is_repeating
                    )
                else:
                    drafts = self.generate_tokens(
                        features[rows],
                        encoder_states[rows],
                        languages[rows[0]],
                        task,
                        previous,
                        options=options,
                        assistant_model=assistant,
                    )
                    decoded = [
                        self.decoder.score(encoder_states[row : row + 1], prompt, row_tokens, options)
                        for row, row_tokens in zip(rows, drafts, strict=True)
                    ]
                for row, result in zip(rows, decoded, strict=True):
                    results[row] = result
            tokens = [list(result.tokens) for result in results]
            retry = [
                index
                for index, result in enumerate(results)
                if not is_silence(result, self.fallback)
                and needs_fallback(result, self.text(result.tokens), self.fallback)
            ]
            # One window per beam search: it holds num_beams rows of keys and values per window
            # (benchmarks/CHANGELOG.md, "Numbers behind the code's choices"), and few windows fall back.
            for index in retry:
                (tokens[index],) = self.generate_tokens(
                    features[index : index + 1],
                    encoder_states[index : index + 1],
                    languages[index],
                    task,
                    previous,
                    options=options,
                    num_beams=self.fallback.num_beams,
                )
            speech = [index for index, result in enumerate(results) if not is_silence(result, self.fallback)]
            warnings = []
            for index in speech:
                prompt = self.decoder.prompt(languages[index], task, previous)
                if len(tokens[index]) >= self.decoder.positions_room(prompt):
                    tokens[index] = complete_segments(tokens[index], self.decoder.timestamp_begin, self._is_repeating)
                    warnings.append(self._loop_warning(windows[index], tokens[index]))
            segments = {index: self.segments(windows[index], tokens[index]) for index in speech}
            words: dict[int, list[tuple[SegmentTokens, tuple[Word, ...]]]] = {
                index: [(segment, ()) for segment in segments[index]] for index in speech
            }
            if options.word_timestamps and speech:
                timed = self.word_timer.window_words(
                    encoder_states[speech],
                    [
                        DecodedWindow(
                            # Aligned without the previous text, as openai/whisper does.
                            start_sequence=tuple(self.decoder.prompt(languages[index], task)),
                            segments=tuple(segments[index]),
                            offset_s=windows[index].offset_s,
                            samples=len(windows[index].samples(audio.reader)),
                            language=languages[index],
                        )
                        for index in speech
                    ],
                )
                words.update(zip(speech, timed, strict=True))
            for index in speech:
                if windows[index].joined:
                    words[index] = _to_audio_times(windows[index], words[index])
        spans: list[list[Span]] = [
            [
                Span(
                    segment.start_s,
                    segment.end_s,
                    self.text(segment.tokens),
                    segment_words,
                    languages[index] or self._default_language(),
                )
                for segment, segment_words in words.get(index, ())
            ]
            for index in range(len(windows))
        ]
        return spans, language, warnings

    def _loop_warning(self, window: SpeechWindow, kept: Sequence[int]) -> str:
        """What the response says about a window whose decoding looped to the end of Whisper's
        context, beam search included, and was cut to `kept`."""
        problem = (
            f"window {window.start_s:.1f}-{window.end_s:.1f} s: Whisper repeated itself until its "
            f"{self.decoder.max_target_positions}-token limit, with beam search too"
        )
        if not kept:
            return f"{problem}; its text was left out"
        kept_s = window.offset_s + (kept[-1] - self.decoder.timestamp_begin) * WHISPER_TIME_PRECISION_S
        kept_s = window.to_audio_s(min(kept_s, window.end_offset_s), is_end=True)
        return f"{problem}; its text after {kept_s:.1f} s was left out"

    def _prompt_groups(
        self, languages: Sequence[Optional[str]], task: str, previous: Sequence[int]
    ) -> list[tuple[list[int], list[int]]]:
        """Rows that share a decoder prompt (one per language), with that prompt."""
        groups: dict[Optional[str], list[int]] = {}
        for row, language in enumerate(languages):
            groups.setdefault(language, []).append(row)
        return [(rows, self.decoder.prompt(language, task, previous)) for language, rows in groups.items()]

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

        prompt = self.decoder.prompt(language, task, previous)
        # Room for what follows decoding (scoring, word alignment) in the model's positions.
        kwargs.setdefault("max_new_tokens", self.decoder.max_new_tokens(prompt))
        if previous:
            # <|startofprev|> and the text, exactly as GreedyWhisperDecoder.prompt puts them.
            start_sequence_length = len(self.decoder.prompt(language, task))
            kwargs["prompt_ids"] = torch.tensor(prompt[:-start_sequence_length], device=features.device)
        if options is None:
            options = DecodingOptions.for_model(self.model.generation_config)
        output = self.model.generate(
            features,
            encoder_outputs=BaseModelOutput(last_hidden_state=encoder_states),
            return_timestamps=True,
            return_dict_in_generate=True,
            force_unique_generate_call=True,
            **self._generate_kwargs(language, task),
            **{**options.generate_kwargs(), **kwargs},
        )
        eos = self.decoder.eos_token_id
        tokens = []
        for sequence in output.sequences.tolist():
            if sequence[: len(prompt)] != prompt:
                raise InferenceError(f"generate did not start from the prompt {prompt}: {sequence[: len(prompt)]}")
            generated = sequence[len(prompt) :]
            tokens.append(generated[: generated.index(eos)] if eos in generated else generated)
        return tokens

    def text(self, tokens: Sequence[int]) -> str:
        """The text of decoded tokens, timestamps and special tokens left out."""
        return self.processor.tokenizer.decode(
            [token for token in tokens if token < self.decoder.timestamp_begin], skip_special_tokens=True
        )

    def _is_repeating(self, tokens: list[int]) -> bool:
        return is_repetitive(self.text(tokens), self.fallback)

    def segments(self, window: SpeechWindow, tokens: Sequence[int]) -> list[SegmentTokens]:
        """A window's segments, on the audio's time line for a contiguous window, on its own for
        a joined one (mapped back once its words are timed). Whisper's timestamps count from the
        window's start; a timestamp in the padding after the window's audio means its end."""
        segments = []
        end_offset_s = window.end_offset_s
        for start_s, end_s, text_tokens in split_segments(tokens, self.decoder.timestamp_begin):
            start = min(window.offset_s + (start_s or 0.0), end_offset_s)
            end = end_offset_s if end_s is None else min(window.offset_s + end_s, end_offset_s)
            segments.append(SegmentTokens(tuple(text_tokens), start, end))
        return segments


def _to_audio_times(
    window: SpeechWindow, segments: Sequence[tuple[SegmentTokens, tuple[Word, ...]]]
) -> list[tuple[SegmentTokens, tuple[Word, ...]]]:
    """A joined window's segments and words moved from its own times to the audio's."""
    moved = []
    for segment, words in segments:
        start_s = window.to_audio_s(segment.start_s, is_end=False)
        end_s = max(window.to_audio_s(segment.end_s, is_end=True), start_s)
        moved_words = []
        for word in words:
            word_start_s = window.to_audio_s(word.start_s, is_end=False)
            word_end_s = max(window.to_audio_s(word.end_s, is_end=True), word_start_s)
            moved_words.append(Word(word.text, round(word_start_s, 3), round(word_end_s, 3), word.probability))
        moved.append((SegmentTokens(segment.tokens, round(start_s, 3), round(end_s, 3)), tuple(moved_words)))
    return moved


def window_batches(
    windows: Sequence[SpeechWindow], batch_size: int, *, first_alone: bool = True
) -> list[Sequence[SpeechWindow]]:
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


def _span_name(windows: Sequence[SpeechWindow]) -> str:
    """ "window 1203.4-1233.4 s", or "windows ..." for a batch of several."""
    noun = "window" if len(windows) == 1 else "windows"
    return f"{noun} {windows[0].start_s:.1f}-{windows[-1].end_s:.1f} s"
