"""A random-weight Whisper whose next token depends on its position only: it says what it is
scripted to say, and from a given position on it repeats one word until the 448 positions run
out (448 in real models; fewer here, for speed), the repetition loop real Whisper models fall into on long meetings.

Each decoder layer adds nothing to the residual stream (its output projections are zero), so
the hidden state at position p is the token's embedding plus position p's embedding; a
position's embedding is made large and pointed at the token that must follow it, so the final
layer norm turns it into that token's direction whatever the audio and the tokens before."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Union

from tests.support.tiny_whisper import build_random_whisper

# Far above a token embedding (norm ~0.2): the position alone decides the next token.
POSITION_SCALE = 1000.0
# Target tokens' embeddings are made this much longer than the others', so that each one is the
# clear maximum along its own direction; the layer norm's gain makes the choice near-certain.
TARGET_EMBEDDING_SCALE = 5.0
LAYER_NORM_GAIN = 10.0


def build_looping_whisper(
    path: Union[str, Path],
    tokenizer_dir: Union[str, Path],
    *,
    loop_token: int,
    loop_from_position: int,
    script: Optional[Mapping[int, int]] = None,
    max_target_positions: int = 448,
    seed: int = 0,
) -> Path:
    """Save at `path` a Whisper (with `tokenizer_dir`'s tokenizer and generation config,
    `max_target_positions` decoder positions and generate's max_length as many) that, after
    reading position p, says `script[p]`, and `loop_token` at every position from
    `loop_from_position` on. Positions neither scripted nor looping are the random model's."""
    import torch
    from transformers import WhisperForConditionalGeneration

    build_random_whisper(
        path, tokenizer_dir, seed=seed, max_length=max_target_positions, max_target_positions=max_target_positions
    )
    model = WhisperForConditionalGeneration.from_pretrained(path)
    decoder = model.model.decoder
    targets = {p: loop_token for p in range(loop_from_position, max_target_positions)}
    targets.update(script or {})
    with torch.no_grad():
        for layer in decoder.layers:
            for linear in (layer.self_attn.out_proj, layer.encoder_attn.out_proj, layer.fc2):
                linear.weight.zero_()
                linear.bias.zero_()
        embeddings = decoder.embed_tokens.weight  # tied to the output projection
        generator = torch.Generator().manual_seed(seed)
        for token in set(targets.values()):
            if not embeddings[token].any():  # <|endoftext|> is the padding token: its row is zeros
                embeddings[token] = torch.randn(embeddings.shape[1], generator=generator) * embeddings.std()
            embeddings[token] *= TARGET_EMBEDDING_SCALE
        for position, token in targets.items():
            direction = embeddings[token] - embeddings[token].mean()
            decoder.embed_positions.weight[position] = POSITION_SCALE * direction / direction.norm()
        decoder.layer_norm.weight.fill_(LAYER_NORM_GAIN)
        decoder.layer_norm.bias.zero_()
    model.save_pretrained(path)
    return Path(path)
