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
- on CPU in float32, linear layers run on whichever product this CPU does fastest, measured once
  per process and thread count (`cpu_products`, when the model is loaded): torch 2.10's MKL takes
  different code paths on different CPUs, and the fastest product of one or a few rows by a
  weight differs between them by up to three times.
  - One row: a plain product, or the weight cut into one block of rows per torch thread and
    multiplied as a batch (the bias in the same call). On AVX2 Xeons and on an AMD EPYC MKL
    computed a one-row product on one thread, bound by what one core reads, and the blocks ran on
    all of them; on an AVX-512 Xeon the plain product already used every thread.
  - Several rows, for each weight shape of the model at 4 and at 8 rows: x @ W^T (the
    orientation F.linear uses), W @ x^T, or oneDNN's product. On AVX2 Xeons MKL's GEMM was much
    slower for x @ W^T with 2-8 rows; on the AMD EPYC both MKL orientations ran some shapes at a
    third of oneDNN's speed (the feed-forward's second layer at 4 rows, most at 8) and others
    faster than it.

The measurements behind both are in benchmarks/README.md ("Numbers behind the code's choices").

Quantized (int8) or otherwise replaced linear layers are called as modules. The tokens are the
ones transformers' decoder picks (tests/test_greedy_decoding.py compares with `generate`); values differ
by float rounding only.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence


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
    return Product(weight, bias)(hidden)


# How several rows are multiplied by a weight (CpuProducts.several_rows).
LINEAR = "linear"  # x @ W^T, as F.linear (MKL)
WEIGHT_ON_THE_LEFT = "weight_on_the_left"  # W @ x^T (MKL)
ONEDNN = "onednn"  # oneDNN's matmul on the weight as it is (torch.ops.mkldnn._linear_pointwise)

Shape = tuple[int, int]  # a weight's (out features, in features)


@dataclass(frozen=True)
class CpuProducts:
    """Which products `Product` uses on this CPU (the module docstring)."""

    #: One row: the weight in one block of rows per thread (else a plain product).
    one_row_in_blocks: bool
    #: Several rows, by weight shape and a measured number of rows (MEASURED_ROWS): LINEAR,
    #: WEIGHT_ON_THE_LEFT or ONEDNN (LINEAR for a shape not measured).
    several_rows: tuple[tuple[tuple[Shape, int], str], ...] = ()
    _table: dict[tuple[Shape, int], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_table", dict(self.several_rows))

    def for_several_rows(self, shape: Shape, rows: int) -> str:
        """The product for `rows` rows: the one measured at the fewest measured rows that hold them
        (the most measured, beyond)."""
        measured = next((count for count in MEASURED_ROWS if rows <= count), MEASURED_ROWS[-1])
        return self._table.get((shape, measured), LINEAR)


# An alternative product is chosen only when it takes at most this share of the time of the one
# it replaces (F.linear's; oneDNN's replaces the faster of MKL's two): a near tie keeps the first,
# so the choice does not flip between runs.
CLEARLY_FASTER = 0.8
# The one-row choice is measured on a weight with as many rows as it takes to leave the caches
# (whisper's output projection, the largest product of a step, has 51865), of whisper-base's width.
MEASURED_WEIGHT_SHAPE = (32768, 512)
# Several rows: measured at each of these many rows (whisper's batches hold 1-8 windows, fewer
# as rows finish), on as many copies of the shape's weight as fill this many bytes, so that each
# product reads its weight from memory as in a step, not from the caches.
MEASURED_ROWS = (4, 8)
MEASURED_BYTES = 32 * 2**20
_cpu_products: dict[int, CpuProducts] = {}
_measuring = threading.Lock()


def cpu_products(shapes: Iterable[Shape] = ()) -> CpuProducts:
    """The products `Product` uses at torch's current thread count, for weights of `shapes`
    among others: measured on the first call for that count (about 0.1 s) and for each shape
    not seen before at that count (up to about 0.1 s each), and kept for the process."""
    import torch

    threads = torch.get_num_threads()
    with _measuring:
        products = _cpu_products.get(threads)
        if products is None:
            products = CpuProducts(one_row_in_blocks=_one_row_in_blocks_is_faster(threads))
        known = dict(products.several_rows)
        new = [
            (shape, rows)
            for shape in dict.fromkeys(tuple(shape) for shape in shapes)
            for rows in MEASURED_ROWS
            if (shape, rows) not in known
        ]
        if new or threads not in _cpu_products:
            known.update({key: _fastest_for_several_rows(*key) for key in new})
            products = CpuProducts(products.one_row_in_blocks, tuple(sorted(known.items())))
            _cpu_products[threads] = products
        return products


def product_shapes(model: Any) -> list[Shape]:
    """The weight shapes a decoder step of `model` multiplies (its plain linear layers, the
    self-attention's three fused): what `cpu_products` measures when the model is loaded."""
    import torch

    shapes: set[Shape] = set()
    for layer in model.get_decoder().layers:
        attention = layer.self_attn
        if type(attention.q_proj) is torch.nn.Linear:
            shapes.add((3 * attention.q_proj.out_features, attention.q_proj.in_features))
        linears = [attention.out_proj, layer.encoder_attn.q_proj, layer.encoder_attn.out_proj, layer.fc1, layer.fc2]
        shapes.update(tuple(linear.weight.shape) for linear in linears if type(linear) is torch.nn.Linear)
    if type(model.proj_out) is torch.nn.Linear:
        shapes.add(tuple(model.proj_out.weight.shape))
    return sorted(shapes)


def onednn_available() -> bool:
    import torch

    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _onednn_linear(hidden: Any, weight: Any, bias: Optional[Any]) -> Any:
    import torch

    return torch.ops.mkldnn._linear_pointwise(hidden, weight, bias, "none", [], "")


def _one_row_in_blocks_is_faster(threads: int) -> bool:
    import torch
    import torch.nn.functional as F

    if threads <= 1:
        return False
    weight = torch.full(MEASURED_WEIGHT_SHAPE, 0.01)  # any finite values (see below)
    one_row = torch.full((1, weight.shape[1]), 0.5)
    blocks = Product(weight, None, CpuProducts(one_row_in_blocks=True))
    with torch.inference_mode():
        plain, in_blocks = _fastest_times([lambda: F.linear(one_row, weight), lambda: blocks(one_row)])
    return in_blocks <= CLEARLY_FASTER * plain


def _fastest_for_several_rows(shape: Shape, measured_rows: int) -> str:
    """Which product multiplies `measured_rows` rows by a weight of `shape` fastest on this CPU."""
    import torch
    import torch.nn.functional as F

    out_features, features = shape
    copies = max(1, MEASURED_BYTES // (4 * out_features * features))
    # Any finite values: the products' speed does not depend on them (no denormals).
    weights = torch.full((copies, out_features, features), 0.01)
    rows = torch.full((measured_rows, features), 0.5)

    def each(product: Callable[[Any], Any]) -> Callable[[], None]:
        return lambda: [product(weight) for weight in weights]

    candidates = [each(lambda weight: F.linear(rows, weight)), each(lambda weight: torch.mm(weight, rows.t()))]
    if onednn_available():
        candidates.append(each(lambda weight: _onednn_linear(rows, weight, None)))
    with torch.inference_mode():
        linear, left, *onednn = _fastest_times(candidates, rounds=3)
    choice, fastest = (WEIGHT_ON_THE_LEFT, left) if left <= CLEARLY_FASTER * linear else (LINEAR, linear)
    if onednn and onednn[0] <= CLEARLY_FASTER * fastest:
        choice = ONEDNN
    return choice


def _fastest_times(functions: Sequence[Callable[[], Any]], rounds: int = 5) -> list[float]:
    """The fastest of `rounds` timings of each, interleaved, after one call each to warm up."""
    for function in functions:
        function()
    times: list[list[float]] = [[] for _ in functions]
    for _ in range(rounds):
        for function, kept in zip(functions, times, strict=True):
            started = time.perf_counter()
            function()
            kept.append(time.perf_counter() - started)
    return [min(kept) for kept in times]


# At most this many blocks of rows per matrix-vector product (one per torch thread).
MAX_ROW_BLOCKS = 16


class Product:
    """hidden @ weight^T + bias for one weight that is multiplied many times (a decoder layer's),
    for hidden of shape (..., features). On CPU in float32 it takes the product `cpu_products`
    chose (the module docstring); for one row in blocks, the weight's blocks of rows (views: nothing
    is copied) are cut once per thread count. Elsewhere, F.linear."""

    def __init__(self, weight: Any, bias: Optional[Any], products: Optional[CpuProducts] = None) -> None:
        import torch

        self.weight = weight
        self.bias = bias
        self.out_features, self.features = weight.shape
        self.shape: Shape = (self.out_features, self.features)
        # The inputs are on the weight's device, in its dtype (else F.linear would refuse them).
        self.cpu_float32 = weight.device.type == "cpu" and weight.dtype == torch.float32
        self.products = products  # None: cpu_products() at each call
        self._blocks_for = 0  # the thread count the blocks below were cut for
        self._weight_blocks: Any = None
        self._bias_blocks: Any = None

    def __call__(self, hidden: Any) -> Any:
        import torch
        import torch.nn.functional as F

        if not self.cpu_float32:
            return F.linear(hidden, self.weight, self.bias)
        products = self.products if self.products is not None else cpu_products([self.shape])
        if hidden.numel() == self.features:
            if products.one_row_in_blocks:
                return self._one_row_in_blocks(hidden)
            return F.linear(hidden, self.weight, self.bias)
        several_rows = products.for_several_rows(self.shape, hidden.numel() // self.features)
        if several_rows == ONEDNN:
            return _onednn_linear(hidden, self.weight, self.bias)
        if several_rows == WEIGHT_ON_THE_LEFT:
            flat = hidden.reshape(-1, self.features)
            if self.bias is None:
                output = torch.mm(self.weight, flat.t())
            else:
                output = torch.addmm(self.bias[:, None], self.weight, flat.t())
            # Laid out as the rows (strides (features, 1)): attention reads its heads from here, and
            # CPU flash attention takes only a query whose last dimension is contiguous.
            return output.t().contiguous().reshape(*hidden.shape[:-1], self.out_features)
        return F.linear(hidden, self.weight, self.bias)

    def _one_row_in_blocks(self, hidden: Any) -> Any:
        """weight @ the one row, on every torch thread: the weight's rows in one block per thread,
        multiplied as one batch (with the bias in the same call); the rows left over by the division
        after them."""
        import torch

        threads = torch.get_num_threads()
        if self._blocks_for != threads:
            self._cut_blocks(threads)
        blocks, block_rows, _ = self._weight_blocks.shape
        # The row as a column with strides (1, features), the same for every block: MKL's batched
        # product of this layout is the fast one; the same numbers with strides (1, 1) are not.
        if hidden.is_contiguous():
            column = hidden.as_strided((blocks, self.features, 1), (0, 1, self.features))
        else:
            column = hidden.reshape(1, self.features).t().expand(blocks, self.features, 1)
        if self._bias_blocks is None:
            output = torch.bmm(self._weight_blocks, column)
        else:
            output = torch.baddbmm(self._bias_blocks, self._weight_blocks, column)
        blocked_rows = blocks * block_rows
        if blocked_rows < self.out_features:
            rest = self.weight[blocked_rows:]
            row = hidden.reshape(self.features)
            left = torch.mv(rest, row) if self.bias is None else torch.addmv(self.bias[blocked_rows:], rest, row)
            output = torch.cat([output.reshape(blocked_rows), left])
        return output.reshape(*hidden.shape[:-1], self.out_features)

    def _cut_blocks(self, threads: int) -> None:
        blocks = max(1, min(threads, MAX_ROW_BLOCKS, self.out_features))
        block_rows = self.out_features // blocks
        blocked_rows = blocks * block_rows
        self._weight_blocks = self.weight[:blocked_rows].reshape(blocks, block_rows, self.features)
        self._bias_blocks = None if self.bias is None else self.bias[:blocked_rows].reshape(blocks, block_rows, 1)
        self._blocks_for = threads


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
        return _onednn_linear(states, linear.weight, linear.bias)
    return linear(states)


def _projection(linear: Any) -> Callable[[Any], Any]:
    """A plain linear layer as a `Product`; anything else (a quantized layer) as it is."""
    import torch

    if type(linear) is torch.nn.Linear:
        return Product(linear.weight, linear.bias)
    return linear


class _FusedProjection:
    """The scaled query and the keys and values side by side ((..., width) and (..., 2 width)) of
    one self-attention layer. From one product when all three are plain linear layers (k has no
    bias in Whisper: a zero bias adds nothing; the query's scale, a power of two in Whisper,
    folded into its rows) or int8 ones that fuse exactly (`fused_dynamic_int8`); else from the
    three modules."""

    def __init__(self, attention: Any, scaling: float) -> None:
        import torch

        self.scaling = scaling
        self.width = attention.q_proj.out_features
        parts = (attention.q_proj, attention.k_proj, attention.v_proj)
        self.parts = parts
        self.product: Optional[Product] = None
        self.quantized: Optional[Any] = None
        if all(type(part) is torch.nn.Linear for part in parts):
            with torch.no_grad():
                scales = (scaling, 1.0, 1.0)
                weight = torch.cat([part.weight * scale for part, scale in zip(parts, scales, strict=True)])
                bias = torch.cat(
                    [
                        (part.bias if part.bias is not None else torch.zeros_like(part.weight[:, 0])) * scale
                        for part, scale in zip(parts, scales, strict=True)
                    ]
                )
            self.product = Product(weight, bias)
        else:
            self.quantized = fused_dynamic_int8(parts)

    def products(self) -> list[Product]:
        return [self.product] if self.product is not None else []

    def __call__(self, hidden: Any) -> tuple[Any, Any]:
        import torch

        if self.product is not None:
            output = self.product(hidden)
            return output[..., : self.width], output[..., self.width :]
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
        self.products = [product for plan in self.plans for product in plan.products()]
        if isinstance(self.output, Product):
            self.products.append(self.output)
        self.shapes = sorted({product.shape for product in self.products})
        norm = decoder.layer_norm
        self.final_norm = (norm.normalized_shape, norm.weight, norm.bias, norm.eps)
        self.embed_scale = float(getattr(decoder, "embed_scale", 1.0) or 1.0)
        self._states: list[_LayerState] = []
        self.position = 0

    def start(self, encoder_states: Any) -> None:
        import torch

        rows = encoder_states.shape[0]
        if self.products and encoder_states.device.type == "cpu" and encoder_states.dtype == torch.float32:
            products = cpu_products(self.shapes)  # once a batch, not at each product
            for product in self.products:
                product.products = products
        self._states = []
        for layer in self.layers:
            cross = layer.encoder_attn
            # Both transposed once to (rows, heads, head width, frames): q @ K^T and V^T @ w^T
            # read them fastest (benchmarks/README.md, "Numbers behind the code's choices").
            self._states.append(
                _LayerState(
                    self_keys_values=encoder_states.new_empty((rows, 0, 2 * self.width)),
                    cross_keys=self._frames_by_heads(_over_frames(cross.k_proj, encoder_states)).mul_(self.scaling),
                    cross_values=self._frames_by_heads(_over_frames(cross.v_proj, encoder_states)),
                )
            )
        self.position = 0

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
            # are alike; benchmarks/README.md).
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
