"""One Whisper decoder step, written out over the model's own weights.

transformers' decoder call spends a large part of a greedy step outside arithmetic: module calls
(dozens per step), the cache objects, mask building, logits for every position of the prompt.
This step does the same arithmetic, in the same order, on the same weights:

- cross-attention keys and values are computed once per batch of windows (as transformers'
  cache does on the first step; on CPU in float32 through oneDNN, as the encoder's layers), laid
  out once for the products that read them, the keys already scaled by the query's scale;
  self-attention keys and values go side by side into one buffer that grows by doubling, and the
  attention reads its heads as views of it;
- queries, keys and values of self-attention come out of one matrix product (fused weights, the
  query's scale folded into its rows);
- logits only for the positions that are read (the last one; on the prompt step, the
  start-of-transcript position too);
- on CPU in float32, the linear layers multiply through whosaid.recognition.kernels.products: from exact
  half-precision copies of the weights where half precision holds them (Whisper's own
  checkpoints), else with the product measured fastest on this CPU.

Quantized (int8) or otherwise replaced linear layers are called as modules. The tokens are the
ones transformers' decoder picks (tests/core/test_greedy_decoding.py compares with `generate`); values differ
by float rounding only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from whosaid.recognition.kernels.products import (
    CpuProducts,
    Product,
    affine,
    cpu_products,
    onednn_available,
    onednn_linear,
)

logger = logging.getLogger(__name__)


def project(linear: Any, hidden: Any) -> Any:
    """`linear(hidden)` for hidden of shape (..., features): a plain linear layer through
    `affine`, anything else (a quantized layer) called as it is."""
    import torch

    if type(linear) is not torch.nn.Linear:
        return linear(hidden)
    return affine(linear.weight, linear.bias, hidden)


def fused_dynamic_int8(parts: Sequence[Any]) -> Optional[Any]:
    """One dynamic int8 layer computing the outputs of `parts` side by side, when each is one with
    one weight scale per output channel (`quantize_int8`'s): they quantize the same input on the
    same scale, so the fused layer's outputs are theirs exactly, from one call. None otherwise."""
    import torch

    dynamic = torch.ao.nn.quantized.dynamic.Linear
    if not all(type(part) is dynamic for part in parts):
        return None
    weights = [part.weight() for part in parts]
    if not all(w.qscheme() == torch.per_channel_affine and w.q_per_channel_axis() == 0 for w in weights):
        return None
    weight = torch._make_per_channel_quantized_tensor(
        torch.cat([w.int_repr() for w in weights]),
        torch.cat([w.q_per_channel_scales() for w in weights]),
        torch.cat([w.q_per_channel_zero_points() for w in weights]),
        0,
    )
    biases = [
        part.bias() if part.bias() is not None else torch.zeros(w.shape[0])
        for part, w in zip(parts, weights, strict=True)
    ]
    fused = dynamic(weight.shape[1], weight.shape[0], dtype=torch.qint8)
    fused.set_weight_bias(weight, torch.cat(biases).float())
    return fused


SELF_CACHE_FIRST_POSITIONS = 64


def _over_frames(linear: Any, states: Any) -> Any:
    """`linear(states)` for the encoder's frames (1500 rows a window): on CPU in float32 through
    oneDNN's product, as the encoder's own layers (`prepack_encoder_linears`: at this many rows
    oneDNN's GEMM beats the default path); anything else as it is."""
    import torch

    if (
        type(linear) is torch.nn.Linear
        and states.device.type == "cpu"
        and states.dtype == torch.float32
        and onednn_available()
    ):
        return onednn_linear(states, linear.weight, linear.bias)
    return linear(states)


def _projection(linear: Any) -> Callable[[Any], Any]:
    """A plain linear layer as a `Product`; anything else (a quantized layer) as it is."""
    import torch

    if type(linear) is torch.nn.Linear:
        return Product(linear.weight, linear.bias, half_if_lossless=True)
    return linear


class _FusedProjection:
    """The scaled query and the keys and values side by side ((..., width) and (..., 2 width)) of
    one self-attention layer. From one product when all three are plain linear layers (k has no
    bias in Whisper: a zero bias adds nothing) or int8 ones that fuse exactly (`fused_dynamic_int8`);
    else from the three modules. The query's scale, a power of two in Whisper, is folded into its
    rows, unless their exact half copy (`HalfWeights`) is used: scaled, some of its values would
    fall below half precision's normal range, so the query is scaled after the product."""

    def __init__(self, attention: Any, scaling: float) -> None:
        import torch

        self.scaling = scaling
        self.width = attention.q_proj.out_features
        parts = (attention.q_proj, attention.k_proj, attention.v_proj)
        self.parts = parts
        self.product: Optional[Product] = None
        self.scale_query = False  # the product gives the query unscaled
        self.quantized: Optional[Any] = None
        if all(type(part) is torch.nn.Linear for part in parts):
            with torch.no_grad():
                weight = torch.cat([part.weight for part in parts])
                bias = torch.cat(
                    [part.bias if part.bias is not None else torch.zeros_like(part.weight[:, 0]) for part in parts]
                )
            self.product = Product(weight, bias, half_if_lossless=True)
            self.scale_query = self.product.half is not None
            if not self.scale_query:
                # Folded into the fused copy's query rows (its own tensors, not the model's).
                weight[: self.width] *= scaling
                bias[: self.width] *= scaling
                self.product = Product(weight, bias)
        else:
            self.quantized = fused_dynamic_int8(parts)

    def products(self) -> list[Product]:
        return [self.product] if self.product is not None else []

    def __call__(self, hidden: Any) -> tuple[Any, Any]:
        import torch

        if self.product is not None:
            output = self.product(hidden)
            query = output[..., : self.width]
            return (query * self.scaling if self.scale_query else query), output[..., self.width :]
        if self.quantized is not None:
            output = self.quantized(hidden)
            return output[..., : self.width] * self.scaling, output[..., self.width :]
        query, key, value = (project(part, hidden) for part in self.parts)
        return query * self.scaling, torch.cat([key, value], dim=-1)


class _LayerPlan:
    """One decoder layer's weights as the step multiplies them."""

    def __init__(self, layer: Any, scaling: float) -> None:
        import torch.nn.functional as F

        self.layer = layer
        self.self_qkv = _FusedProjection(layer.self_attn, scaling)
        self.self_out = _projection(layer.self_attn.out_proj)
        self.cross_query = _projection(layer.encoder_attn.q_proj)
        self.cross_out = _projection(layer.encoder_attn.out_proj)
        self.fc1 = _projection(layer.fc1)
        self.fc2 = _projection(layer.fc2)
        # transformers' GELUActivation is F.gelu: called as it is, without the module's call.
        activation = layer.activation_fn
        self.activation = F.gelu if type(activation).__name__ == "GELUActivation" else activation
        self.norms = [
            (norm.normalized_shape, norm.weight, norm.bias, norm.eps)
            for norm in (layer.self_attn_layer_norm, layer.encoder_attn_layer_norm, layer.final_layer_norm)
        ]

    def products(self) -> list[Product]:
        candidates = [self.self_out, self.cross_query, self.cross_out, self.fc1, self.fc2]
        return self.self_qkv.products() + [part for part in candidates if isinstance(part, Product)]


@dataclass
class _LayerState:
    # (rows, max positions, 2 width): each position's self-attention key, then its value, filled
    # up to the current position.
    self_keys_values: Any
    cross_keys: Any  # (rows, heads, head width, frames), scaled by the query's scale
    cross_values: Any  # (rows, heads, head width, frames) too


class WhisperDecoderStep:
    """The decoder of a loaded WhisperForConditionalGeneration, stepped by hand.

    `start(encoder_states)` prepares one batch of windows; then `step(tokens)`
    reads the next tokens of every row ((rows, 1), or the whole prompt (rows, n) first) and
    returns the float logits of the positions asked for; `keep(indices)` drops finished rows;
    `finish()` frees the batch's buffers.
    """

    def __init__(self, model: Any) -> None:
        decoder = model.get_decoder()
        self.model = model
        self.decoder = decoder
        self.layers = list(decoder.layers)
        attention = self.layers[0].self_attn
        self.heads = attention.num_heads
        self.head_width = attention.head_dim
        self.width = self.heads * self.head_width
        self.scaling = attention.scaling
        self.plans = [_LayerPlan(layer, self.scaling) for layer in self.layers]
        self.output = _projection(model.proj_out)
        products = [product for plan in self.plans for product in plan.products()]
        if isinstance(self.output, Product):
            products.append(self.output)
        # The products that multiply float32 weights on CPU as `cpu_products` chooses (weights
        # half precision does not hold, or a torch without the half product).
        self.products = [product for product in products if product.cpu_float32 and product.half is None]
        self.shapes = sorted({product.shape for product in self.products})
        self._products: Optional[CpuProducts] = None
        if self.products:
            # Measured now, as the model loads, and the weights oneDNN will multiply packed:
            # not in the first request.
            self._use_products()
            logger.info("decoder products on this CPU: %s", self._products)
        halves = sum(product.half is not None for product in products)
        if halves:
            logger.info("decoder: %d of %d weights multiplied from exact half-precision copies", halves, len(products))
        norm = decoder.layer_norm
        self.final_norm = (norm.normalized_shape, norm.weight, norm.bias, norm.eps)
        self.embed_scale = float(getattr(decoder, "embed_scale", 1.0) or 1.0)
        self._states: list[_LayerState] = []
        self.position = 0

    def start(self, encoder_states: Any) -> None:
        import torch

        rows = encoder_states.shape[0]
        if self.products and encoder_states.device.type == "cpu" and encoder_states.dtype == torch.float32:
            self._use_products()  # once a batch, not at each product: the thread count may change
        self._states = []
        for layer in self.layers:
            cross = layer.encoder_attn
            # Both transposed once to (rows, heads, head width, frames): q @ K^T and V^T @ w^T
            # read them fastest (benchmarks/CHANGELOG.md, "Numbers behind the code's choices").
            self._states.append(
                _LayerState(
                    self_keys_values=encoder_states.new_empty((rows, 0, 2 * self.width)),
                    cross_keys=self._frames_by_heads(_over_frames(cross.k_proj, encoder_states)).mul_(self.scaling),
                    cross_values=self._frames_by_heads(_over_frames(cross.v_proj, encoder_states)),
                )
            )
        self.position = 0

    def _use_products(self) -> None:
        self._products = cpu_products(self.shapes)
        for product in self.products:
            product.use(self._products)

    def _reserve(self, positions: int) -> None:
        """Room for `positions` self-attention keys and values: the buffers grow by doubling (from
        64 positions), so a short window never holds the 448 a long one may need."""
        capacity = self._states[0].self_keys_values.shape[1]
        if positions <= capacity:
            return
        capacity = max(positions, 2 * capacity, SELF_CACHE_FIRST_POSITIONS)
        for state in self._states:
            old = state.self_keys_values
            grown = old.new_empty((old.shape[0], capacity, old.shape[2]))
            grown[:, : self.position] = old[:, : self.position]
            state.self_keys_values = grown

    def finish(self) -> None:
        """Free the batch's keys and values (tens of MB a window) before what comes next, such
        as the beam-search fallback, allocates its own."""
        self._states = []
        self.position = 0

    def keep(self, indices: Any) -> None:
        """Keep only the rows at `indices` (a long tensor), in that order."""
        for state in self._states:
            state.self_keys_values = state.self_keys_values.index_select(0, indices)
            state.cross_keys = state.cross_keys.index_select(0, indices)
            state.cross_values = state.cross_values.index_select(0, indices)

    def step(self, tokens: Any, logit_positions: tuple[int, ...] = (-1,)) -> Any:
        """Logits (rows, len(logit_positions), vocabulary) after reading `tokens` (rows, n)."""
        import torch
        import torch.nn.functional as F

        decoder = self.decoder
        rows, count = tokens.shape
        width, heads, head_width = self.width, self.heads, self.head_width
        start, end = self.position, self.position + count
        self._reserve(end)
        hidden = decoder.embed_tokens(tokens)
        if self.embed_scale != 1.0:
            hidden = hidden * self.embed_scale
        hidden = hidden + decoder.embed_positions.weight[start:end]
        for plan, state in zip(self.plans, self._states, strict=True):
            self_norm, cross_norm, final_norm = plan.norms
            # Self-attention; its heads are views of the products and of the cache (no copies).
            query, key_value = plan.self_qkv(F.layer_norm(hidden, *self_norm))
            cache = state.self_keys_values
            cache[:, start:end] = key_value
            seen = cache[:, :end].view(rows, end, 2, heads, head_width)
            attended = F.scaled_dot_product_attention(
                query.reshape(rows, count, heads, head_width).transpose(1, 2),
                seen[:, :, 0].transpose(1, 2),
                seen[:, :, 1].transpose(1, 2),
                is_causal=count > 1,  # the prompt step; later steps see every position before them
                scale=1.0,
            )
            hidden = hidden + plan.self_out(attended.transpose(1, 2).reshape(rows, count, width))

            # Cross-attention, the keys already scaled. Written out rather than SDPA: with a query
            # of one position CPU SDPA's blocked kernel is slower over 1500 frames (on GPU the two
            # are alike; benchmarks/CHANGELOG.md).
            query = plan.cross_query(F.layer_norm(hidden, *cross_norm))
            weights = torch.matmul(
                query.reshape(rows, count, heads, head_width).transpose(1, 2), state.cross_keys
            ).softmax(-1)
            attended = torch.matmul(state.cross_values, weights.transpose(2, 3))  # (rows, heads, head width, count)
            hidden = hidden + plan.cross_out(attended.permute(0, 3, 1, 2).reshape(rows, count, width))

            feed = plan.activation(plan.fc1(F.layer_norm(hidden, *final_norm)))
            hidden = hidden + plan.fc2(feed)
        self.position = end
        if not isinstance(self.output, Product):
            # A dynamically quantized projection scales its int8 input by the range of all the
            # rows it is given: give it every position, as transformers does, for the same logits.
            return self.output(F.layer_norm(hidden, *self.final_norm))[:, list(logit_positions)]
        if logit_positions != (-1,) or count != 1:
            hidden = hidden[:, list(logit_positions)]
        return self.output(F.layer_norm(hidden, *self.final_norm))

    def _frames_by_heads(self, states: Any) -> Any:
        """(rows, frames, width) -> (rows, heads, head width, frames), contiguous: one copy."""
        rows, frames = states.shape[:2]
        return states.reshape(rows, frames, self.heads, self.head_width).permute(0, 2, 3, 1).contiguous()
