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
