"""CTranslate2 Whisper variables -> `WhisperForConditionalGeneration` parameters (see the package
docstring for the fused projections and biases), with the dimensions read off the weights."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from whosaid.convert.errors import ConversionError
from whosaid.convert.model_bin import CT2Checkpoint

if TYPE_CHECKING:
    import numpy as np

# What to do about a checkpoint whose weights are not all there or not Whisper's.
_INCOMPLETE_HINT = "pass a complete CTranslate2 Whisper checkpoint (all its parts)"

# GELU, pre-norm, unscaled embeddings: the decoder CTranslate2's WhisperSpec always writes.
_EXPECTED_DECODER_FLAGS: dict[str, int] = {
    "decoder/activation": 3,  # common_spec.Activation.GELU
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,
    "decoder/alibi": 0,
    "decoder/start_from_zero_embedding": 0,
}
# Scalars that describe the spec rather than weights. alignment_heads/alignment_layer are a
# legacy single-head setting (the real alignment heads come from config.json); the ALiBi options
# only matter when decoder/alibi is set, which the flags above rule out. Recent CTranslate2
# versions write the ALiBi options, older ones (the packaged checkpoints) do not.
_METADATA_VARIABLES = frozenset(
    {
        *_EXPECTED_DECODER_FLAGS,
        "encoder/num_heads",
        "decoder/num_heads",
        "decoder/alignment_heads",
        "decoder/alignment_layer",
        "decoder/alibi_use_positive_positions",
        "decoder/scale_alibi",
    }
)

# The same rule as openai/whisper and CTranslate2: English-only vocabularies have 51864 tokens,
# multilingual ones 51865 (large-v3: 51866, one more language).
MULTILINGUAL_MIN_VOCAB_SIZE = 51865


@dataclass(frozen=True)
class WhisperDims:
    """Model dimensions, all read from the weights rather than trusted from a name."""

    d_model: int
    num_mel_bins: int
    encoder_layers: int
    decoder_layers: int
    encoder_attention_heads: int
    decoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    vocab_size: int
    max_source_positions: int  # encoder frames after the stride-2 conv: 1500 for 30 s
    max_target_positions: int  # decoder tokens: 448
    tie_word_embeddings: bool

    @property
    def is_multilingual(self) -> bool:
        return self.vocab_size >= MULTILINGUAL_MIN_VOCAB_SIZE


class _WeightTaker:
    """Hands out weights as float32 arrays and remembers which were used, so a variable this
    converter does not understand is reported instead of silently dropped."""

    def __init__(self, checkpoint: CT2Checkpoint) -> None:
        self._checkpoint = checkpoint
        self._used: set[str] = set()

    def raw(self, name: str) -> np.ndarray:
        resolved = self._checkpoint.resolve(name)
        if resolved is None:
            raise ConversionError(f"not a complete Whisper checkpoint: {name} is missing; {_INCOMPLETE_HINT}")
        self._used.add(resolved)
        return self._checkpoint.variables[resolved]

    def float32(self, name: str) -> np.ndarray:
        import numpy as np

        value = self.raw(name)
        if not np.issubdtype(value.dtype, np.integer):
            return value.astype(np.float32)
        if not self._checkpoint.has(name + "_scale"):
            raise ConversionError(f"{name} is {value.dtype} without {name}_scale to dequantise; {_INCOMPLETE_HINT}")
        scale = self.raw(name + "_scale").astype(np.float32)
        if scale.ndim == 1:  # int8: one scale per output channel, also for 3-dim conv weights
            scale = scale.reshape((-1,) + (1,) * (value.ndim - 1))
        return value.astype(np.float32) / scale

    def linear(self, prefix: str) -> tuple[np.ndarray, Optional[np.ndarray]]:
        if self._checkpoint.has(f"{prefix}/weight_zero"):
            raise ConversionError(
                f"{prefix} is AWQ-quantised, which this converter cannot undo; convert an unquantised or "
                "int8 checkpoint"
            )
        weight = self.float32(f"{prefix}/weight")
        has_bias = self._checkpoint.has(f"{prefix}/bias")
        return weight, self.float32(f"{prefix}/bias") if has_bias else None

    def unused(self) -> list[str]:
        return sorted(set(self._checkpoint.variables) - self._used - _METADATA_VARIABLES)


def _layer_count(checkpoint: CT2Checkpoint, side: str) -> int:
    pattern = re.compile(rf"^{side}/layer_(\d+)/")
    indices = {int(m.group(1)) for name in checkpoint.variables if (m := pattern.match(name))}
    if not indices or indices != set(range(len(indices))):
        found = sorted(indices) or "none"
        raise ConversionError(f"not a Whisper checkpoint: {side} layers found: {found}; {_INCOMPLETE_HINT}")
    return len(indices)


def _scalar(checkpoint: CT2Checkpoint, name: str) -> int:
    if name not in checkpoint.variables:
        raise ConversionError(f"not a complete Whisper checkpoint: {name} is missing; {_INCOMPLETE_HINT}")
    return int(checkpoint.variables[name].reshape(-1)[0])


def whisper_dims(checkpoint: CT2Checkpoint) -> WhisperDims:
    """Read the architecture off the weights; refuse decoders that are not Whisper's."""
    import numpy as np

    for name, expected in _EXPECTED_DECODER_FLAGS.items():
        if name in checkpoint.variables and _scalar(checkpoint, name) != expected:
            raise ConversionError(
                f"not a standard Whisper decoder: {name} is {_scalar(checkpoint, name)}, "
                f"expected {expected}; only Whisper checkpoints can be converted"
            )
    variables = checkpoint.variables
    try:
        conv1 = variables["encoder/conv1/weight"].shape  # (d_model, n_mels, kernel 3)
        embeddings = variables["decoder/embeddings/weight"].shape  # (vocab, d_model)
        source_positions = variables["encoder/position_encodings/encodings"].shape
        target_positions = variables["decoder/position_encodings/encodings"].shape
        encoder_ffn = variables["encoder/layer_0/ffn/linear_0/weight"].shape
        decoder_ffn = variables["decoder/layer_0/ffn/linear_0/weight"].shape
    except KeyError as e:
        raise ConversionError(f"not a complete Whisper checkpoint: {e.args[0]} is missing; {_INCOMPLETE_HINT}") from e

    if checkpoint.has("decoder/projection/bias"):
        raise ConversionError(
            "the output projection has a bias, which Whisper does not have; only Whisper checkpoints can be converted"
        )
    projection = checkpoint.resolve("decoder/projection/weight")
    tied = projection in (None, "decoder/embeddings/weight") or bool(
        np.array_equal(variables[projection], variables["decoder/embeddings/weight"])
    )

    dims = WhisperDims(
        d_model=conv1[0],
        num_mel_bins=conv1[1],
        encoder_layers=_layer_count(checkpoint, "encoder"),
        decoder_layers=_layer_count(checkpoint, "decoder"),
        encoder_attention_heads=_scalar(checkpoint, "encoder/num_heads"),
        decoder_attention_heads=_scalar(checkpoint, "decoder/num_heads"),
        encoder_ffn_dim=encoder_ffn[0],
        decoder_ffn_dim=decoder_ffn[0],
        vocab_size=embeddings[0],
        max_source_positions=source_positions[0],
        max_target_positions=target_positions[0],
        tie_word_embeddings=tied,
    )
    for heads in (dims.encoder_attention_heads, dims.decoder_attention_heads):
        if heads <= 0 or dims.d_model % heads:
            raise ConversionError(f"d_model {dims.d_model} is not divisible by {heads} heads; {_INCOMPLETE_HINT}")
    return dims


def whisper_state_dict(checkpoint: CT2Checkpoint, dims: WhisperDims) -> dict[str, np.ndarray]:
    """Map CTranslate2 variables to `WhisperForConditionalGeneration` parameter names (float32).

    Raises ConversionError when a weight is missing and when one is left over, so nothing is
    silently dropped.
    """
    import numpy as np

    take = _WeightTaker(checkpoint)
    state: dict[str, np.ndarray] = {}

    def put_linear(hf_name: str, ct2_name: str) -> None:
        weight, bias = take.linear(ct2_name)
        state[f"{hf_name}.weight"] = weight
        if bias is not None:
            state[f"{hf_name}.bias"] = bias

    def put_fused(hf_attention: str, projections: Sequence[str], ct2_name: str) -> None:
        """Split a fused projection; k_proj's bias is dropped (see the package docstring)."""
        weight, bias = take.linear(ct2_name)
        biases = np.split(bias, len(projections)) if bias is not None else [None] * len(projections)
        parts = zip(projections, np.split(weight, len(projections)), biases, strict=True)
        for projection, part_weight, part_bias in parts:
            state[f"{hf_attention}.{projection}.weight"] = part_weight
            if part_bias is not None and projection != "k_proj":
                state[f"{hf_attention}.{projection}.bias"] = part_bias

    def put_layer_norm(hf_name: str, ct2_name: str) -> None:
        state[f"{hf_name}.weight"] = take.float32(f"{ct2_name}/gamma")
        state[f"{hf_name}.bias"] = take.float32(f"{ct2_name}/beta")

    def put_stack(side: str, num_layers: int) -> None:
        hf = f"model.{side}"
        state[f"{hf}.embed_positions.weight"] = take.float32(f"{side}/position_encodings/encodings")
        put_layer_norm(f"{hf}.layer_norm", f"{side}/layer_norm")
        for i in range(num_layers):
            layer, ct2 = f"{hf}.layers.{i}", f"{side}/layer_{i}"
            put_fused(f"{layer}.self_attn", ("q_proj", "k_proj", "v_proj"),
                      f"{ct2}/self_attention/linear_0")
            put_linear(f"{layer}.self_attn.out_proj", f"{ct2}/self_attention/linear_1")
            put_layer_norm(f"{layer}.self_attn_layer_norm", f"{ct2}/self_attention/layer_norm")
            if side == "decoder":
                put_fused(f"{layer}.encoder_attn", ("q_proj",), f"{ct2}/attention/linear_0")
                put_fused(f"{layer}.encoder_attn", ("k_proj", "v_proj"),
                          f"{ct2}/attention/linear_1")
                put_linear(f"{layer}.encoder_attn.out_proj", f"{ct2}/attention/linear_2")
                put_layer_norm(f"{layer}.encoder_attn_layer_norm", f"{ct2}/attention/layer_norm")
            put_linear(f"{layer}.fc1", f"{ct2}/ffn/linear_0")
            put_linear(f"{layer}.fc2", f"{ct2}/ffn/linear_1")
            put_layer_norm(f"{layer}.final_layer_norm", f"{ct2}/ffn/layer_norm")

    put_linear("model.encoder.conv1", "encoder/conv1")
    put_linear("model.encoder.conv2", "encoder/conv2")
    put_stack("encoder", dims.encoder_layers)
    embeddings = take.float32("decoder/embeddings/weight")
    state["model.decoder.embed_tokens.weight"] = embeddings
    put_stack("decoder", dims.decoder_layers)
    if dims.tie_word_embeddings:
        for name in ("decoder/projection/weight", "decoder/projection/weight_scale"):
            if checkpoint.has(name):
                take.raw(name)  # equal to the embeddings (whisper_dims checked): only mark used
        state["proj_out.weight"] = embeddings
    else:
        state["proj_out.weight"] = take.float32("decoder/projection/weight")

    leftover = take.unused()
    if leftover:
        raise ConversionError(
            "the checkpoint holds variables a Whisper model does not have, refusing to drop "
            f"them: {', '.join(leftover[:10])}{' ...' if len(leftover) > 10 else ''}; only Whisper checkpoints "
            "can be converted"
        )
    return state
