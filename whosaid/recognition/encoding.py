"""Whisper's encoder over fewer than its 3000 mel frames (30 s).

transformers' `WhisperEncoder.forward` refuses features of any other length, so that the model
sees what it was trained on: 30 s windows, short audio padded with silence. Its layers take any
length, though (attention over the frames given), so a short window can be encoded with the
first of the encoder's positions and cost about its length, not 30 s's: what `encode_frames`
does, with the same modules (convolutions, positions, layers, final norm) as the forward pass.
"""

from __future__ import annotations

import inspect
from typing import Any

# Mel frames per second of audio (a 10 ms hop); the encoder halves them (its second convolution).
MEL_FRAMES_PER_S = 100


def encode_frames(encoder: Any, features: Any) -> Any:
    """The encoder's output for `features` (windows, mel bins, frames), any even number of frames
    up to 3000: `WhisperEncoder.forward`'s computation without its length check, in inference
    (no dropout), the positions cut to the frames given. (windows, frames / 2, width)."""
    import torch

    if features.shape[-1] % 2:
        raise ValueError(f"the encoder halves its frames: {features.shape[-1]} is odd")
    hidden = torch.nn.functional.gelu(encoder.conv1(features))
    hidden = torch.nn.functional.gelu(encoder.conv2(hidden)).permute(0, 2, 1)
    hidden = hidden + encoder.embed_positions.weight[: hidden.shape[1]]
    layer_kwargs = _layer_kwargs(encoder.layers[0])
    for layer in encoder.layers:
        output = layer(hidden, None, **layer_kwargs)
        # transformers 4.x layers return a tuple (states, attentions), 5.x the states alone.
        hidden = output[0] if isinstance(output, tuple) else output
    return encoder.layer_norm(hidden)


def _layer_kwargs(layer: Any) -> dict[str, Any]:
    """The arguments an encoder layer needs besides the states and the (absent) attention mask:
    transformers 4.57's `WhisperEncoderLayer.forward` requires `layer_head_mask`, later ones
    have none."""
    parameters = inspect.signature(layer.forward).parameters
    return {"layer_head_mask": None} if "layer_head_mask" in parameters else {}
