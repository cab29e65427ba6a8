"""`python -m whosaid make-assistant`: the assistant is the main model's own decoder layers (as
distil-whisper initialises its students), loads through ASSISTANT_MODEL, never changes a
transcript, and tuning makes it draft more of the main model's tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.audio_files import encode
from tests.support.fallback import NEVER_FALL_BACK, with_fallback
from whosaid.assistant.build import ASSISTANT_INFO_FILE, build_assistant, parse_decoder_layers
from whosaid.assistant.tune import TuningOptions, pseudo_labels, token_agreement, tune_assistant
from whosaid.audio.loading import audio_from_array
from whosaid.cli.main import main as cli
from whosaid.config import InferenceConfig, ModelSettings
from whosaid.errors import InvalidParametersError
from whosaid.recognition.recognizer import ASSISTED, BATCHED

# Slow (assistants built and tuned): `make test-fast` leaves them to the full suite.
pytestmark = pytest.mark.slow


def write_wav(path: Path, samples: np.ndarray, sample_rate_hz: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode(samples.astype(np.float32), sample_rate_hz, "wav"))
    return path


@pytest.fixture(scope="module")
def main_model_dir(tiny_whisper) -> Path:
    return tiny_whisper("make-assistant-main", seed=3, decoder_layers=3)


@pytest.fixture(scope="module")
def speech_file(tmp_path_factory, sample_audio) -> Path:
    """12 s of pyannote's sample (three speakers' turns), as a WAV file to tune on."""
    return write_wav(tmp_path_factory.mktemp("tune") / "call.wav", sample_audio.samples[8 * 16000 : 20 * 16000], 16000)


@pytest.fixture(scope="module")
def built_assistant(main_model_dir: Path, speech_file: Path, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("assistants") / "tuned"
    status = cli(
        [
            "make-assistant",
            "--model",
            str(main_model_dir),
            "--output",
            str(output),
            "--tune",
            str(speech_file.parent),
            "--steps",
            "3",
        ]
    )
    assert status == 0
    return output


def load_pair(main_model_dir: Path):
    from transformers import AutoProcessor, WhisperForConditionalGeneration

    return WhisperForConditionalGeneration.from_pretrained(main_model_dir).eval(), AutoProcessor.from_pretrained(
        main_model_dir
    )


def test_the_assistant_is_the_main_models_first_and_last_decoder_layers(
    built_assistant: Path, main_model_dir: Path
) -> None:
    import torch
    from transformers import AutoConfig, WhisperForCausalLM

    config = AutoConfig.from_pretrained(built_assistant)
    main_config = AutoConfig.from_pretrained(main_model_dir)
    assert config.architectures == ["WhisperForCausalLM"]
    assert (config.decoder_layers, config.d_model, config.encoder_layers, config.vocab_size) == (
        2,
        main_config.d_model,
        main_config.encoder_layers,
        main_config.vocab_size,
    )
    info = json.loads((built_assistant / ASSISTANT_INFO_FILE).read_text())
    assert info["decoder_layers_of_main_model"] == [0, 2] and info["tuning"]["steps"] == 3
    from transformers import AutoProcessor, GenerationConfig

    # Tokenizer, feature extractor and generation config travel with it (file names vary by
    # transformers version: loaded, not listed).
    processor, main_processor = (
        AutoProcessor.from_pretrained(built_assistant),
        AutoProcessor.from_pretrained(main_model_dir),
    )
    assert processor.tokenizer.get_vocab() == main_processor.tokenizer.get_vocab()
    assert processor.feature_extractor.to_dict() == main_processor.feature_extractor.to_dict()
    assert (
        GenerationConfig.from_pretrained(built_assistant).lang_to_id
        == GenerationConfig.from_pretrained(main_model_dir).lang_to_id
    )

    # No encoder weights are stored: the assistant reads the main model's encoder output.
    from safetensors import safe_open

    with safe_open(str(built_assistant / "model.safetensors"), "pt") as weights:
        assert not [key for key in weights.keys() if "encoder." in key and "encoder_attn" not in key]

    main, _ = load_pair(main_model_dir)
    assistant = WhisperForCausalLM.from_pretrained(built_assistant)
    teacher, student = main.model.decoder, assistant.model.decoder
    # Tuning moves the layers; the embeddings stay the main model's own.
    assert torch.equal(student.embed_tokens.weight, teacher.embed_tokens.weight)
    assert torch.equal(student.embed_positions.weight, teacher.embed_positions.weight)
    assert torch.equal(assistant.proj_out.weight, teacher.embed_tokens.weight)


def test_untuned_layers_are_copies_and_all_layers_agree_with_every_token(main_model_dir: Path, sample_audio) -> None:
    import torch

    main, processor = load_pair(main_model_dir)
    first_last = build_assistant(main, parse_decoder_layers("first,last", 3))
    for student_layer, index in zip(first_last.model.decoder.layers, (0, 2), strict=True):
        for key, value in student_layer.state_dict().items():
            assert torch.equal(value, main.model.decoder.layers[index].state_dict()[key]), key
    labels = pseudo_labels(main, processor, [sample_audio.samples[6 * 16000 : 15 * 16000]])
    # Every layer kept is the main decoder itself: it predicts every token the main model chose.
    assert token_agreement(build_assistant(main, [0, 1, 2]), labels) == 1.0
    assert token_agreement(first_last, labels) < 1.0


def test_tuning_raises_the_share_of_tokens_the_assistant_drafts_right(main_model_dir: Path, sample_audio) -> None:
    main, processor = load_pair(main_model_dir)
    assistant = build_assistant(main, [0])
    labels = pseudo_labels(main, processor, [sample_audio.samples[6 * 16000 : 15 * 16000]])
    report = tune_assistant(assistant, labels, TuningOptions(steps=30, learning_rate=3e-3, warmup_steps=1))
    assert report.windows == 1 and report.label_tokens == len(labels.sequences[0]) - labels.prompt_lengths[0]
    assert report.last_loss < report.first_loss
    assert report.agreement_after > report.agreement_before
    assert report.agreement_after == token_agreement(assistant, labels)


def test_assistant_model_setting_loads_the_built_assistant(
    built_assistant: Path, main_model_dir: Path, monkeypatch
) -> None:
    from whosaid.engine import Engine

    monkeypatch.setenv("ASSISTANT_MODEL", str(built_assistant))
    monkeypatch.setenv("ASSISTED_MAX_DURATION_S", "12.5")
    engine = Engine.from_settings(ModelSettings(asr_model=str(main_model_dir), device="cpu"))
    assistant = engine.recognizer.assistant
    assert type(assistant).__name__ == "WhisperForCausalLM" and assistant.config.decoder_layers == 2
    assert engine.recognizer.assisted_max_duration_s == 12.5


def test_built_assistant_is_lossless_through_the_engine(
    built_assistant: Path, main_model_dir: Path, sample_audio
) -> None:
    """Assisted decoding with the built assistant gives the batched path's chunks, and plain
    greedy generate's tokens, exactly."""
    import torch

    from whosaid.engine import Engine

    engine = with_fallback(
        Engine.from_settings(
            ModelSettings(asr_model=str(main_model_dir), assistant_model=str(built_assistant), device="cpu")
        ),
        NEVER_FALL_BACK,
    )
    recognizer = engine.recognizer
    audio = audio_from_array(np.concatenate([sample_audio.samples, sample_audio.samples[: 12 * 16000]]), 16000)
    config = lambda **parameters: InferenceConfig.from_parameters({"language": "en", **parameters})[0]  # noqa: E731
    assisted = engine.transcribe(audio, config(assisted=True))
    batched = engine.transcribe(audio, config(assisted=False, batch_size=4))
    assert (assisted.decoding, batched.decoding) == (ASSISTED, BATCHED)
    assert assisted.chunks == batched.chunks and len(batched.chunks) >= 2
    for start_s in (0, 8, 16):
        features = recognizer.features([sample_audio.samples[start_s * 16000 : (start_s + 10) * 16000]])
        with torch.inference_mode():
            states = recognizer.model.get_encoder()(features).last_hidden_state
            plain = recognizer.generate_tokens(features, states, "en", "transcribe")
            drafted = recognizer.generate_tokens(
                features, states, "en", "transcribe", assistant_model=recognizer.assistant
            )
        assert plain == drafted


def test_decoder_layers_are_checked() -> None:
    assert parse_decoder_layers("first,last", 6) == [0, 5]
    assert parse_decoder_layers("last, 0, -3", 6) == [0, 3, 5]
    with pytest.raises(
        InvalidParametersError, match=r"decoder layer 6 does not exist: the main model has 6 decoder layers \(0-5\)"
    ):
        parse_decoder_layers("0,6", 6)
    with pytest.raises(InvalidParametersError, match="takes 'first', 'last' or layer numbers"):
        parse_decoder_layers("first,middle", 6)


def test_command_refuses_silence_and_bad_arguments_with_what_to_do(
    main_model_dir: Path, tmp_path: Path, capsys
) -> None:
    silence = write_wav(tmp_path / "silence" / "quiet.wav", np.zeros(3 * 16000, np.float32), 16000)
    output = tmp_path / "out"

    def make_assistant(model: Path, *options: str) -> int:
        return cli(["make-assistant", "--model", str(model), "--output", str(output), *options])

    assert make_assistant(main_model_dir, "--tune", str(silence), "--steps", "2") == 2
    assert "the tuning audio holds no speech: give recordings of people talking" in capsys.readouterr().err
    assert make_assistant(main_model_dir, "--decoder-layers", "7") == 2
    assert "decoder layer 7 does not exist: the main model has 3 decoder layers" in capsys.readouterr().err
    assert make_assistant(tmp_path) == 2
    assert "is not a transformers Whisper directory (no config.json)" in capsys.readouterr().err
    assert make_assistant(main_model_dir, "--tune", str(tmp_path / "missing.wav")) == 2
    assert "missing.wav: no such file or directory" in capsys.readouterr().err
    assert not output.exists()
