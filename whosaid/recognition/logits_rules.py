"""Whisper's rules for the next token's scores, as `generate` applies them with timestamps on:
its suppress-token processors, then its timestamp processor (transformers'
SuppressTokensAtBeginLogitsProcessor, SuppressTokensLogitsProcessor and
WhisperTimeStampLogitsProcessor, in that order; openai/whisper's ApplyTimestampRules).

The same -inf on the same tokens, done for the rows of the lean loop without the per-step costs
of the processors: the vocabulary masks are built once (transformers rebuilds them with
torch.isin at every step), each row's generated tokens are read from the Python lists the loop
keeps (the processor copies every row's whole sequence to a list at every step), and the
log-probability test that forces a timestamp runs for all rows at once.
tests/test_speed.py checks these rules against transformers' processors on random scores.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence


class WhisperLogitsRules:
    """The rules for windows decoded from a prompt of `begin_index` tokens."""

    def __init__(self, generation_config: Any, begin_index: int, device: Any) -> None:
        config = generation_config
        self.begin_index = begin_index
        self.begin_suppress = _token_ids(config.begin_suppress_tokens, device)
        self.suppress = _token_ids(config.suppress_tokens, device)
        self.no_timestamps_token_id = int(config.no_timestamps_token_id)
        self.timestamp_begin = self.no_timestamps_token_id + 1
        self.eos_token_id = int(config.eos_token_id or config.bos_token_id)
        max_initial = getattr(config, "max_initial_timestamp_index", None)
        self.max_initial_timestamp_index: Optional[int] = None if max_initial is None else int(max_initial)
        self.detect_timestamp_from_logprob = bool(getattr(config, "_detect_timestamp_from_logprob", True))

    def scores(self, generated: Sequence[Sequence[int]], logits: Any) -> Any:
        """float32 scores (rows, vocabulary) of the next token from `logits` (rows, vocabulary),
        for rows that have generated `generated` after the prompt so far (all the same length,
        as in a batch)."""
        import torch

        tb = self.timestamp_begin
        minus_infinity = -float("inf")
        scores = logits.to(copy=True, dtype=torch.float32)
        at_begin = len(generated[0]) == 0
        vocabulary = scores.shape[-1]
        if at_begin and self.begin_suppress is not None:
            scores[:, self.begin_suppress[self.begin_suppress < vocabulary]] = minus_infinity
        if self.suppress is not None:
            scores[:, self.suppress[self.suppress < vocabulary]] = minus_infinity
        scores[:, self.no_timestamps_token_id] = minus_infinity
        for row, tokens in enumerate(generated):
            # Timestamps come in pairs, except just before end-of-text.
            last_was_timestamp = len(tokens) >= 1 and tokens[-1] >= tb
            penultimate_was_timestamp = len(tokens) < 2 or tokens[-2] >= tb
            if last_was_timestamp:
                if penultimate_was_timestamp:
                    scores[row, tb:] = minus_infinity
                else:
                    scores[row, : self.eos_token_id] = minus_infinity
            last_timestamp = next((token for token in reversed(tokens) if token >= tb), None)
            if last_timestamp is not None:
                # Timestamps never decrease; a closed pair's time is not given again.
                if not (last_was_timestamp and not penultimate_was_timestamp):
                    last_timestamp += 1
                scores[row, tb:last_timestamp] = minus_infinity
        if at_begin:
            scores[:, :tb] = minus_infinity
            if self.max_initial_timestamp_index is not None:
                scores[:, tb + self.max_initial_timestamp_index + 1 :] = minus_infinity
        if self.detect_timestamp_from_logprob:
            # When all the timestamps together are likelier than any one text token, a timestamp.
            logprobs = scores.log_softmax(dim=-1)
            timestamp_logprob = logprobs[:, tb:].logsumexp(dim=-1)
            max_text_logprob = logprobs[:, :tb].max(dim=-1).values
            scores[:, :tb].masked_fill_((timestamp_logprob > max_text_logprob)[:, None], minus_infinity)
        return scores


def _token_ids(tokens: Optional[Sequence[int]], device: Any) -> Optional[Any]:
    import torch

    if tokens is None:
        return None
    return torch.tensor(sorted({int(token) for token in tokens}), dtype=torch.long, device=device)
