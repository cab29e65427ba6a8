"""The speed options keep the transcript: the lean greedy loop picks generate's tokens, batching
does not change a window's tokens, the fallback gives generate's beam search, the VAD windows
keep chunk times on the audio's time line, and silence or noise stay an empty transcript.
No timings here: benchmarks/speed.py measures them."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from tests.support.fallback import ALWAYS_FALL_BACK, NEVER_FALL_BACK, with_fallback
from tests.support.reference import transcribe_with_generate
from tests.support.threads import torch_threads
from whosaid.audio.loading import Audio, audio_from_array
from whosaid.audio.vad import SpeechWindow, VoiceActivityDetector, plan_windows
from whosaid.config import InferenceConfig
from whosaid.recognition.greedy import (
    FallbackOptions,
    GreedyWhisperDecoder,
    compression_ratio,
    needs_fallback,
    split_segments,
)
from whosaid.recognition.recognizer import BATCHED

RATE = 16_000


def config(**parameters) -> InferenceConfig:
    return InferenceConfig.from_parameters(parameters)[0]


def cut(audio: Audio, start_s: float, end_s: float) -> Audio:
    return audio_from_array(audio.samples[int(start_s * RATE) : int(end_s * RATE)], RATE)


@pytest.fixture(scope="module")
def tiny_engine(tiny_whisper, make_engine):
    return make_engine(tiny_whisper("speed-main", seed=5))


@pytest.fixture(scope="module")
def tiny_en_engine(converted_model, make_engine):
    """Real weights (whisper-tiny.en, English-only): real sentences, end-of-text at different
    steps, timestamps that mean something."""
    return make_engine(converted_model("whisper-tiny.en"))


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


# ------------------------------------------------------------------------- the greedy loop


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

    from whosaid.recognition.decoder_step import affine

    generator = torch.Generator().manual_seed(threads)
    weight = torch.randn(1001, 64, generator=generator)  # 1001 rows: a remainder for 2, 3 and 16 blocks
    bias = torch.randn(1001, generator=generator) if with_bias else None
    hidden = torch.randn(1, 1, 64, generator=generator)
    with torch_threads(threads):
        output = affine(weight, bias, hidden)
    assert output.shape == (1, 1, 1001)
    torch.testing.assert_close(output, F.linear(hidden, weight, bias), rtol=1e-5, atol=1e-5)


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
    checked = 0
    for batch in by_length.values():
        for scale in (1.0, 8.0):  # 8: peaked scores, where a timestamp often wins on probability
            logits = torch.randn(len(batch), vocabulary, generator=generator) * scale
            logits[:, timestamp_begin:] += scale * float(rng.random())
            expected = processors(torch.tensor([prompt + history for history in batch]), logits.clone())
            got = rules.scores(batch, logits)
            assert torch.equal(torch.isinf(got), torch.isinf(expected))
            assert torch.equal(got[~torch.isinf(got)], expected[~torch.isinf(expected)])
            checked += len(batch)
    assert checked == 2 * len(histories)


def test_compression_ratio_flags_repetition() -> None:
    assert compression_ratio("") == 0.0
    assert compression_ratio(" I don't know what you mean." * 20) > 2.4
    assert compression_ratio(" Hello, this is Diane in New Jersey, and I'm Sheila in Texas.") < 2.4
    assert FallbackOptions().compression_ratio_threshold == 2.4  # openai/whisper's


def test_segments_are_cut_at_timestamps() -> None:
    begin = 100
    tokens = [begin, 1, 2, begin + 50, begin + 50, 3, begin + 120, begin + 130, 4, 5]
    assert split_segments(tokens, begin) == [
        (0.0, 1.0, [1, 2]),
        (1.0, 2.4, [3]),
        (2.6, None, [4, 5]),  # no closing timestamp: the window's end
    ]
    assert split_segments([7, 8], begin) == [(None, None, [7, 8])]
    assert split_segments([begin, begin + 10], begin) == []


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


# ------------------------------------------------------------------------- VAD windows


def test_windows_pack_regions_and_cut_in_pauses() -> None:
    regions = [(1.0, 5.0), (6.0, 20.0), (21.0, 29.0), (31.0, 40.0), (45.0, 46.0)]
    assert plan_windows(regions, 30.0) == [
        SpeechWindow(1.0, 29.0),
        SpeechWindow(31.0, 46.0),
    ]
    assert plan_windows(regions, 10.0) == [
        SpeechWindow(1.0, 5.0),
        SpeechWindow(6.0, 20.0 - 7.0),  # 14 s without a pause: two equal pieces
        SpeechWindow(13.0, 20.0),
        SpeechWindow(21.0, 29.0),
        SpeechWindow(31.0, 40.0),
        SpeechWindow(45.0, 46.0),
    ]
    assert plan_windows([], 30.0) == []


def test_vad_skips_the_leading_silence_and_keeps_windows_inside_the_audio(sample_audio) -> None:
    vad = VoiceActivityDetector.load()
    long_audio = np.tile(sample_audio.samples, 4)
    for samples, max_window_s in ((sample_audio.samples, 30.0), (long_audio, 30.0), (long_audio, 10.0)):
        windows = vad.windows(samples, max_window_s)
        duration_s = len(samples) / RATE
        assert windows and windows[0].start_s > 6.0, "pyannote's sample starts with 6.7 s of silence"
        for window, following in zip(windows, windows[1:] + [None], strict=True):
            assert 0 <= window.start_s < window.end_s <= duration_s
            assert window.duration_s <= max_window_s + 1e-6
            if following is not None:
                assert window.end_s <= following.start_s
    assert len(vad.windows(long_audio, 30.0)) == 4


def test_vad_loading_keeps_torchs_thread_count() -> None:
    import torch

    from whosaid.audio.vad import _load_silero_sequence_model

    before = torch.get_num_threads()
    _load_silero_sequence_model.cache_clear()
    VoiceActivityDetector.load()
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("amplitude", [0.0, 1e-3, 0.1])
def test_silence_and_noise_give_an_empty_transcript(tiny_engine, amplitude) -> None:
    noise = np.random.default_rng(2).normal(0, amplitude, 4 * RATE).astype(np.float32)
    transcript = tiny_engine.transcribe(Audio(noise), config(language="en"))
    assert transcript.text == "" and transcript.chunks == ()


def test_chunk_times_stay_in_their_windows(tiny_engine, sample_audio) -> None:
    tiny_engine = with_fallback(tiny_engine, NEVER_FALL_BACK)  # greedy is enough here, and quicker
    audio = sample_audio
    windows = tiny_engine.recognizer.vad.windows(audio.samples, 12.0)
    transcript = tiny_engine.transcribe(audio, config(language="en", chunk_length_s=12, batch_size=3))
    assert transcript.chunks
    previous_end = 0.0
    for chunk in transcript.chunks:
        assert any(w.start_s <= chunk.start_s <= chunk.end_s <= w.end_s for w in windows), chunk
        assert chunk.start_s >= previous_end - 1e-9
        previous_end = chunk.end_s


# ------------------------------------------------------------------- packed encoder (CPU)


def test_cpu_encoder_runs_on_packed_weights_with_the_same_output(tiny_engine, sample_audio) -> None:
    """Loaded on CPU in float32, the encoder's linear layers hold oneDNN-packed weights; its
    output matches the plain layers' up to float rounding (the greedy tests above run on it)."""
    import torch
    from transformers import WhisperForConditionalGeneration

    model = tiny_engine.recognizer.model
    encoder_modules = [type(module).__name__ for module in model.get_encoder().modules()]
    assert "PackedLinear" in encoder_modules and "Linear" not in encoder_modules
    assert type(model.proj_out) is torch.nn.Linear  # the decoder keeps the default path
    plain = WhisperForConditionalGeneration.from_pretrained(tiny_engine.recognizer.model.name_or_path).eval()
    features = tiny_engine.recognizer.features([sample_audio.samples[7 * RATE : 15 * RATE]])
    with torch.inference_mode():
        packed_states = model.get_encoder()(features).last_hidden_state
        plain_states = plain.get_encoder()(features).last_hidden_state
    torch.testing.assert_close(packed_states, plain_states, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------ int8 (opt-in)


def test_int8_quantizes_every_linear_layer_and_still_transcribes(tiny_whisper, sample_audio) -> None:
    import torch

    from whosaid.config import ModelSettings
    from whosaid.engine import Engine

    engine = Engine.from_settings(
        ModelSettings(asr_model=str(tiny_whisper("speed-main", seed=5)), device="cpu", quantization="int8")
    )
    model = engine.recognizer.model
    assert not any(type(module) is torch.nn.Linear for module in model.modules())
    transcript = engine.transcribe(cut(sample_audio, 6, 14), config(language="en"))
    assert transcript.chunks and all(0 <= c.start_s <= c.end_s <= 8.0 for c in transcript.chunks)


def test_int8_outside_cpu_float32_is_refused_with_what_to_do(tiny_whisper) -> None:
    # float16 on the CPU stands for every set-up int8 is not for: CUDA cannot be tried here, and
    # DEVICE=cuda without a usable GPU is refused earlier, by the device check.
    from whosaid.config import ModelSettings
    from whosaid.errors import ModelLoadError
    from whosaid.recognition.recognizer import SpeechRecognizer

    settings = ModelSettings(
        asr_model=str(tiny_whisper("speed-main", seed=5)), device="cpu", dtype="float16", quantization="int8"
    )
    with pytest.raises(ModelLoadError, match="on CUDA keep float16 .* on CPU leave DTYPE at auto"):
        SpeechRecognizer.from_settings(settings)


@pytest.mark.slow
@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_word_error_rate_of_base_with_vad_windows(converted_model, sample_wav, quantization) -> None:
    """The fast path's quality on pyannote's sample: the original handler's pipeline (30 s cut, 5 beams) got
    0.296; VAD windows and greedy decoding get 0.173 (fp32) and 0.198 (int8, torch 2.10)."""
    import re

    import jiwer

    from whosaid.audio.loading import load_audio_file
    from whosaid.config import ModelSettings
    from whosaid.engine import Engine

    engine = Engine.from_settings(
        ModelSettings(asr_model=str(converted_model("whisper-base")), device="cpu", quantization=quantization)
    )
    transcript = engine.transcribe(load_audio_file(sample_wav), config(language="en"))
    reference = " ".join(line.split(maxsplit=5)[5] for line in sample_wav.with_suffix(".stm").read_text().splitlines())

    def normalise(text: str) -> str:
        return re.sub(r"\s+", " ", re.sub(r"[^\w\s']", " ", text.lower())).strip()

    assert jiwer.wer(normalise(reference), normalise(transcript.text)) <= 0.2
    assert transcript.chunks[0].start_s > 6.0  # the 6.7 s of silence before the first word
    assert transcript.chunks[-1].end_s <= 30.0
