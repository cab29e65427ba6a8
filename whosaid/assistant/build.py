"""A speculative-decoding assistant made from the main model itself (`whosaid make-assistant`).

`build_assistant` makes a decoder-only `WhisperForCausalLM` the way distil-whisper initialises
its students: the main model's token and position embeddings, final layer norm, and a few of its
decoder layers (by default the first and the last). It has no encoder: transformers' speculative
decoding hands it the main model's encoder output, so the audio is encoded once. `make_assistant`
builds one, optionally tunes it on the user's audio (whosaid.assistant.tune), and saves it.
When a request is assisted is whosaid.recognition.assisted's rule.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from whosaid.assistant.tune import TuningOptions, pseudo_labels, tune_assistant
from whosaid.errors import InvalidParametersError

#: Written beside the weights: how the assistant was made (source model, layers, tuning).
ASSISTANT_INFO_FILE = "whosaid_assistant.json"

# ---------------------------------------------------------------------------------- building


def parse_decoder_layers(spec: str, num_layers: int) -> list[int]:
    """'first,last' or indices ('0,3,5'; negative count from the end) -> sorted unique indices."""
    indices = []
    for word in (part.strip().lower() for part in spec.split(",")):
        if not word:
            continue
        if word == "first":
            index = 0
        elif word == "last":
            index = num_layers - 1
        else:
            try:
                index = int(word)
            except ValueError:
                raise InvalidParametersError(
                    f"--decoder-layers takes 'first', 'last' or layer numbers separated by commas, not {word!r}"
                ) from None
            index = index + num_layers if index < 0 else index
        if not 0 <= index < num_layers:
            raise InvalidParametersError(
                f"decoder layer {word} does not exist: "
                f"the main model has {num_layers} decoder layers (0-{num_layers - 1})"
            )
        indices.append(index)
    if not indices:
        raise InvalidParametersError("--decoder-layers names no layer: e.g. 'first,last'")
    return sorted(set(indices))


def build_assistant(main_model: Any, decoder_layers: Sequence[int]) -> Any:
    """A decoder-only `WhisperForCausalLM` holding copies of `main_model`'s embeddings, final
    layer norm and the decoder layers at `decoder_layers` (in order). Its config keeps the main
    model's encoder shape (width, encoder layers, mel bins): that is how `load_assistant`
    recognises an assistant that reads the main model's encoder output."""
    import torch
    from transformers import WhisperConfig, WhisperForCausalLM

    config = WhisperConfig.from_dict(main_model.config.to_dict())
    config.decoder_layers = len(decoder_layers)
    config.architectures = ["WhisperForCausalLM"]
    assistant = WhisperForCausalLM(config).to(main_model.dtype)
    teacher = main_model.model.decoder
    student = assistant.model.decoder
    with torch.no_grad():
        student.embed_tokens.load_state_dict(teacher.embed_tokens.state_dict())
        student.embed_positions.load_state_dict(teacher.embed_positions.state_dict())
        student.layer_norm.load_state_dict(teacher.layer_norm.state_dict())
        for student_layer, index in zip(student.layers, decoder_layers, strict=True):
            student_layer.load_state_dict(teacher.layers[index].state_dict())
    assistant.tie_weights()  # proj_out is the token embedding, as in Whisper
    assistant.generation_config = type(main_model.generation_config).from_dict(main_model.generation_config.to_dict())
    return assistant.eval()


def save_assistant(assistant: Any, processor: Any, output_dir: Path, info: dict[str, Any]) -> None:
    """Weights, config, generation config and the tokenizer/feature-extractor files: a directory
    that ASSISTANT_MODEL can name."""
    output_dir.mkdir(parents=True, exist_ok=True)
    assistant.save_pretrained(output_dir)
    processor.save_pretrained(output_dir)
    (output_dir / ASSISTANT_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")


# ---------------------------------------------------------------------------------- the command


def make_assistant(
    model_dir: str,
    output_dir: Path,
    *,
    decoder_layers: str = "first,last",
    tuning_clips: Sequence[np.ndarray] = (),
    tuning: TuningOptions = TuningOptions(),
    device: str = "cpu",
) -> dict[str, Any]:
    """Build (and with `tuning_clips`, tune on `device`) an assistant for the Whisper model in
    `model_dir` and save it to `output_dir`, in float32. Returns what was written to its info file."""
    from transformers import AutoProcessor, WhisperForConditionalGeneration

    main_model = WhisperForConditionalGeneration.from_pretrained(model_dir).to(device).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    layers = parse_decoder_layers(decoder_layers, main_model.config.decoder_layers)
    assistant = build_assistant(main_model, layers)
    info: dict[str, Any] = {
        "main_model": str(model_dir),
        "decoder_layers_of_main_model": layers,
        "main_model_decoder_layers": main_model.config.decoder_layers,
        "tuning": None,
    }
    if tuning_clips:
        labels = pseudo_labels(main_model, processor, tuning_clips)
        report = tune_assistant(assistant, labels, tuning)
        info["tuning"] = {**asdict(tuning), **asdict(report)}
    save_assistant(assistant, processor, output_dir, info)
    return info
