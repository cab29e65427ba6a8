"""Batched greedy decoding of Whisper windows, with timestamps, and the measures of Whisper's
temperature fallback.

This loop is the decoding path that decides a window's tokens: the request's DecodingOptions
reach it as the logits rules (whosaid.recognition.logits_rules) it applies at every step, and the
other paths are checked against it (tests/asr/test_decoding_paths.py): `score` re-measures tokens
decoded elsewhere under the same rules, and transformers' `generate` (the beam-search fallback,
speculative drafts) gets the same options as keyword arguments and, greedy, the same tokens.

`WhisperForConditionalGeneration.generate` spends part of each step outside the model (generation
bookkeeping; its suppress-token processors rebuild a vocabulary mask with torch.isin at every
step) and keeps stepping every row of a batch until the longest one ends. This loop runs the
same decoder arithmetic (whosaid.recognition.kernels.decoder_step: one hand-written step over the model's
weights) under the same rules, without their per-step costs, so it picks the same tokens as
greedy `generate` (checked token for token on transformers 4.57 and 5); rows that reach
end-of-text leave the batch, so the remaining steps get cheaper. It also measures what the
fallback needs (mean log-probability, no-speech probability) on the way, and stops a row that
loops.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from whosaid.config import WHISPER_FRAMES_PER_S
from whosaid.recognition.kernels.decoder_step import WhisperDecoderStep
from whosaid.recognition.logits_rules import DecodingOptions, WhisperLogitsRules
from whosaid.recognition.segments import DecodedSegment
from whosaid.runtime.cancellation import StopSignal

WHISPER_TIME_PRECISION_S = 1 / WHISPER_FRAMES_PER_S  # one timestamp token: <|0.00|>, <|0.02|>, ...


@dataclass(frozen=True)
class FallbackOptions:
    """When a greedy window is not trusted and is decoded again with beam search, and when it is
    silence. The defaults are openai/whisper's (transcribe.py); deterministic, no sampling
    temperatures. Greedy first, beams only where the checks fail: beams on every window cost
    several times the time for no better transcript (benchmarks/CHANGELOG.md, "Numbers behind the
    code's choices")."""

    #: Text that compresses better than this (zlib, bytes in / bytes out) is repeating itself.
    compression_ratio_threshold: float = 2.4
    #: A mean log-probability per token (end-of-text included) below this is a guess.
    logprob_threshold: float = -1.0
    #: A window whose <|nospeech|> probability is above this and whose text is a guess is silence.
    no_speech_threshold: float = 0.6
    #: Beams of the second decoding, as openai/whisper's CLI and the transformers ASR pipeline search.
    num_beams: int = 5
    #: A row is checked for repetition every this many tokens once it has `repetition_check_from`,
    #: so that a looping window stops early instead of running to the 448-token limit: its text
    #: would fail the compression check at the end anyway and be decoded again.
    repetition_check_every: int = 32
    repetition_check_from: int = 64
    #: A window whose text says a phrase of 2 to this many words three times in a row is looping
    #: (0: not checked). A few seconds' loop ("Is that your long time?" four times in a live turn
    #: of a far-field meeting) compresses too little for the ratio to tell. Files keep openai/
    #: whisper's checks alone; live turns, seconds long, check it (SpeechRecognizer.trimmed).
    loop_phrase_words: int = 0


@dataclass(frozen=True)
class WindowTokens:
    """What greedy decoding produced for one window."""

    tokens: tuple[int, ...]  # text and timestamp tokens; no prompt, no end-of-text
    avg_logprob: float  # per token, end-of-text included, as openai/whisper counts it
    no_speech_prob: float  # probability of <|nospeech|> at the start-of-transcript position
    gave_up: bool = False  # stopped early because it was repeating itself
    # Filled the room the model's positions leave (GreedyWhisperDecoder.positions_room) before
    # <|endoftext|>: a loop, as a real window's speech never fills Whisper's context.
    reached_limit: bool = False


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def is_repetitive(text: str, options: FallbackOptions) -> bool:
    return compression_ratio(text) > options.compression_ratio_threshold


def third_time_start(words: Sequence[str], longest: int, shortest: int = 2) -> int:
    """Where, in `words` (compared as they are), the third time in a row of a phrase of
    `shortest` to `longest` words begins, at the earliest; len(words) when none does."""
    for start in range(len(words)):
        for size in range(shortest, longest + 1):
            phrase = list(words[start : start + size])
            if len(phrase) == size and list(words[start + size : start + 3 * size]) == phrase * 2:
                return start + 2 * size
    return len(words)


def says_a_phrase_thrice(text: str, longest: int) -> bool:
    """Whether `text` says a phrase of 2 to `longest` words three times in a row (words compared
    without case and punctuation). A word said three times ("no, no, no") is not counted."""
    words = ["".join(character for character in word.lower() if character.isalnum()) for word in text.split()]
    return third_time_start(words, longest) < len(words)


def needs_fallback(result: WindowTokens, text: str, options: FallbackOptions) -> bool:
    """openai/whisper's test for decoding again with a stronger search (and, where
    `loop_phrase_words` is set, a phrase said three times in a row); a window that ran out of
    room is decoded again whatever its measures say."""
    return (
        result.gave_up
        or result.reached_limit
        or is_repetitive(text, options)
        or result.avg_logprob < options.logprob_threshold
        or (options.loop_phrase_words > 0 and says_a_phrase_thrice(text, options.loop_phrase_words))
    )


def is_silence(result: WindowTokens, options: FallbackOptions) -> bool:
    """openai/whisper's no-speech test: the model expects no speech and its text is a guess."""
    return result.no_speech_prob > options.no_speech_threshold and result.avg_logprob < options.logprob_threshold


def left_undecoded_from(tokens: Sequence[int], timestamp_begin: int) -> Optional[float]:
    """Where a window's tokens leave the rest of the window undecoded (seconds from its start), or
    None. Tokens that end with a pair of timestamps after text (a segment closed, the next one
    opened and given no text) are Whisper's way of saying that what follows is cut off by the
    window's end: openai/whisper's transcribe then starts its next window at that timestamp
    instead of after the window. A window that ends with one timestamp was decoded to its end."""
    if len(tokens) < 3 or tokens[-3] >= timestamp_begin or min(tokens[-2:]) < timestamp_begin:
        return None
    return (tokens[-1] - timestamp_begin) * WHISPER_TIME_PRECISION_S


def complete_segments(
    tokens: Sequence[int], timestamp_begin: int, is_repeating: Callable[[list[int]], bool]
) -> list[int]:
    """The tokens of a window that ran out of room, cut after its last good segment: the longest
    run of whole segments (each closed by its timestamp) that `is_repeating` does not flag. What
    follows is the unfinished loop; with no such segment, nothing is kept."""
    ends = [
        index + 1
        for index, token in enumerate(tokens)
        if token >= timestamp_begin and index > 0 and tokens[index - 1] < timestamp_begin
    ]
    for end in reversed(ends):
        if not is_repeating(list(tokens[:end])):
            return list(tokens[:end])
    return []


def split_segments(
    tokens: Sequence[int], timestamp_begin: int, offset_s: float, end_offset_s: float
) -> list[DecodedSegment]:
    """Cut a window's tokens at its timestamp tokens into segments timed from `offset_s`, where
    the window starts: Whisper's timestamps count from there. A missing opening timestamp is the
    window's start, a missing closing one and any timestamp past `end_offset_s` (in the padding
    after the window's audio) its end."""
    segments: list[DecodedSegment] = []
    start_s: Optional[float] = None
    text: list[int] = []

    def close(end_s: Optional[float]) -> None:
        start = min(offset_s + (start_s or 0.0), end_offset_s)
        end = end_offset_s if end_s is None else min(offset_s + end_s, end_offset_s)
        segments.append(DecodedSegment(tuple(text), start, end))

    for token in tokens:
        if token < timestamp_begin:
            text.append(token)
            continue
        time_s = (token - timestamp_begin) * WHISPER_TIME_PRECISION_S
        if text:
            close(time_s)
            text = []
        # A closing timestamp opens the next segment too when Whisper does not repeat it.
        start_s = time_s
    if text:
        close(None)
    return segments


@dataclass
class _Row:
    """A window of the batch while greedy decoding runs."""

    row: int  # its row in the batch decoded
    no_speech_prob: float
    tokens: list[int] = field(default_factory=list)  # its tokens after the prompt, so far


class GreedyWhisperDecoder:
    """Greedy decoding with timestamps for a batch of Whisper windows that share one prompt."""

    def __init__(self, model: Any, fallback: FallbackOptions = FallbackOptions()) -> None:
        self.model = model
        self.fallback = fallback
        generation_config = model.generation_config
        self.generation_config = generation_config
        self.eos_token_id = int(generation_config.eos_token_id)
        self.timestamp_begin = int(generation_config.no_timestamps_token_id) + 1
        # <|nospeech|> sits just before <|notimestamps|> in every Whisper vocabulary.
        self.no_speech_token_id = int(generation_config.no_timestamps_token_id) - 1
        self.max_target_positions = int(model.config.max_target_positions)
        # openai/whisper keeps at most half the context for the previous text (223 of 448), and
        # faster-whisper half of max_length: the window's own text keeps the other half, also
        # where a checkpoint's max_length is below its positions (225 in many fine-tunes).
        context = min(int(generation_config.max_length or self.max_target_positions), self.max_target_positions)
        self.max_previous_tokens = context // 2 - 1
        self.start_token_id = int(generation_config.decoder_start_token_id)
        self.step = WhisperDecoderStep(model)
        prev_sot = getattr(generation_config, "prev_sot_token_id", None)
        # <|startofprev|> sits just before <|startoftranscript|> in every Whisper vocabulary.
        self.prev_sot_token_id = (
            int(prev_sot) if prev_sot is not None else int(generation_config.decoder_start_token_id) - 1
        )

    def max_length(self, prompt_length: int) -> int:
        """Where generate stops a window, prompt included. transformers 5 adds the prompt to
        generation_config.max_length, 4.57 counts the prompt in it; both stop at the model's
        448 positions, so real checkpoints (max_length 448) stop at 448 either way."""
        import transformers

        max_length = int(self.generation_config.max_length)
        if int(transformers.__version__.split(".")[0]) >= 5:
            max_length += prompt_length
        return min(max_length, self.max_target_positions)

    def max_new_tokens(self, prompt: Sequence[int]) -> int:
        """The most tokens a window decoded from `prompt` may have (<|endoftext|> aside): what
        `generate` would decode (`max_length`), but never so many that the passes after decoding
        leave the model's positions (see `positions_room`); at least one, as `generate` decodes."""
        return max(1, min(self.max_length(len(prompt)) - len(prompt), self.positions_room(prompt)))

    def positions_room(self, prompt: Sequence[int]) -> int:
        """Tokens a window decoded from `prompt` may have so that scoring (the prompt, the tokens,
        <|endoftext|>) and word alignment (the start sequence without the previous text,
        <|notimestamps|>, the text, <|endoftext|>) fit in the model's positions. A window that
        fills it ran into a loop: speech never fills Whisper's context (a `max_length` set below
        it is a choice, and is not this)."""
        start_length = len(prompt) - _start_of_transcript(prompt, self.start_token_id)
        return min(self.max_target_positions - len(prompt) - 1, self.max_target_positions - start_length - 2)

    def prompt(
        self, language: Optional[str], task: str, previous: Sequence[int] = (), *, timestamps: bool = True
    ) -> list[int]:
        """<|startoftranscript|>, then for multilingual models <|language|> and <|task|>: the
        tokens `generate` starts from when timestamps are on. With `previous` text tokens (a
        prompt, hotwords), Whisper's convention for the previous window's text goes first:
        <|startofprev|> and at most the last `max_previous_tokens` (223 for 448 positions)."""
        config = self.generation_config
        prompt = []
        if previous:
            prompt = [self.prev_sot_token_id, *list(previous)[-self.max_previous_tokens :]]
        prompt.append(int(config.decoder_start_token_id))
        if getattr(config, "is_multilingual", False) and getattr(config, "lang_to_id", None):
            if language is not None:
                prompt.append(int(config.lang_to_id[f"<|{language}|>"]))
            prompt.append(int(config.task_to_id[task]))
        if not timestamps:
            prompt.append(self.timestamp_begin - 1)  # <|notimestamps|>
        return prompt

    def rules(self, begin_index: int, device: Any, options: Optional[DecodingOptions]) -> WhisperLogitsRules:
        """The logits rules of windows decoded from a prompt of `begin_index` tokens under
        `options`: what `decode` and `score` both apply, so that they agree by construction."""
        return WhisperLogitsRules(self.generation_config, begin_index, device, options)

    def decode(
        self,
        encoder_states: Any,
        prompt: Sequence[int],
        options: Optional[DecodingOptions] = None,
        *,
        is_repeating: Optional[Callable[[list[int]], bool]] = None,
        max_new_tokens: Optional[int] = None,
        should_stop: Optional[StopSignal] = None,
    ) -> list[WindowTokens]:
        """Decode every window of `encoder_states` (batch, frames, width) from `prompt` under
        the rules of `options` (None: the model's own, `DecodingOptions.for_model`), at most
        `max_new_tokens` tokens each (None, or more than the model allows: `max_new_tokens(prompt)`).
        `is_repeating(tokens)`, when given, is asked every `fallback.repetition_check_every`
        tokens and stops a row that it says loops (that row's result has gave_up=True);
        `should_stop`, checked at every token, stops the job mid-window (a live draft replaced)."""
        import torch

        start_of_transcript = _start_of_transcript(prompt, self.start_token_id)
        prompt_ids = torch.tensor(
            [list(prompt)] * encoder_states.shape[0], dtype=torch.long, device=encoder_states.device
        )
        limit = self.max_new_tokens(prompt)
        if max_new_tokens is not None:
            limit = min(limit, max_new_tokens)
        step = self.step
        step.start(encoder_states)
        try:
            return self._decode_rows(
                step,
                prompt_ids,
                start_of_transcript,
                self.rules(prompt_ids.shape[1], prompt_ids.device, options),
                is_repeating,
                max_new_tokens=limit,
                room=self.positions_room(prompt),
                should_stop=should_stop,
            )
        finally:
            step.finish()

    def _decode_rows(
        self,
        step: WhisperDecoderStep,
        prompt_ids: Any,
        start_of_transcript: int,
        rules: WhisperLogitsRules,
        is_repeating: Optional[Callable[[list[int]], bool]],
        *,
        max_new_tokens: int,
        room: int,
        should_stop: Optional[StopSignal] = None,
    ) -> list[WindowTokens]:
        import torch

        # The prompt step: logits at <|startoftranscript|> (the no-speech probability) and at the end.
        logits = step.step(prompt_ids, (start_of_transcript, prompt_ids.shape[1] - 1))
        no_speech = logits[:, 0].float().softmax(-1)[:, self.no_speech_token_id].tolist()
        rows = [_Row(row, no_speech_prob) for row, no_speech_prob in enumerate(no_speech)]  # those decoding
        sum_logprobs = torch.zeros(len(rows), dtype=torch.float32, device=prompt_ids.device)  # in `rows`' order
        logits = logits[:, -1]
        results: dict[int, WindowTokens] = {}
        while rows:
            if should_stop is not None:
                should_stop.check()
            next_tokens, logprobs = rules.next_tokens([row.tokens for row in rows], logits)
            sum_logprobs += logprobs
            for row, token in zip(rows, next_tokens.tolist(), strict=True):
                row.tokens.append(token)
            check = self._checks_repetition(len(rows[0].tokens), is_repeating)
            for index, row in enumerate(rows):
                result = self._finished(row, sum_logprobs[index], max_new_tokens, room, check, is_repeating)
                if result is not None:
                    results[row.row] = result
            rows, next_tokens, sum_logprobs = _unfinished(step, rows, results, next_tokens, sum_logprobs)
            if rows:
                logits = step.step(next_tokens[:, None])[:, -1]
        return [results[row] for row in sorted(results)]

    def _checks_repetition(self, count: int, is_repeating: Optional[Callable[[list[int]], bool]]) -> bool:
        """Whether rows of `count` tokens are asked `is_repeating` at this step."""
        return (
            is_repeating is not None
            and count >= self.fallback.repetition_check_from
            and count % self.fallback.repetition_check_every == 0
        )

    def _finished(
        self,
        row: _Row,
        sum_logprob: Any,
        max_new_tokens: int,
        room: int,
        check: bool,
        is_repeating: Optional[Callable[[list[int]], bool]],
    ) -> Optional[WindowTokens]:
        """What `row` decoded (`sum_logprob`: its sum of log-probabilities, a tensor's element),
        once it has ended (end-of-text, `max_new_tokens`, or a loop that
        `is_repeating` flags on a `check` step); None while it goes on."""
        tokens = row.tokens
        ended = tokens[-1] == self.eos_token_id
        gave_up = False
        if not (ended or len(tokens) >= max_new_tokens):
            gave_up = check and is_repeating(list(tokens))  # type: ignore[misc]
            if not gave_up:
                return None
        if ended:
            tokens = tokens[:-1]
        return WindowTokens(
            tokens=tuple(tokens),
            # openai/whisper divides by the text length plus one (the end-of-text).
            avg_logprob=float(sum_logprob) / (len(tokens) + 1),
            no_speech_prob=row.no_speech_prob,
            gave_up=gave_up,
            reached_limit=not ended and len(tokens) >= room,
        )

    def score(
        self,
        encoder_states: Any,
        prompt: Sequence[int],
        tokens: Sequence[int],
        options: Optional[DecodingOptions] = None,
    ) -> WindowTokens:
        """The measures `decode` reports under `options`, for tokens decoded elsewhere
        (speculative decoding): one teacher-forced pass over one window (`encoder_states` of
        batch 1), the same rules at every position."""
        import torch

        device = encoder_states.device
        ended = len(tokens) < self.max_new_tokens(prompt)  # else it was stopped there, unfinished
        ids = list(prompt) + list(tokens) + ([self.eos_token_id] if ended else [])
        sequence = torch.tensor([ids], dtype=torch.long, device=device)
        hidden = self.model.get_decoder()(
            input_ids=sequence, encoder_hidden_states=encoder_states, use_cache=False
        ).last_hidden_state
        logits = self.model.proj_out(hidden)[0]  # (positions, vocabulary)
        rules = self.rules(len(prompt), device, options)
        sum_logprobs = 0.0
        for position in range(len(prompt), len(ids)):
            scores = rules.scores([ids[len(prompt) : position]], logits[position - 1 : position])
            sum_logprobs += float(scores.log_softmax(-1)[0, ids[position]])
        return WindowTokens(
            tokens=tuple(tokens),
            avg_logprob=sum_logprobs / (len(tokens) + 1),
            no_speech_prob=float(
                logits[_start_of_transcript(prompt, int(self.generation_config.decoder_start_token_id))]
                .float()
                .softmax(-1)[self.no_speech_token_id]
            ),
            reached_limit=not ended and len(tokens) >= self.positions_room(prompt),
        )


def _start_of_transcript(prompt: Sequence[int], start_token_id: int) -> int:
    """Where <|startoftranscript|> is in a prompt: after the previous text, when there is one.
    The no-speech probability is read there, as openai/whisper does."""
    return len(prompt) - 1 - list(prompt)[::-1].index(start_token_id)


def _unfinished(
    step: WhisperDecoderStep, rows: list[_Row], results: dict[int, WindowTokens], next_tokens: Any, sum_logprobs: Any
) -> tuple[list[_Row], Any, Any]:
    """The rows still decoding (not in `results`), with their next tokens and summed log
    probabilities; the decoder step keeps only their keys and values."""
    import torch

    keep = [index for index, row in enumerate(rows) if row.row not in results]
    if keep and len(keep) < len(rows):
        kept = torch.tensor(keep, device=next_tokens.device)
        step.keep(kept)
        next_tokens, sum_logprobs = next_tokens[kept], sum_logprobs[kept]
    return [rows[index] for index in keep], next_tokens, sum_logprobs
