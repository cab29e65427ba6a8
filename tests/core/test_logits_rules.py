"""The logits rules (suppressed tokens, timestamp pairing) mask what transformers' own Whisper
processors mask."""

from __future__ import annotations

import numpy as np


def _transformers_processors(generation_config, begin_index: int):
    """generate's own processors for Whisper with timestamps, in its order."""
    from transformers import LogitsProcessorList
    from transformers.generation.logits_process import (
        SuppressTokensAtBeginLogitsProcessor,
        SuppressTokensLogitsProcessor,
        WhisperTimeStampLogitsProcessor,
    )

    return LogitsProcessorList(
        [
            SuppressTokensAtBeginLogitsProcessor(generation_config.begin_suppress_tokens, begin_index),
            SuppressTokensLogitsProcessor(generation_config.suppress_tokens),
            WhisperTimeStampLogitsProcessor(generation_config, begin_index=begin_index),
        ]
    )


def test_logits_rules_mask_what_generates_processors_mask(tiny_en_engine) -> None:
    """Random scores and token histories shaped like Whisper's output (text, timestamp pairs, a
    lone timestamp, the first step, a timestamp that makes every timestamp likelier than text):
    the same -inf on the same tokens as transformers' processors, the other scores unchanged."""
    import torch

    from whosaid.recognition.logits_rules import WhisperLogitsRules

    generation_config = tiny_en_engine.recognizer.model.generation_config
    vocabulary = tiny_en_engine.recognizer.model.config.vocab_size
    timestamp_begin = generation_config.no_timestamps_token_id + 1
    prompt = [generation_config.decoder_start_token_id]
    rng = np.random.default_rng(7)
    generator = torch.Generator().manual_seed(7)
    histories = [
        [],
        [timestamp_begin],
        [timestamp_begin, 440, 1029],
        [timestamp_begin, 440, timestamp_begin + 60],
        [timestamp_begin, 440, timestamp_begin + 60, timestamp_begin + 60],
        [timestamp_begin, 440, timestamp_begin + 60, timestamp_begin + 60, 329, 11],
        [timestamp_begin + 3, 262, 50, timestamp_begin + 80, 13],
    ]
    for length in (1, 2, 3, 5, 9):  # random histories, every length the same within one batch
        for _ in range(6):
            history, time = [], timestamp_begin
            for _ in range(length):
                if rng.random() < 0.3:
                    time = min(time + int(rng.integers(0, 40)), vocabulary - 1)
                    history.append(time)
                else:
                    history.append(int(rng.integers(0, generation_config.eos_token_id)))
            histories.append(history)
    by_length: dict[int, list[list[int]]] = {}
    for history in histories:
        by_length.setdefault(len(history), []).append(history)
    rules = WhisperLogitsRules(generation_config, len(prompt), "cpu")
    processors = _transformers_processors(generation_config, len(prompt))
    checked = forced = 0
    for batch in by_length.values():
        for scale in (1.0, 8.0):  # 8: peaked scores, where a timestamp often wins on probability
            logits = torch.randn(len(batch), vocabulary, generator=generator) * scale
            logits[:, timestamp_begin:] += scale * float(rng.random())
            expected = processors(torch.tensor([prompt + history for history in batch]), logits.clone())
            got = rules.scores(batch, logits)
            assert torch.equal(torch.isinf(got), torch.isinf(expected))
            assert torch.equal(got[~torch.isinf(got)], expected[~torch.isinf(expected)])
            # Greedy's pick and its log-probability from one softmax: generate's argmax, and the
            # log-probability under the masked scores (renormalized over the timestamps where only
            # they are left).
            tokens, logprobs = rules.next_tokens(batch, logits)
            assert torch.equal(tokens, expected.argmax(-1))
            torch.testing.assert_close(
                logprobs, expected.log_softmax(-1).gather(1, tokens[:, None]).squeeze(1), rtol=0, atol=1e-5
            )
            forced += int(
                (
                    torch.isinf(expected[:, :timestamp_begin]).all(-1)
                    & ~torch.isinf(expected[:, timestamp_begin:]).all(-1)
                ).sum()
            )
            checked += len(batch)
    assert checked == 2 * len(histories)
    assert forced > 0  # the renormalized case was met
