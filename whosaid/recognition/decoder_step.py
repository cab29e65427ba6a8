"""One Whisper decoder step, written out over the model's own weights.

transformers' decoder call spends a large part of a greedy step outside arithmetic: module calls
(dozens per step), the cache objects, mask building, logits for every position of the prompt.
This step does the same arithmetic, in the same order, on the same weights:

- cross-attention keys and values are computed once per batch of windows (as transformers'
  cache does on the first step), self-attention keys and values go into buffers allocated once;
- queries, keys and values of self-attention come out of one matrix product (fused weights);
- logits only for the positions that are read (the last one; on the prompt step, the
  start-of-transcript position too);
- on CPU in float32, linear layers run on whichever of two products this CPU's BLAS (torch
  2.10's MKL) does fastest, measured once per process and thread count (`cpu_products`): MKL
  takes different code paths on different CPUs, and the fastest product of one or a few rows
  by a weight differs between them by up to three times.
  - Several rows: x @ W^T (the orientation F.linear uses) or W @ x^T. On AVX2 Xeons MKL's GEMM
    was much slower for x @ W^T with 2-8 rows; on an AVX-512 one W @ x^T is.
  - One row: a plain product, or the weight cut into one block of rows per torch thread and
    multiplied as a batch. On AVX2 Xeons MKL computed a one-row product on one thread, bound by
    what one core reads, and the blocks ran on all of them; on an AVX-512 one the plain product
    already uses every thread and the blocks are slower.

The measurements behind both are in benchmarks/README.md ("Numbers behind the code's choices").

Quantized (int8) or otherwise replaced linear layers are called as modules. The tokens are the
ones transformers' decoder picks (tests/test_greedy_decoding.py compares with `generate`); values differ
by float rounding only.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence


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


def affine(weight: Any, bias: Optional[Any], hidden: Any) -> Any:
    """hidden @ weight^T + bias; on CPU in float32 with the product this CPU does fastest
    (`cpu_products`, the module docstring)."""
    import torch
    import torch.nn.functional as F

    if hidden.device.type != "cpu" or hidden.dtype != torch.float32:
        return F.linear(hidden, weight, bias)
    rows = hidden.numel() // hidden.shape[-1]
    products = cpu_products()
    if rows == 1 and products.one_row_in_blocks:
        output = _threaded_matrix_vector(weight, hidden.reshape(rows, hidden.shape[-1]).t())
        if bias is not None:
            output = output + bias[:, None]
    elif rows == 1 or not products.weight_on_the_left:
        return F.linear(hidden, weight, bias)
    else:
        flat = hidden.reshape(rows, hidden.shape[-1])
        if bias is None:
            output = torch.mm(weight, flat.t())
        else:
            output = torch.addmm(bias[:, None], weight, flat.t())
    return output.t().reshape(*hidden.shape[:-1], weight.shape[0])


@dataclass(frozen=True)
class CpuProducts:
    """Which products `affine` uses on this CPU (the module docstring)."""

    #: One row: the weight in one block of rows per thread (else a plain product).
    one_row_in_blocks: bool
    #: Several rows: W @ x^T (else x @ W^T, as F.linear).
    weight_on_the_left: bool


# An alternative product is chosen only when it takes at most this share of the plain one's time
# (F.linear's): a near tie keeps the plain product, so the choice does not flip between runs.
CLEARLY_FASTER = 0.8
# The measured weight: as many rows as it takes to leave the caches (whisper's output projection,
# the largest product of a step, has 51865), of whisper-base's width.
MEASURED_WEIGHT_SHAPE = (32768, 512)
_cpu_products: dict[int, CpuProducts] = {}
_measuring = threading.Lock()


def cpu_products() -> CpuProducts:
    """The products `affine` uses at torch's current thread count, measured on the first call
    for that count (about 0.1 s) and kept for the process."""
    import torch

    threads = torch.get_num_threads()
    with _measuring:
        if threads not in _cpu_products:
            _cpu_products[threads] = _measure_products(threads)
        return _cpu_products[threads]


def _measure_products(threads: int) -> CpuProducts:
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(*MEASURED_WEIGHT_SHAPE, generator=generator)
    one_row = torch.randn(1, weight.shape[1], generator=generator)
    rows = torch.randn(4, weight.shape[1], generator=generator)
    with torch.inference_mode():
        plain_one, blocks = _fastest_times(
            lambda: F.linear(one_row, weight), lambda: _threaded_matrix_vector(weight, one_row.t())
        )
        plain_rows, left = _fastest_times(lambda: F.linear(rows, weight), lambda: torch.mm(weight, rows.t()))
    return CpuProducts(
        one_row_in_blocks=threads > 1 and blocks <= CLEARLY_FASTER * plain_one,
        weight_on_the_left=left <= CLEARLY_FASTER * plain_rows,
    )


def _fastest_times(first: Callable[[], Any], second: Callable[[], Any], rounds: int = 5) -> tuple[float, float]:
    """The fastest of `rounds` timings of each, interleaved, after one call each to warm up."""
    first(), second()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for function, kept in ((first, times[0]), (second, times[1])):
            started = time.perf_counter()
            function()
            kept.append(time.perf_counter() - started)
    return min(times[0]), min(times[1])


# At most this many blocks of rows per matrix-vector product (one per torch thread).
MAX_ROW_BLOCKS = 16


def _threaded_matrix_vector(weight: Any, column: Any) -> Any:
    """weight @ column for one column (features, 1), on every torch thread (see the module
    docstring): the weight's rows in one block per thread, multiplied as one batch. The blocks
    are views of the weight: nothing is copied but the output."""
    import torch

    out_features = weight.shape[0]
    blocks = min(torch.get_num_threads(), MAX_ROW_BLOCKS)
    blocked_rows = out_features - out_features % blocks
    output = torch.bmm(
        weight[:blocked_rows].reshape(blocks, blocked_rows // blocks, weight.shape[1]),
        column.expand(blocks, *column.shape),
    ).reshape(blocked_rows, 1)
    if blocked_rows < out_features:
        output = torch.cat([output, torch.mm(weight[blocked_rows:], column)])
    return output


SELF_CACHE_FIRST_POSITIONS = 64


class _FusedProjection:
    """q, k and v of one self-attention layer from one product, when all three are plain linear
    layers (k has no bias in Whisper: a zero bias adds nothing) or int8 ones that fuse exactly
    (`fused_dynamic_int8`); else the three modules."""

    def __init__(self, attention: Any) -> None:
        import torch

        self.attention = attention
        parts = (attention.q_proj, attention.k_proj, attention.v_proj)
        self.weight: Optional[Any] = None
        self.bias: Optional[Any] = None
        self.quantized: Optional[Any] = None
        if all(type(part) is torch.nn.Linear for part in parts):
            with torch.no_grad():
                self.weight = torch.cat([part.weight for part in parts])
                self.bias = torch.cat(
                    [part.bias if part.bias is not None else torch.zeros_like(part.weight[:, 0]) for part in parts]
                )
        else:
            self.quantized = fused_dynamic_int8(parts)

    def __call__(self, hidden: Any) -> tuple[Any, Any, Any]:
        if self.quantized is not None:
            return project(self.quantized, hidden).chunk(3, dim=-1)
        if self.weight is None:
            attention = self.attention
            return (
                project(attention.q_proj, hidden),
                project(attention.k_proj, hidden),
                project(attention.v_proj, hidden),
            )
        return affine(self.weight, self.bias, hidden).chunk(3, dim=-1)


@dataclass
class _LayerState:
    self_keys: Any  # (rows, heads, max positions, head width), filled up to the current position
    self_values: Any
    cross_keys: Any  # (rows, heads, head width, frames)
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
        self.self_qkv = [_FusedProjection(layer.self_attn) for layer in self.layers]
        attention = self.layers[0].self_attn
        self.heads = attention.num_heads
        self.head_width = attention.head_dim
        self.scaling = attention.scaling
        self.embed_scale = float(getattr(decoder, "embed_scale", 1.0) or 1.0)
        self._states: list[_LayerState] = []
        self.position = 0

    def start(self, encoder_states: Any) -> None:
        rows = encoder_states.shape[0]
        self._states = []
        for layer in self.layers:
            cross = layer.encoder_attn
            empty = encoder_states.new_empty((rows, self.heads, 0, self.head_width))
            self._states.append(
                _LayerState(
                    self_keys=empty,
                    self_values=empty,
                    # Both transposed once to (rows, heads, head width, frames): q @ K^T and V^T @ w^T
                    # read them fastest (benchmarks/README.md, "Numbers behind the code's choices").
                    cross_keys=self._heads(cross.k_proj(encoder_states)).transpose(2, 3).contiguous(),
                    cross_values=self._heads(cross.v_proj(encoder_states)).transpose(2, 3).contiguous(),
                )
            )
        self.position = 0

    def _reserve(self, positions: int) -> None:
        """Room for `positions` self-attention keys and values: the buffers grow by doubling (from
        64 positions), so a short window never holds the 448 a long one may need."""
        capacity = self._states[0].self_keys.shape[2]
        if positions <= capacity:
            return
        capacity = max(positions, 2 * capacity, SELF_CACHE_FIRST_POSITIONS)
        for state in self._states:
            for name in ("self_keys", "self_values"):
                old = getattr(state, name)
                grown = old.new_empty((old.shape[0], old.shape[1], capacity, old.shape[3]))
                grown[:, :, : self.position] = old[:, :, : self.position]
                setattr(state, name, grown)

    def finish(self) -> None:
        """Free the batch's keys and values (tens of MB a window) before what comes next, such
        as the beam-search fallback, allocates its own."""
        self._states = []
        self.position = 0

    def keep(self, indices: Any) -> None:
        """Keep only the rows at `indices` (a long tensor), in that order."""
        for state in self._states:
            state.self_keys = state.self_keys.index_select(0, indices)
            state.self_values = state.self_values.index_select(0, indices)
            state.cross_keys = state.cross_keys.index_select(0, indices)
            state.cross_values = state.cross_values.index_select(0, indices)

    def step(self, tokens: Any, logit_positions: tuple[int, ...] = (-1,)) -> Any:
        """Logits (rows, len(logit_positions), vocabulary) after reading `tokens` (rows, n)."""
        import torch
        import torch.nn.functional as F

        decoder = self.decoder
        count = tokens.shape[1]
        start, end = self.position, self.position + count
        self._reserve(end)
        hidden = decoder.embed_tokens(tokens)
        if self.embed_scale != 1.0:
            hidden = hidden * self.embed_scale
        hidden = hidden + decoder.embed_positions.weight[start:end]
        for layer, qkv, state in zip(self.layers, self.self_qkv, self._states, strict=True):
            residual = hidden
            query, key, value = qkv(layer.self_attn_layer_norm(hidden))
            state.self_keys[:, :, start:end] = self._heads(key)
            state.self_values[:, :, start:end] = self._heads(value)
            attended = F.scaled_dot_product_attention(
                self._heads(query * self.scaling),
                state.self_keys[:, :, :end],
                state.self_values[:, :, :end],
                is_causal=count > 1,  # the prompt step; later steps see every position before them
                scale=1.0,
            )
            hidden = residual + project(layer.self_attn.out_proj, self._merge(attended))

            residual = hidden
            cross = layer.encoder_attn
            query = project(cross.q_proj, layer.encoder_attn_layer_norm(hidden)) * self.scaling
            # Written out rather than SDPA: with a query of one position CPU SDPA's blocked kernel
            # is slower over 1500 frames (on GPU the two are alike; benchmarks/README.md).
            weights = torch.matmul(self._heads(query), state.cross_keys).softmax(-1)
            attended = torch.matmul(state.cross_values, weights.transpose(2, 3)).transpose(2, 3)
            hidden = residual + project(cross.out_proj, self._merge(attended))

            residual = hidden
            feed = layer.activation_fn(project(layer.fc1, layer.final_layer_norm(hidden)))
            hidden = residual + project(layer.fc2, feed)
        self.position = end
        proj_out = self.model.proj_out
        if type(proj_out) is not torch.nn.Linear:
            # A dynamically quantized projection scales its int8 input by the range of all the
            # rows it is given: give it every position, as transformers does, for the same logits.
            return project(proj_out, decoder.layer_norm(hidden))[:, list(logit_positions)]
        if logit_positions != (-1,) or count != 1:
            hidden = hidden[:, list(logit_positions)]
        return project(proj_out, decoder.layer_norm(hidden))

    def _heads(self, states: Any) -> Any:
        """(rows, positions, width) -> (rows, heads, positions, head width), contiguous."""
        rows, positions = states.shape[:2]
        return states.reshape(rows, positions, self.heads, self.head_width).transpose(1, 2).contiguous()

    def _merge(self, attended: Any) -> Any:
        rows, _, positions, _ = attended.shape
        return attended.transpose(1, 2).reshape(rows, positions, self.heads * self.head_width)
