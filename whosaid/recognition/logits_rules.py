"""What one request asks of the decoder (`DecodingOptions`), and Whisper's rules for the next
token's scores that carry it out.

Three decoding paths read the same options. The lean greedy loop (whosaid.recognition.greedy)
decides a window's tokens under `WhisperLogitsRules`; `GreedyWhisperDecoder.score` measures
tokens decoded elsewhere under the same rules; transformers' `generate` (the beam-search
fallback, speculative drafts) gets them as `DecodingOptions.generate_kwargs`.
tests/asr/test_decoding_paths.py checks that the three agree, option by option, on real weights.

The rules are `generate`'s with timestamps on: its suppress-token processors, then its timestamp
processor (transformers' SuppressTokensAtBeginLogitsProcessor, SuppressTokensLogitsProcessor and
WhisperTimeStampLogitsProcessor, in that order; openai/whisper's SuppressTokens, SuppressBlank
and ApplyTimestampRules). The same -inf on the same tokens, done for the rows of the lean loop
without the per-step costs of the processors: the vocabulary masks are built once (transformers
rebuilds them with torch.isin at every step), each row's generated tokens are read from the
Python lists the loop keeps (the processor copies every row's whole sequence to a list at every
step), and the log-probability test that forces a timestamp runs for all rows at once. A test
checks them against transformers' processors on random scores.

A new option is a field of `DecodingOptions`, its line in `for_request` and `generate_kwargs`,
and its rule in `WhisperLogitsRules.scores` (plus the request's field in whosaid/config.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence


@dataclass(frozen=True)
class DecodingOptions:
    """What one request asks of the decoder, in the manner of openai/whisper's DecodingOptions:
    built once per request (`for_request`, or `for_model` for the model's own defaults) and
    passed down to every window and every decoding path."""

    #: "transcribe" in the spoken language, or "translate" to English.
    task: str = "transcribe"
    #: The spoken language, forced for every window; None: detected.
    language: Optional[str] = None
    #: Detect the language of every window rather than once, on the first window.
    multilingual: bool = False
    #: Text that conditions the first window, as the previous window's text would
    #: (<|startofprev|> text <|startoftranscript|> ..., faster-whisper's `initial_prompt`).
    initial_prompt: Optional[str] = None
    #: Words to favour, placed the same way on every window (faster-whisper's `hotwords`).
    hotwords: Optional[str] = None
    #: Compute word timestamps for the decoded windows (one extra decoder pass per batch).
    word_timestamps: bool = False
    #: Decode Whisper's timestamp tokens (segments); False: text only, after <|notimestamps|>.
    timestamps: bool = True
    #: Tokens never decoded (openai/whisper's `suppress_tokens`; the model's list is Whisper's
    #: non-speech symbols).
    suppress_tokens: tuple[int, ...] = ()
    #: Tokens never decoded first (openai/whisper's `suppress_blank`: a blank and <|endoftext|>).
    begin_suppress_tokens: tuple[int, ...] = ()
    #: The first timestamp is at most this many 0.02 s steps after the window's start
    #: (openai/whisper's `max_initial_timestamp`, 1 s: index 50); None: any.
    max_initial_timestamp_index: Optional[int] = None

    @classmethod
    def for_model(cls, generation_config: Any, **fields: Any) -> "DecodingOptions":
        """`fields`, and for the rest the model's own choices (its generation config), as
        `generate` makes them."""
        max_initial = getattr(generation_config, "max_initial_timestamp_index", None)
        defaults = {
            "suppress_tokens": _tokens(generation_config.suppress_tokens),
            "begin_suppress_tokens": _tokens(generation_config.begin_suppress_tokens),
            "max_initial_timestamp_index": None if max_initial is None else int(max_initial),
        }
        return cls(**{**defaults, **fields})

    @classmethod
    def for_request(
        cls, config: Any, generation_config: Any, *, language: Optional[str], multilingual: bool
    ) -> "DecodingOptions":
        """A request's options (`config`: its InferenceConfig), with its language and whether
        to detect it per window already checked against the model."""
        return cls.for_model(
            generation_config,
            task=config.task,
            language=language,
            multilingual=multilingual,
            initial_prompt=config.initial_prompt,
            hotwords=config.hotwords,
            word_timestamps=config.return_timestamps == "word",
            timestamps=not config.without_timestamps,
        )

    def generate_kwargs(self) -> dict[str, Any]:
        """The rules' options as transformers' `generate` takes them (they replace the model's
        generation config for that call); the language, task and prompt go in apart."""
        return {
            "suppress_tokens": list(self.suppress_tokens) or None,
            "begin_suppress_tokens": list(self.begin_suppress_tokens) or None,
            "max_initial_timestamp_index": self.max_initial_timestamp_index,
        }


def _tokens(tokens: Optional[Sequence[int]]) -> tuple[int, ...]:
    return tuple(int(token) for token in tokens or ())


class WhisperLogitsRules:
    """The rules for windows decoded from a prompt of `begin_index` tokens under `options`
    (None: the model's own, `DecodingOptions.for_model`). The model's generation config gives
    only its vocabulary's special tokens and how its `generate` places timestamps."""

    def __init__(
        self, generation_config: Any, begin_index: int, device: Any, options: Optional[DecodingOptions] = None
    ) -> None:
        config = generation_config
        if options is None:
            options = DecodingOptions.for_model(config)
        self.begin_index = begin_index
        self.begin_suppress = _token_ids(options.begin_suppress_tokens, device)
        self.suppress = _token_ids(options.suppress_tokens, device)
        self.no_timestamps_token_id = int(config.no_timestamps_token_id)
        self.timestamp_begin = self.no_timestamps_token_id + 1
        self.eos_token_id = int(config.eos_token_id or config.bos_token_id)
        self.max_initial_timestamp_index = options.max_initial_timestamp_index
        self.timestamps = options.timestamps
        self.detect_timestamp_from_logprob = bool(getattr(config, "_detect_timestamp_from_logprob", True))
        self._suppressed_in: Optional[tuple[int, Any]] = None

    def scores(self, generated: Sequence[Sequence[int]], logits: Any) -> Any:
        """float32 scores (rows, vocabulary) of the next token from `logits` (rows, vocabulary),
        for rows that have generated `generated` after the prompt so far (all the same length,
        as in a batch)."""
        return self._apply(generated, logits)[0]

    def next_tokens(self, generated: Sequence[Sequence[int]], logits: Any) -> tuple[Any, Any]:
        """Greedy's next token of each row under the rules (the highest score, as `generate`
        picks it) and its log-probability under them ((rows,) each), from one softmax: where the
        timestamp rule left a row only its timestamps, their probabilities are renormalized."""
        import torch

        scores, logprobs, forced, timestamp_logprob = self._apply(generated, logits)
        tokens = scores.argmax(-1)
        if logprobs is None:
            logprobs = scores.log_softmax(dim=-1)
        chosen = logprobs.gather(1, tokens[:, None]).squeeze(1)
        if forced is not None:
            chosen = torch.where(forced, chosen - timestamp_logprob, chosen)
        return tokens, chosen

    def _apply(self, generated: Sequence[Sequence[int]], logits: Any) -> tuple[Any, Any, Any, Any]:
        """The scores, and when the timestamp test ran (None otherwise): the log-probabilities
        before it, the rows it left only timestamps (None if none) and those rows' log-probability
        of any timestamp."""
        import torch

        tb = self.timestamp_begin
        minus_infinity = -float("inf")
        scores = logits.to(copy=True, dtype=torch.float32)
        at_begin = len(generated[0]) == 0
        scores.index_fill_(1, self._always_suppressed(scores.shape[-1], scores.device), minus_infinity)
        if at_begin and self.begin_suppress is not None:
            scores[:, self.begin_suppress[self.begin_suppress < scores.shape[-1]]] = minus_infinity
        if not self.timestamps:
            scores[:, tb:] = minus_infinity
            return scores, None, None, None
        for row, tokens in enumerate(generated):
            self._order_timestamps(scores[row], tokens)
        if at_begin:
            scores[:, :tb] = minus_infinity
            if self.max_initial_timestamp_index is not None:
                scores[:, tb + self.max_initial_timestamp_index + 1 :] = minus_infinity
        if not self.detect_timestamp_from_logprob:
            return scores, None, None, None
        # When all the timestamps together are likelier than any one text token, a timestamp.
        logprobs = scores.log_softmax(dim=-1)
        timestamp_logprob = logprobs[:, tb:].logsumexp(dim=-1)
        forced = timestamp_logprob > logprobs[:, :tb].amax(dim=-1)
        if not bool(forced.any()):
            return scores, logprobs, None, timestamp_logprob
        scores[:, :tb].masked_fill_(forced[:, None], minus_infinity)
        return scores, logprobs, forced, timestamp_logprob

    def _order_timestamps(self, scores: Any, tokens: Sequence[int]) -> None:
        """One row's `scores` after `tokens`: timestamps come in pairs, except just before
        end-of-text, and never decrease; a closed pair's time is not given again."""
        tb = self.timestamp_begin
        minus_infinity = -float("inf")
        last_was_timestamp = len(tokens) >= 1 and tokens[-1] >= tb
        penultimate_was_timestamp = len(tokens) < 2 or tokens[-2] >= tb
        if last_was_timestamp:
            if penultimate_was_timestamp:
                scores[tb:] = minus_infinity
            else:
                scores[: self.eos_token_id] = minus_infinity
        last_timestamp = next((token for token in reversed(tokens) if token >= tb), None)
        if last_timestamp is not None:
            if not (last_was_timestamp and not penultimate_was_timestamp):
                last_timestamp += 1
            scores[tb:last_timestamp] = minus_infinity

    def _always_suppressed(self, vocabulary: int, device: Any) -> Any:
        """The tokens never decoded (the suppressed ones and <|notimestamps|>) inside a
        vocabulary of `vocabulary` logits: one index, made once."""
        import torch

        cached = self._suppressed_in
        if cached is None or cached[0] != vocabulary:
            suppressed = [] if self.suppress is None else self.suppress[self.suppress < vocabulary].tolist()
            index = torch.tensor(sorted({*suppressed, self.no_timestamps_token_id}), dtype=torch.long, device=device)
            cached = self._suppressed_in = (vocabulary, index)
        return cached[1]


def _token_ids(tokens: Sequence[int], device: Any) -> Optional[Any]:
    import torch

    if not tokens:
        return None
    return torch.tensor(sorted({int(token) for token in tokens}), dtype=torch.long, device=device)
