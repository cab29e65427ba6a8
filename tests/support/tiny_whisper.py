"""Random-weight Whisper models that carry a real tokenizer: the tests' tiny models and the GPU
check's base-sized ones come from this one builder."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union


def build_random_whisper(
    path: Union[str, Path],
    tokenizer_dir: Union[str, Path],
    *,
    seed: int = 0,
    d_model: int = 64,
    encoder_layers: int = 2,
    decoder_layers: int = 2,
    attention_heads: int = 4,
    max_length: int = 24,
    max_target_positions: Optional[int] = None,
    encoder_of: Optional[Union[str, Path]] = None,
) -> Path:
    """Save a random Whisper with `tokenizer_dir`'s tokenizer, vocabulary, positions and generation
    config at `path`. With `encoder_of`, the encoder is copied from that model, as distil-whisper
    checkpoints share their teacher's. Outputs are capped at `max_length` tokens, so random
    weights stop quickly; `max_target_positions` (default: the tokenizer model's) shortens the
    decoder's positions, so that a test can run a window to that limit quickly."""
    import torch
    from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration, WhisperProcessor

    base_config = WhisperConfig.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    config = WhisperConfig(
        vocab_size=base_config.vocab_size,
        num_mel_bins=base_config.num_mel_bins,
        d_model=d_model,
        encoder_layers=encoder_layers,
        decoder_layers=decoder_layers,
        encoder_attention_heads=attention_heads,
        decoder_attention_heads=attention_heads,
        encoder_ffn_dim=4 * d_model,
        decoder_ffn_dim=4 * d_model,
        max_source_positions=base_config.max_source_positions,
        max_target_positions=max_target_positions or base_config.max_target_positions,
        decoder_start_token_id=base_config.decoder_start_token_id,
        pad_token_id=base_config.pad_token_id,
        bos_token_id=base_config.bos_token_id,
        eos_token_id=base_config.eos_token_id,
    )
    model = WhisperForConditionalGeneration(config).eval()
    if encoder_of is not None:
        teacher = WhisperForConditionalGeneration.from_pretrained(encoder_of)
        model.model.encoder.load_state_dict(teacher.model.encoder.state_dict())
    generation = GenerationConfig.from_pretrained(tokenizer_dir)
    generation.max_length = max_length
    model.generation_config = generation
    path = Path(path)
    model.save_pretrained(path)
    WhisperProcessor.from_pretrained(tokenizer_dir).save_pretrained(path)
    return path
