"""Whisper decoding keeps transformers' transcript: the lean greedy loop picks generate's tokens
on one window or a batch and on any thread count, teacher-forced scoring gives the loop's
measures, a repeating row stops early, segments are cut at timestamps, and the fallback is
generate's beam search."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from tests.support.engines import RATE, config, cut
from tests.support.fallback import ALWAYS_FALL_BACK, NEVER_FALL_BACK, with_fallback
from tests.support.reference import transcribe_with_generate
from tests.support.threads import torch_threads
from whosaid.audio.loading import audio_from_array
from whosaid.audio.vad import SpeechWindow
from whosaid.recognition.greedy import (
    FallbackOptions,
    GreedyWhisperDecoder,
    WindowTokens,
    compression_ratio,
    needs_fallback,
    says_a_phrase_thrice,
    split_segments,
)
from whosaid.recognition.recognizer import BATCHED
from whosaid.recognition.segments import DecodedSegment


def reference_tokens(recognizer, features, **kwargs) -> list[list[int]]:
    """transformers' own Whisper generate, one call per window, prompt and end-of-text cut off."""
    import torch

    language = {"language": "en", "task": "transcribe"} if recognizer.is_multilingual else {}
    with torch.inference_mode():
        output = recognizer.model.generate(
            features,
            return_timestamps=True,
            return_dict_in_generate=True,
            force_unique_generate_call=True,
            **language,
            **kwargs,
        )
    prompt_length = len(recognizer.decoder.prompt("en" if recognizer.is_multilingual else None, "transcribe"))
    eos = recognizer.decoder.eos_token_id
    tokens = []
    for sequence in output.sequences.tolist():
        generated = sequence[prompt_length:]
        tokens.append(generated[: generated.index(eos)] if eos in generated else generated)
    return tokens


def greedy(recognizer, windows: list[np.ndarray]):
    import torch

    features = recognizer.features(windows)
    language = "en" if recognizer.is_multilingual else None
    with torch.inference_mode():
        states = recognizer.model.get_encoder()(features).last_hidden_state
        return features, states, recognizer.decoder.decode(states, recognizer.decoder.prompt(language, "transcribe"))


def test_greedy_loop_picks_generates_tokens_random_model(tiny_engine, sample_audio) -> None:
    recognizer = tiny_engine.recognizer
    rng = np.random.default_rng(1)
    for window in (sample_audio.samples[7 * RATE : 15 * RATE], rng.normal(0, 0.1, 3 * RATE).astype(np.float32)):
        features, _, (result,) = greedy(recognizer, [window])
        assert list(result.tokens) == reference_tokens(recognizer, features)[0]


@pytest.mark.parametrize("threads", [1, 3])
def test_one_window_picks_generates_tokens_on_any_thread_count(tiny_engine, sample_audio, threads) -> None:
    """One row's products are cut into one block of rows per thread: 3 threads leave a
    remainder of the 51865-word projection (and of every layer), 1 thread takes the plain path."""
    recognizer = tiny_engine.recognizer
    with torch_threads(threads):
        features, _, (result,) = greedy(recognizer, [sample_audio.samples[7 * RATE : 15 * RATE]])
    assert list(result.tokens) == reference_tokens(recognizer, features)[0]


@pytest.mark.parametrize("threads", [1, 2, 3, 16])
@pytest.mark.parametrize("with_bias", [True, False])
def test_one_row_product_is_the_linear_layers_on_any_thread_count(threads, with_bias) -> None:
    import torch
    import torch.nn.functional as F

    from whosaid.recognition.kernels.products import affine

    generator = torch.Generator().manual_seed(threads)
    weight = torch.randn(1001, 64, generator=generator)  # 1001 rows: a remainder for 2, 3 and 16 blocks
    bias = torch.randn(1001, generator=generator) if with_bias else None
    hidden = torch.randn(1, 1, 64, generator=generator)
    with torch_threads(threads):
        output = affine(weight, bias, hidden)
    assert output.shape == (1, 1, 1001)
    torch.testing.assert_close(output, F.linear(hidden, weight, bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 4, 9])
@pytest.mark.parametrize("in_blocks", [True, False])
@pytest.mark.parametrize("several_rows", ["linear", "weight_on_the_left", "onednn"])
def test_each_cpu_product_is_the_linear_layers(rows, in_blocks, several_rows) -> None:
    # Whichever product the CPU measured fastest, the same values up to rounding.
    import torch
    import torch.nn.functional as F

    from whosaid.recognition.kernels import products as decoder_products

    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(1001, 64, generator=generator)
    bias = torch.randn(1001, generator=generator)
    hidden = torch.randn(rows, 1, 64, generator=generator)
    table = tuple((((1001, 64), count), several_rows) for count in decoder_products.MEASURED_ROWS)
    products = decoder_products.CpuProducts(one_row_in_blocks=in_blocks, several_rows=table)
    with torch_threads(2):
        output = decoder_products.Product(weight, bias, products)(hidden)
    assert output.shape == (rows, 1, 1001)
    torch.testing.assert_close(output, F.linear(hidden, weight, bias), rtol=1e-5, atol=1e-5)


def test_several_rows_take_the_product_measured_at_the_fewest_rows_that_hold_them() -> None:
    from whosaid.recognition.kernels.products import LINEAR, ONEDNN, WEIGHT_ON_THE_LEFT, CpuProducts

    shape = (1001, 64)
    products = CpuProducts(
        one_row_in_blocks=True, several_rows=(((shape, 4), ONEDNN), ((shape, 8), WEIGHT_ON_THE_LEFT))
    )
    assert [products.for_several_rows(shape, rows) for rows in (2, 4, 5, 8, 24)] == [
        ONEDNN,
        ONEDNN,
        WEIGHT_ON_THE_LEFT,
        WEIGHT_ON_THE_LEFT,
        WEIGHT_ON_THE_LEFT,
    ]
    assert products.for_several_rows((64, 1001), 4) == LINEAR  # a shape never measured


def test_cpu_products_are_measured_once_per_thread_count_and_shape() -> None:
    from whosaid.recognition.kernels.products import LINEAR, ONEDNN, WEIGHT_ON_THE_LEFT, cpu_products

    with torch_threads(1):
        one_thread = cpu_products()
        assert cpu_products() is one_thread
        assert not one_thread.one_row_in_blocks  # one thread: one block
        with_shape = cpu_products([(1001, 64)])
        assert with_shape.for_several_rows((1001, 64), 4) in (LINEAR, WEIGHT_ON_THE_LEFT, ONEDNN)
        assert cpu_products([(1001, 64)]) is with_shape
        assert cpu_products() is with_shape
        assert with_shape.one_row_in_blocks == one_thread.one_row_in_blocks
    with torch_threads(2):
        assert cpu_products() is cpu_products()


@pytest.mark.slow
def test_greedy_loop_picks_generates_tokens_real_model(tiny_en_engine, sample_audio) -> None:
    recognizer = tiny_en_engine.recognizer
    for start_s, end_s in ((6.5, 30.0), (6.5, 9.0), (14.0, 22.0)):
        features, _, (result,) = greedy(recognizer, [sample_audio.samples[int(start_s * RATE) : int(end_s * RATE)]])
        expected = reference_tokens(recognizer, features)[0]
        assert list(result.tokens) == expected
        assert sum(token >= recognizer.decoder.timestamp_begin for token in expected) >= 2


@pytest.mark.slow
def test_rows_leaving_the_batch_keep_their_tokens(tiny_en_engine, sample_audio) -> None:
    """Windows of different lengths end at different steps; the finished rows leave the batch.
    Every row still gets the tokens it gets alone."""
    recognizer = tiny_en_engine.recognizer
    spans = ((6.5, 9.0), (6.5, 30.0), (14.0, 22.0), (21.7, 24.0))
    windows = [sample_audio.samples[int(start * RATE) : int(end * RATE)] for start, end in spans]
    _, _, batched = greedy(recognizer, windows)
    lengths = {len(result.tokens) for result in batched}
    assert len(lengths) == len(spans), "the rows must end at different steps"
    for window, result in zip(windows, batched, strict=True):
        _, _, (alone,) = greedy(recognizer, [window])
        assert result.tokens == alone.tokens
        assert result.avg_logprob == pytest.approx(alone.avg_logprob, abs=1e-4)


@pytest.mark.slow
def test_scoring_tokens_decoded_elsewhere_gives_the_loops_measures(tiny_en_engine, sample_audio) -> None:
    """Speculative decoding's tokens are measured by one teacher-forced pass (`score`): the same
    log-probability and no-speech probability the loop reports."""
    recognizer = tiny_en_engine.recognizer
    _, states, (result,) = greedy(recognizer, [sample_audio.samples[int(6.5 * RATE) : 22 * RATE]])
    import torch

    with torch.inference_mode():
        scored = recognizer.decoder.score(states, recognizer.decoder.prompt(None, "transcribe"), result.tokens)
    assert scored.tokens == result.tokens
    assert scored.avg_logprob == pytest.approx(result.avg_logprob, abs=1e-4)
    assert scored.no_speech_prob == pytest.approx(result.no_speech_prob, abs=1e-5)
    assert -1.0 < result.avg_logprob < 0 and result.no_speech_prob < 0.1


def test_a_repeating_row_stops_early_and_falls_back(tiny_engine, sample_audio) -> None:
    import torch

    recognizer = tiny_engine.recognizer
    fallback = FallbackOptions(repetition_check_from=40, repetition_check_every=8)
    decoder = GreedyWhisperDecoder(recognizer.model, fallback)
    # the tiny model's own cap (24 tokens) would end it first
    decoder.generation_config = copy.deepcopy(decoder.generation_config)
    decoder.generation_config.max_length = 200
    features = recognizer.features([sample_audio.samples[7 * RATE : 15 * RATE]])
    with torch.inference_mode():
        states = recognizer.model.get_encoder()(features).last_hidden_state
        (result,) = decoder.decode(states, decoder.prompt("en", "transcribe"), is_repeating=lambda tokens: True)
    if result.gave_up:
        assert len(result.tokens) == fallback.repetition_check_from
        assert needs_fallback(result, "any text", fallback)
    else:  # the random model said end-of-text first
        assert len(result.tokens) < fallback.repetition_check_from


def test_compression_ratio_flags_repetition() -> None:
    assert compression_ratio("") == 0.0
    assert compression_ratio(" I don't know what you mean." * 20) > 2.4
    assert compression_ratio(" Hello, this is Diane in New Jersey, and I'm Sheila in Texas.") < 2.4
    assert FallbackOptions().compression_ratio_threshold == 2.4  # openai/whisper's


def test_a_phrase_said_three_times_fails_the_checks_only_where_asked() -> None:
    # A live turn of a far-field meeting (whisper-tiny.en): four times a five-word phrase, and
    # the rest of the turn never transcribed. Its compression ratio (2.29) passes openai/whisper's.
    loop = "Okay. See you Thank you Is that your long time? Is that your long time? Is that your long time?"
    assert compression_ratio(loop) < 2.4
    result = WindowTokens(tokens=(1, 2, 3), avg_logprob=-0.4, no_speech_prob=0.1)
    assert not needs_fallback(result, loop, FallbackOptions())
    assert needs_fallback(result, loop, FallbackOptions(loop_phrase_words=12))
    assert not needs_fallback(result, loop, FallbackOptions(loop_phrase_words=4))  # a 5-word phrase
    assert says_a_phrase_thrice("It's a bit of a bit of a bit of a break for us.", 12)  # "a bit of" / "bit of a"
    # Said twice, a word said three times, or a phrase back after other words: speech.
    assert not says_a_phrase_thrice("I mean, I mean, yes. No, no, no. Thank you. Thank you.", 12)
    assert not says_a_phrase_thrice("thank you so much, thank you, and thank you", 12)
    assert not needs_fallback(result, "Thank you. Thank you.", FallbackOptions(loop_phrase_words=12))


def test_segments_are_cut_at_timestamps() -> None:
    begin = 100
    tokens = [begin, 1, 2, begin + 50, begin + 50, 3, begin + 120, begin + 130, 4, 5]
    assert split_segments(tokens, begin, 0.0, 30.0) == [
        DecodedSegment((1, 2), 0.0, 1.0),
        DecodedSegment((3,), 1.0, 2.4),
        DecodedSegment((4, 5), 2.6, 30.0),  # no closing timestamp: the window's end
    ]
    assert split_segments([7, 8], begin, 0.0, 30.0) == [DecodedSegment((7, 8), 0.0, 30.0)]
    assert split_segments([begin, begin + 10], begin, 0.0, 30.0) == []
    # Timed from the window's start on the audio, never past its end.
    assert split_segments(tokens, begin, 10.0, 12.0) == [
        DecodedSegment((1, 2), 10.0, 11.0),
        DecodedSegment((3,), 11.0, 12.0),
        DecodedSegment((4, 5), 12.0, 12.0),
    ]


# ------------------------------------------------------------------------------ fallback


@pytest.mark.parametrize("num_beams", [5, 2])
def test_fallback_gives_generates_beam_search(tiny_engine, sample_audio, num_beams) -> None:
    engine = with_fallback(tiny_engine, dataclasses.replace(ALWAYS_FALL_BACK, num_beams=num_beams))
    recognizer = engine.recognizer
    audio = cut(sample_audio, 0, 22)
    transcript = engine.transcribe(audio, config(batch_size=4, language="en"))
    (window,) = recognizer.vad.windows(audio.samples, 30.0)
    features = recognizer.features([window.samples(audio.samples)])
    (beam,) = reference_tokens(recognizer, features, num_beams=num_beams)
    assert transcript.chunks == _clean(recognizer, window, beam, audio.duration_s)


def test_without_fallback_the_batched_path_is_greedy_generate(tiny_engine, sample_audio) -> None:
    engine = with_fallback(tiny_engine, NEVER_FALL_BACK)
    audio = audio_from_array(np.concatenate([sample_audio.samples, sample_audio.samples[: 15 * RATE]]), RATE)
    transcript = engine.transcribe(audio, config(batch_size=8, language="en"))
    reference = transcribe_with_generate(engine.recognizer, audio, {"language": "en", "task": "transcribe"})
    assert transcript.decoding == BATCHED
    assert transcript.chunks == reference and len(reference) >= 2


def _clean(recognizer, window: SpeechWindow, tokens: list[int], duration_s: float):
    from whosaid.recognition.segments import Span, clean_chunks

    spans = [Span(s.start_s, s.end_s, recognizer.text(s.tokens), (), "en") for s in recognizer.segments(window, tokens)]
    return clean_chunks(spans, duration_s)


def test_the_first_window_goes_alone_only_when_someone_waits_for_it(tiny_en_engine, sample_audio, monkeypatch) -> None:
    """The sample four times over (four windows), batch 8: a plain request decodes them in one
    batch; a listener for each window's text (a stream, progress) or an initial prompt (which
    conditions the first window alone) has the first decoded on its own, then the other three."""
    recognizer = tiny_en_engine.recognizer
    audio = audio_from_array(np.tile(sample_audio.samples, 4), RATE)
    batches: list[int] = []
    decode_windows = recognizer._transcribe_track_windows

    def recorded(tracks, windows, *args, **kwargs):
        batches.append(len(windows))
        return decode_windows(tracks, windows, *args, **kwargs)

    monkeypatch.setattr(recognizer, "_transcribe_track_windows", recorded)
    plain = config(language="en", batch_size=8)
    recognizer.transcribe(audio, plain)
    assert batches == [4]
    batches.clear()
    recognizer.transcribe(audio, plain, on_window=lambda spans: None)
    assert batches == [1, 3]
    batches.clear()
    recognizer.transcribe(audio, config(language="en", batch_size=8, initial_prompt="Diane and Sheila."))
    assert batches == [1, 3]


def test_half_weights_only_where_half_precision_holds_the_weight_exactly() -> None:
    """A float32 weight whose values half precision holds is multiplied from its half copy: the
    float32 products of the same numbers (checked against float64), its bias kept in float32. A
    weight with one value half precision rounds or cannot hold has no half copy."""
    import torch
    import torch.nn.functional as F

    from whosaid.recognition.kernels.products import HalfWeights, Product, half_products_available

    assert half_products_available()  # x86 builds of torch carry fbgemm: CI's and the endpoint's
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(1001, 64, generator=generator).half().float()
    bias = torch.randn(1001, generator=generator) / 3  # float32 values half precision would round
    hidden = torch.randn(4, 1, 64, generator=generator)
    half = HalfWeights.of(weight, bias)
    assert half is not None
    exact = F.linear(hidden.double(), weight.double(), bias.double())
    torch.testing.assert_close(half(hidden).double(), exact, rtol=0, atol=1e-5)
    product = Product(weight, bias, half_if_lossless=True)
    assert product.half is not None
    torch.testing.assert_close(product(hidden[:1]).double(), exact[:1], rtol=0, atol=1e-5)
    for value in (0.1, 1e5):  # more digits than half precision has; beyond its range
        changed = weight.clone()
        changed[500, 7] = value
        assert HalfWeights.of(changed, bias) is None
        assert Product(changed, bias, half_if_lossless=True).half is None
    assert Product(weight, bias).half is None  # only where asked (the decoder step's own weights)


def test_the_decoder_step_multiplies_a_released_whisper_from_half_copies(tiny_en_engine, tiny_engine) -> None:
    """whisper-tiny.en (released in float16): every plain linear layer of the step from its exact
    half copy, none left to measure; a random model's float32 weights: none."""
    real = tiny_en_engine.recognizer.decoder.step
    assert real.products == [] and real.shapes == []
    halves = [plan.self_qkv.product for plan in real.plans] + [real.output]
    layers = ("self_out", "cross_query", "cross_out", "fc1", "fc2")
    halves += [getattr(plan, name) for plan in real.plans for name in layers]
    assert len(halves) == 6 * len(real.plans) + 1 and all(product.half is not None for product in halves)
    random = tiny_engine.recognizer.decoder.step
    assert random.products and all(product.half is None for product in random.products)


def test_half_products_are_the_same_whatever_the_thread_count_and_the_rows_beside() -> None:
    """A row's product from a half copy does not depend on torch's thread count nor on the rows
    multiplied with it (the measured float32 products may: their choice and kernels vary)."""
    import torch

    from whosaid.recognition.kernels.products import HalfWeights

    generator = torch.Generator().manual_seed(11)
    weight = (torch.randn(4099, 256, generator=generator) / 16).half().float()
    half = HalfWeights.of(weight, torch.randn(4099, generator=generator))
    assert half is not None
    rows = torch.randn(41, 256, generator=generator)
    with torch_threads(1):
        expected = half(rows)
    for threads in (2, 3, 4):
        with torch_threads(threads):
            assert torch.equal(half(rows), expected)
            for row in range(8):
                assert torch.equal(half(rows[row : row + 1]), expected[row : row + 1])
            # Every count of rows up to 8 windows of 5 beams, and rows shaped as the step's.
            for count in range(2, 41):
                assert torch.equal(half(rows[:count]), expected[:count]), count
            assert torch.equal(half(rows[:6].reshape(3, 2, 256)), expected[:6].reshape(3, 2, -1))
