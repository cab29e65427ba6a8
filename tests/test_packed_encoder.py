"""On the CPU, in float32, the encoder runs on packed weights and gives the plain layers' output."""

from __future__ import annotations

from tests.support.engines import RATE


def test_cpu_encoder_runs_on_packed_weights_with_the_same_output(tiny_engine, sample_audio) -> None:
    """Loaded on CPU in float32, the encoder's linear layers hold oneDNN-packed weights; its
    output matches the plain layers' up to float rounding (the greedy decoding tests run on it)."""
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

