"""On the CPU, in float32, the encoder runs on weights laid out once for their product (exact half
copies of a real Whisper checkpoint's, oneDNN-packed ones of a model whose weights half precision
does not hold) and gives the plain layers' output."""

from __future__ import annotations

import pytest

from tests.support.engines import RATE


@pytest.mark.parametrize(("engine", "layout"), [("tiny_engine", "packed"), ("tiny_en_engine", "half")])
def test_cpu_encoder_runs_on_packed_weights_with_the_same_output(engine, layout, request, sample_audio) -> None:
    """Loaded on CPU in float32, the encoder's linear layers hold their weights in one layout for
    their product: a random model's oneDNN-packed, the real whisper-tiny.en's (released in float16)
    exact half copies. Its output is the float32 result up to rounding: as close to the plain model's
    in float64 as the plain layers' in float32 are (the greedy decoding tests run on both)."""
    import torch
    from transformers import WhisperForConditionalGeneration

    engine = request.getfixturevalue(engine)
    model = engine.recognizer.model
    encoder_linears = [module for module in model.get_encoder().modules() if "Linear" in type(module).__name__]
    assert encoder_linears and {type(module).__name__ for module in encoder_linears} == {"PackedLinear"}
    for module in encoder_linears:
        assert (module.half is not None, module.packed is not None) == (layout == "half", layout == "packed")
    assert type(model.proj_out) is torch.nn.Linear  # the decoder's step multiplies its own way
    plain = WhisperForConditionalGeneration.from_pretrained(engine.recognizer.model.name_or_path).eval()
    features = engine.recognizer.features([sample_audio.samples[7 * RATE : 15 * RATE]])
    with torch.inference_mode():
        packed_states = model.get_encoder()(features).last_hidden_state
        plain_states = plain.get_encoder()(features).last_hidden_state
        exact_states = plain.double().get_encoder()(features.double()).last_hidden_state
    # float32's rounding over the encoder's layers: up to 2.4e-4 for the plain layers on this clip.
    torch.testing.assert_close(plain_states.double(), exact_states, rtol=0, atol=1e-3)
    torch.testing.assert_close(packed_states.double(), exact_states, rtol=0, atol=1e-3)


RESIDENT_PAGES_SCRIPT = r"""
import json, os, sys
from whosaid.config import ModelSettings
from whosaid.recognition.loading import load_whisper

checkpoint = os.path.realpath(sys.argv[1])
model, _ = load_whisper(ModelSettings(asr_model=os.path.dirname(checkpoint), diarization_model=None, device="cpu"))
mappings, current = [], None
for line in open("/proc/self/smaps"):
    fields = line.split()
    if "-" in fields[0] and not fields[0].endswith(":"):
        current = {"kb": 0} if fields[-1] == checkpoint else None
        if current is not None:
            start, end = (int(address, 16) for address in fields[0].split("-"))
            current["size_kb"] = (end - start) // 1024
            mappings.append(current)
    elif current is not None and fields[0] == "Rss:":
        current["kb"] = int(fields[1])
print(json.dumps(mappings))
"""


def test_cpu_weights_are_read_in_at_load(converted_model) -> None:
    """After loading on CPU, the checkpoint's mapped pages are in memory (read once at load), so
    that the first request does not pay their page faults: every mapping of model.safetensors
    is resident but for its unread tail of a page, if the weights are mapped at all."""
    import json
    import os
    import subprocess
    import sys

    import transformers

    checkpoint = converted_model("whisper-tiny.en") / "model.safetensors"
    finished = subprocess.run(
        [sys.executable, "-c", RESIDENT_PAGES_SCRIPT, str(checkpoint)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    mappings = json.loads(finished.stdout.strip().splitlines()[-1])
    if transformers.__version__.startswith("4."):
        assert mappings  # transformers 4.57 keeps the safetensors tensors mapped from the file
    for mapping in mappings:
        assert mapping["kb"] >= mapping["size_kb"] * 0.99, mapping
