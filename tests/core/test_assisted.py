"""Speculative decoding: lossless (same tokens as greedy decoding without an assistant) for both
kinds of assistant, with timestamps, short and long audio; the same transcript as the batched
path; and the routing rules."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.engines import config
from tests.support.fallback import ALWAYS_FALL_BACK, NEVER_FALL_BACK, with_fallback
from tests.support.reference import transcribe_with_generate
from whosaid.audio.loading import Audio, audio_from_array
from whosaid.errors import InvalidParametersError, ModelLoadError
from whosaid.recognition.recognizer import ASSISTED, BATCHED

# Slow (whole assisted and batched decodings compared, on several assistants): `make test-fast`
# leaves them to the full suite.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def models(tiny_whisper):
    main = tiny_whisper("main", seed=0, decoder_layers=2)
    return {
        "main": main,
        # distil-whisper style: the teacher's encoder, a shallower decoder -> WhisperForCausalLM
        "distil": tiny_whisper("distil", seed=1, decoder_layers=1, encoder_of=main),
        # an unrelated, smaller full Whisper with the same tokenizer -> seq2seq assistant
        "seq2seq": tiny_whisper("seq2seq", seed=2, d_model=32, decoder_layers=1),
    }


@pytest.fixture(scope="module")
def clips(sample_audio: Audio) -> list[Audio]:
    samples = sample_audio.samples
    rng = np.random.default_rng(0)
    return [
        audio_from_array(samples[: 8 * 16000], 16000),
        audio_from_array(samples[10 * 16000 : 22 * 16000], 16000),
        audio_from_array(samples[20 * 16000 : 30 * 16000], 16000),
        audio_from_array(rng.normal(0, 0.1, 3 * 16000), 16000),
    ]


@pytest.mark.parametrize("assistant", ["distil", "seq2seq"])
def test_assistant_kind_is_chosen_from_the_architecture(make_engine, models, assistant) -> None:
    engine = make_engine(models["main"], models[assistant])
    kind = type(engine.recognizer.assistant).__name__
    assert kind == {"distil": "WhisperForCausalLM", "seq2seq": "CandidateWhisper"}[assistant]


@pytest.mark.parametrize("assistant", ["distil", "seq2seq"])
def test_assisted_tokens_equal_greedy_tokens(make_engine, models, clips, assistant) -> None:
    import torch

    engine = make_engine(models["main"], models[assistant])
    recognizer = engine.recognizer
    for audio in clips:
        features = recognizer.features([audio.samples])
        kwargs = {"language": "en", "task": "transcribe"}
        for timestamps in (True, False):
            with torch.inference_mode():
                plain = recognizer.model.generate(features, return_timestamps=timestamps, **kwargs)
                assisted = recognizer.model.generate(
                    features, return_timestamps=timestamps, assistant_model=recognizer.assistant, **kwargs
                )
            assert torch.equal(plain, assisted), f"timestamps={timestamps}"


@pytest.mark.parametrize("assistant", ["distil", "seq2seq"])
def test_assisted_transcript_equals_greedy_transcript(make_engine, models, clips, assistant) -> None:
    engine = with_fallback(make_engine(models["main"], models[assistant]), NEVER_FALL_BACK)
    for audio in clips:
        assisted = engine.transcribe(audio, config(assisted=True, language="en"))
        greedy = transcribe_with_generate(engine.recognizer, audio, {"language": "en", "task": "transcribe"})
        assert assisted.decoding == ASSISTED
        assert assisted.chunks == greedy
        assert assisted.text == "".join(chunk.text for chunk in greedy).strip()
        # The VAD finds no speech in the noise clip: nothing to decode, an empty transcript.
        assert bool(greedy) == (audio is not clips[-1])


@pytest.mark.parametrize("assistant", ["distil", "seq2seq"])
@pytest.mark.parametrize("fallback", [NEVER_FALL_BACK, ALWAYS_FALL_BACK], ids=["never_fall_back", "always_fall_back"])
def test_assisted_and_batched_give_the_same_transcript(
    make_engine, models, sample_audio, assistant, fallback
) -> None:
    """The assistant only changes the speed: greedy windows, and the windows that fall back to
    beam search, come out the same on both paths."""
    engine = with_fallback(make_engine(models["main"], models[assistant]), fallback)
    audio = audio_from_array(np.concatenate([sample_audio.samples, sample_audio.samples[: 15 * 16000]]), 16000)
    assisted = engine.transcribe(audio, config(assisted=True, language="en"))
    batched = engine.transcribe(audio, config(assisted=False, batch_size=4, language="en"))
    assert (assisted.decoding, batched.decoding) == (ASSISTED, BATCHED)
    assert assisted.chunks == batched.chunks and len(batched.chunks) >= 2


def test_assisted_long_audio_equals_sequential_greedy(make_engine, models, sample_audio) -> None:
    engine = make_engine(models["main"], models["distil"])
    recognizer = engine.recognizer
    long_audio = audio_from_array(np.concatenate([sample_audio.samples, sample_audio.samples[: 15 * 16000]]), 16000)
    kwargs = {"language": "en", "task": "transcribe"}
    plain = transcribe_with_generate(recognizer, long_audio, kwargs)
    assisted = transcribe_with_generate(recognizer, long_audio, kwargs, assistant=recognizer.assistant)
    assert assisted == plain
    assert plain[-1].end_s <= long_audio.duration_s
    assert engine.transcribe(long_audio, config(assisted=True)).decoding == ASSISTED


@pytest.fixture(scope="module")
def crossover_engine(models):
    """The distil pair with 'auto' assisting audio up to 20 s (ASSISTED_MAX_DURATION_S)."""
    from whosaid.config import ModelSettings
    from whosaid.engine import Engine

    settings = ModelSettings(
        asr_model=str(models["main"]), assistant_model=str(models["distil"]), device="cpu", assisted_max_duration_s=20
    )
    return Engine.from_settings(settings)


def test_auto_assists_up_to_the_crossover_duration(crossover_engine, sample_audio, clips) -> None:
    recognizer = crossover_engine.recognizer
    # Through SpeechRecognizer: short -> assisted, long -> batched, at the set crossover.
    assert recognizer.uses_assistant(config(), 20.0) and not recognizer.uses_assistant(config(), 20.01)
    assert crossover_engine.transcribe(clips[0], config()).decoding == ASSISTED  # 8 s
    assert crossover_engine.transcribe(sample_audio, config()).decoding == BATCHED  # 30 s
    # A request that asks for batches of several windows is batched; batch_size=1 is not a batch.
    assert crossover_engine.transcribe(clips[0], config(batch_size=4)).decoding == BATCHED
    assert crossover_engine.transcribe(clips[0], config(batch_size=1)).decoding == ASSISTED
    # true and false are obeyed whatever the length.
    assert crossover_engine.transcribe(clips[0], config(assisted=False)).decoding == BATCHED
    assert crossover_engine.transcribe(sample_audio, config(assisted=True)).decoding == ASSISTED


def test_auto_never_assists_on_cpu_by_default(make_engine, models, clips) -> None:
    """On CPU speculative decoding lost at every length measured (benchmarks/asr/assisted.py):
    without ASSISTED_MAX_DURATION_S, 'auto' decodes batched there; true still assists."""
    from whosaid.recognition.assisted import DEFAULT_ASSISTED_MAX_DURATION_S

    engine = make_engine(models["main"], models["distil"])
    assert engine.recognizer.assisted_max_duration_s == DEFAULT_ASSISTED_MAX_DURATION_S["cpu"] == 0.0
    assert engine.transcribe(clips[0], config()).decoding == BATCHED
    assert engine.transcribe(clips[0], config(assisted=True)).decoding == ASSISTED


def test_assisted_max_duration_setting_is_read_and_checked(monkeypatch) -> None:
    from pydantic import ValidationError

    from whosaid.config import ModelSettings

    monkeypatch.setenv("ASSISTED_MAX_DURATION_S", "45")
    assert ModelSettings(asr_model="m").assisted_max_duration_s == 45.0
    monkeypatch.setenv("ASSISTED_MAX_DURATION_S", "-1")
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        ModelSettings(asr_model="m")


def test_without_assistant_auto_is_batched_and_true_is_refused(make_engine, models, clips) -> None:
    engine = make_engine(models["main"])
    assert engine.transcribe(clips[0], config()).decoding == BATCHED
    with pytest.raises(InvalidParametersError, match="assisted=true needs an assistant model"):
        engine.run(clips[0].samples, {"assisted": True})


def test_assisted_with_batch_size_above_one_is_a_clear_error(make_engine, models, clips) -> None:
    engine = make_engine(models["main"], models["distil"])
    with pytest.raises(InvalidParametersError) as raised:
        engine.run(clips[0].samples, {"assisted": True, "batch_size": 24})
    assert "assisted=true needs batch_size=1" in str(raised.value)


def test_assistant_with_another_vocabulary_is_refused(make_engine, models, converted_model) -> None:
    with pytest.raises(ModelLoadError) as raised:
        make_engine(models["main"], converted_model("whisper-tiny.en"))
    message = str(raised.value)
    assert "vocabulary of 51864 tokens but the main model has 51865" in message
    assert "same tokenizer" in message


# --- prompts: the batched and the assisted path read them the same way ---------------------


PROMPTS = [{"initial_prompt": "Diane in New Jersey, Sheila from Chicago."}, {"hotwords": "Yankee, Texas"}]


@pytest.mark.parametrize("prompt", PROMPTS, ids=["initial_prompt", "hotwords"])
@pytest.mark.parametrize("fallback", [NEVER_FALL_BACK, ALWAYS_FALL_BACK], ids=["never_fall_back", "always_fall_back"])
def test_prompted_assisted_and_batched_give_the_same_transcript(
    make_engine, models, sample_audio, prompt, fallback
) -> None:
    engine = with_fallback(make_engine(models["main"], models["distil"]), fallback)
    audio = audio_from_array(np.concatenate([sample_audio.samples, sample_audio.samples[: 15 * 16000]]), 16000)
    assisted = engine.transcribe(audio, config(assisted=True, language="en", **prompt))
    batched = engine.transcribe(audio, config(assisted=False, batch_size=4, language="en", **prompt))
    unprompted = engine.transcribe(audio, config(assisted=False, batch_size=4, language="en"))
    assert (assisted.decoding, batched.decoding) == (ASSISTED, BATCHED)
    assert assisted.chunks == batched.chunks and len(batched.chunks) >= 2
    assert batched.chunks != unprompted.chunks  # the prompt is read


@pytest.mark.parametrize("assistant", ["distil", "seq2seq"])
def test_prompted_speculative_decoding_is_lossless(make_engine, models, clips, assistant) -> None:
    """With a prompt, the assistant's tokens are the tokens of plain greedy generate and of the
    lean batched loop, token for token."""
    import torch

    engine = make_engine(models["main"], models[assistant])
    recognizer = engine.recognizer
    previous = recognizer.previous_tokens(
        recognizer.decoding_options(config(initial_prompt="Diane in New Jersey.", hotwords="Yankee")), first_window=True
    )
    prompt = recognizer.decoder.prompt("en", "transcribe", previous)
    assert prompt[0] == recognizer.decoder.prev_sot_token_id and len(prompt) == len(previous) + 4
    for audio in clips[:3]:
        features = recognizer.features([audio.samples])
        with torch.inference_mode():
            states = recognizer.model.get_encoder()(features).last_hidden_state
            plain = recognizer.generate_tokens(features, states, "en", "transcribe", previous)
            assisted = recognizer.generate_tokens(
                features, states, "en", "transcribe", previous, assistant_model=recognizer.assistant
            )
            (lean,) = recognizer.decoder.decode(states, prompt)
        assert plain == assisted == [list(lean.tokens)]
