"""One decoding path decides, the others are checked against it.

The lean greedy loop (`GreedyWhisperDecoder.decode`) picks a window's tokens under the request's
`DecodingOptions`. transformers' `generate` (`SpeechRecognizer.generate_tokens`: the beam-search
fallback and speculative drafts) gets the same options as keyword arguments, and greedy it must
pick the same tokens; `GreedyWhisperDecoder.score` re-measures tokens decoded elsewhere and must
report the loop's own measures. Checked option by option, with each option set away from the
model's default so that a path that ignored it would disagree: on real weights (whisper-tiny.en,
whisper-base) and on a tiny random multilingual model."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.engines import RATE, config
from whosaid.recognition.logits_rules import DecodingOptions


@pytest.fixture(scope="module")
def tiny_en(tiny_en_engine):
    return tiny_en_engine.recognizer


@pytest.fixture(scope="module")
def base(converted_model, make_engine):
    return make_engine(converted_model("whisper-base")).recognizer


@pytest.fixture(scope="module")
def random_multilingual(tiny_engine):
    # The random model the greedy decoding tests use: built once per session.
    return tiny_engine.recognizer


def three_paths(recognizer, samples, options: DecodingOptions, previous=()):
    """The lean loop's result for one window, generate's tokens, and the loop's tokens scored."""
    import torch

    features = recognizer.features([samples])
    prompt = recognizer.decoder.prompt(options.language, options.task, previous, timestamps=options.timestamps)
    with torch.inference_mode():
        states = recognizer.encode(features)
        (lean,) = recognizer.decoder.decode(states, prompt, options)
        (generated,) = recognizer.generate_tokens(
            features, states, options.language, options.task, previous, options=options
        )
        scored = recognizer.decoder.score(states, prompt, lean.tokens, options)
    return lean, generated, scored


def assert_paths_agree(lean, generated, scored, name: str = "") -> None:
    assert list(lean.tokens) == generated, name
    assert scored.tokens == lean.tokens, name
    assert scored.avg_logprob == pytest.approx(lean.avg_logprob, abs=1e-4), name
    assert scored.no_speech_prob == pytest.approx(lean.no_speech_prob, abs=1e-5), name
    assert scored.reached_limit == lean.reached_limit, name


def variants(recognizer, samples, defaults: DecodingOptions):
    """(name, options, previous text tokens, check of what the option did to the loop's tokens),
    each away from the model's default."""
    timestamp_begin = recognizer.decoder.timestamp_begin
    lean, _, _ = three_paths(recognizer, samples, defaults)
    said = [token for token in lean.tokens if token < timestamp_begin]
    assert len(said) >= 4, "the window must hold speech"
    suppressed = tuple(said[:3])
    previous = recognizer.previous_tokens(
        dataclasses.replace(defaults, initial_prompt="Diane in New Jersey.", hotwords="Yankee"), first_window=True
    )
    return [
        ("model defaults", defaults, (), lambda tokens: list(tokens) == list(lean.tokens)),
        (
            "more suppressed tokens",
            dataclasses.replace(defaults, suppress_tokens=defaults.suppress_tokens + suppressed),
            (),
            lambda tokens: not set(tokens) & set(suppressed),
        ),
        (
            "first timestamp at 0.00",
            dataclasses.replace(defaults, max_initial_timestamp_index=0),
            (),
            lambda tokens: tokens[0] == timestamp_begin,
        ),
        ("nothing suppressed", dataclasses.replace(defaults, suppress_tokens=(), begin_suppress_tokens=()), (), None),
        ("prompt and hotwords", defaults, tuple(previous), None),
        (
            "text only",
            dataclasses.replace(defaults, timestamps=False),
            (),
            lambda tokens: bool(tokens) and max(tokens) < timestamp_begin,
        ),
        (
            "text only, prompt and hotwords",
            dataclasses.replace(defaults, timestamps=False),
            tuple(previous),
            lambda tokens: bool(tokens) and max(tokens) < timestamp_begin,
        ),
    ]


def check_every_variant(recognizer, samples, defaults: DecodingOptions) -> None:
    for name, options, previous, did in variants(recognizer, samples, defaults):
        lean, generated, scored = three_paths(recognizer, samples, options, previous)
        assert_paths_agree(lean, generated, scored, name)
        if did is not None:
            assert did(lean.tokens), name


# ------------------------------------------------------------------------------- the record


def test_a_requests_options_are_its_parameters_and_the_models_rules(converted_model) -> None:
    from transformers import GenerationConfig

    generation_config = GenerationConfig.from_pretrained(converted_model("whisper-base"))
    options = DecodingOptions.for_request(
        config(task="translate", initial_prompt="Diane.", hotwords="Yankee", return_timestamps="word"),
        generation_config,
        language="fr",
        multilingual=False,
    )
    assert (options.task, options.language, options.multilingual) == ("translate", "fr", False)
    assert (options.initial_prompt, options.hotwords, options.word_timestamps) == ("Diane.", "Yankee", True)
    assert options.timestamps
    text_only = DecodingOptions.for_request(
        config(without_timestamps=True), generation_config, language="en", multilingual=False
    )
    assert not text_only.timestamps and text_only.generate_kwargs() == options.generate_kwargs()
    assert options.suppress_tokens == tuple(generation_config.suppress_tokens)
    assert options.begin_suppress_tokens == tuple(generation_config.begin_suppress_tokens)
    assert options.max_initial_timestamp_index == generation_config.max_initial_timestamp_index == 50
    assert options.generate_kwargs() == {
        "suppress_tokens": list(generation_config.suppress_tokens),
        "begin_suppress_tokens": list(generation_config.begin_suppress_tokens),
        "max_initial_timestamp_index": 50,
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.task = "transcribe"  # type: ignore[misc]


# -------------------------------------------------------------------------- three paths, one answer


def test_paths_agree_under_every_option_random_model(random_multilingual, sample_audio) -> None:
    recognizer = random_multilingual
    samples = sample_audio.samples[7 * RATE : 15 * RATE]
    check_every_variant(recognizer, samples, recognizer.decoding_options(config(language="en")))


@pytest.mark.slow
def test_paths_agree_under_every_option_whisper_tiny_en(tiny_en, sample_audio) -> None:
    samples = sample_audio.samples[int(6.5 * RATE) : 17 * RATE]
    check_every_variant(tiny_en, samples, tiny_en.decoding_options(config()))


@pytest.mark.slow
def test_paths_agree_under_every_option_whisper_base(base, sample_audio) -> None:
    """A multilingual checkpoint: the option variants are whisper-tiny.en's and the random model's;
    here each language and task prompt, the same in every path."""
    samples = sample_audio.samples[int(6.5 * RATE) : 17 * RATE]
    for parameters in ({"language": "en"}, {"language": "fr"}, {"language": "de", "task": "translate"}):
        assert_paths_agree(*three_paths(base, samples, base.decoding_options(config(**parameters))))


@pytest.mark.slow
def test_beam_search_obeys_the_options_too(tiny_en, sample_audio) -> None:
    """The fallback's beam search reads the same options: a suppressed token never appears, and
    the first timestamp keeps its limit."""
    import torch

    recognizer = tiny_en
    samples = sample_audio.samples[int(6.5 * RATE) : 17 * RATE]
    defaults = recognizer.decoding_options(config())
    features = recognizer.features([samples])
    with torch.inference_mode():
        states = recognizer.encode(features)
        (beams,) = recognizer.generate_tokens(features, states, None, "transcribe", num_beams=5, options=defaults)
        said = [token for token in beams if token < recognizer.decoder.timestamp_begin][:3]
        options = dataclasses.replace(
            defaults, suppress_tokens=defaults.suppress_tokens + tuple(said), max_initial_timestamp_index=0
        )
        (ruled,) = recognizer.generate_tokens(features, states, None, "transcribe", num_beams=5, options=options)
    assert not set(ruled) & set(said)
    assert ruled[0] == recognizer.decoder.timestamp_begin
