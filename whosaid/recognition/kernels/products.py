"""Linear layers on CPU in float32, for weights multiplied by one row or a few many times over
(the decoder's, at every step of every window): the products this CPU does fastest.

- A weight that half precision holds exactly (every weight of Whisper's own checkpoints, released
  in float16) is multiplied from a half copy (`HalfWeights`): float32 products of the same
  numbers, from half the bytes, which is what a step of one row or a few waits on.
- Any other float32 weight takes the product measured fastest on this CPU, once per process and
  thread count (`cpu_products`, when a model is loaded): torch 2.10's MKL takes different code
  paths on different CPUs, and the fastest product of one or a few rows by a weight differs
  between them by up to three times.
  - One row: a plain product, or the weight cut into one block of rows per torch thread and
    multiplied as a batch (the bias in the same call). On AVX2 Xeons and on an AMD EPYC MKL
    computed a one-row product on one thread, bound by what one core reads, and the blocks ran on
    all of them; on an AVX-512 Xeon the plain product already used every thread.
  - Several rows, for each weight shape at 4 and at 8 rows: x @ W^T (the orientation F.linear
    uses), W @ x^T, or oneDNN's product on a copy of the weight packed once for it (packed when
    the model loads, for the shapes that take it: as many bytes again). On AVX2 Xeons MKL's GEMM
    was much slower for x @ W^T with 2-8 rows; on AMD EPYCs both MKL orientations ran most shapes
    at 8 rows at a third to a half of packed oneDNN's speed.

The measurements behind these choices are in benchmarks/CHANGELOG.md ("Numbers behind the code's
choices"). Every product gives the float32 result up to float rounding (the order of the sums).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence


def affine(weight: Any, bias: Optional[Any], hidden: Any) -> Any:
    """hidden @ weight^T + bias; on CPU in float32 with the product this CPU does fastest
    (`cpu_products`, the module docstring)."""
    return Product(weight, bias)(hidden)


# How several rows are multiplied by a weight (CpuProducts.several_rows).
LINEAR = "linear"  # x @ W^T, as F.linear (MKL)
WEIGHT_ON_THE_LEFT = "weight_on_the_left"  # W @ x^T (MKL)
# oneDNN's matmul (torch.ops.mkldnn._linear_pointwise) on a copy of the weight packed for it once
# (`pack_for_onednn`): on the weight as it is, oneDNN packs it again at every call.
ONEDNN = "onednn"

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
# it replaces (W @ x^T replaces F.linear; MKL's faster one replaces packed oneDNN, the first choice
# where oneDNN is available): a near tie keeps the first, so the choice does not flip between runs.
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


def onednn_available() -> bool:
    import torch

    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_linear(hidden: Any, weight: Any, bias: Optional[Any]) -> Any:
    """hidden @ weight^T + bias through oneDNN, `weight` as it is or packed (`pack_for_onednn`)."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(hidden, weight, bias, "none", [], "")


# The rows oneDNN is told to pack a decoder weight for; the packed weight takes any number of rows.
PACKED_FOR_ROWS = MEASURED_ROWS[-1]


def pack_for_onednn(weight: Any, rows: int = PACKED_FOR_ROWS) -> Any:
    """A copy of `weight` (out features, in features) in the layout oneDNN's matmul reads for
    about `rows` rows at a time: as many bytes again, made once; the products are float32 ones,
    as on the weight itself."""
    import torch

    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)


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
        packed = [pack_for_onednn(weight) for weight in weights]
        candidates.append(lambda: [onednn_linear(rows, weight, None) for weight in packed])
    with torch.inference_mode():
        linear, left, *onednn = _fastest_times(candidates, rounds=3)
    choice, fastest = (WEIGHT_ON_THE_LEFT, left) if left <= CLEARLY_FASTER * linear else (LINEAR, linear)
    if onednn and fastest > CLEARLY_FASTER * onednn[0]:
        choice = ONEDNN  # packed oneDNN, unless one of MKL's is clearly faster
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


HALF_CHECK_ELEMENTS = 2**20


class HalfWeights:
    """hidden @ weight^T + bias from a copy of the weight in half precision, for a float32 weight
    that half precision holds exactly: Whisper's own checkpoints were released in float16, so
    every weight of theirs is such a float32 (a fine-tune's in general is not). fbgemm's product
    (`torch.ops.quantized.linear_dynamic_fp16`) widens the weight back to float32 as it reads it
    and adds in float32, the bias too: the products of the same numbers in float32, summed in
    another order, from half the bytes. A decoder step on CPU reads every weight once for one row
    or a few, so its time is about what it reads."""

    def __init__(self, packed: Any) -> None:
        self.packed = packed

    @classmethod
    def of(cls, weight: Any, bias: Optional[Any]) -> Optional["HalfWeights"]:
        """The weight's half copy, or None: a value half precision does not hold (more digits, out
        of its range), or no fbgemm in this torch (its builds for x86 have it)."""
        import torch

        if weight.device.type != "cpu" or weight.dtype != torch.float32 or not half_products_available():
            return None
        with torch.no_grad():
            # Checked a block of rows at a time: no full copy of the weight (the output projection's
            # is 100 MB in float32) besides the packed half one.
            rows = max(1, HALF_CHECK_ELEMENTS // max(1, weight.shape[1]))
            for block in weight.split(rows):
                if not torch.equal(block.half().float(), block):
                    return None
            return cls(torch.ops.quantized.linear_prepack_fp16(weight, bias))

    def __call__(self, hidden: Any) -> Any:
        """The product, each row's result the same whatever rows are multiplied with it: where
        this CPU's kernels sum some counts of rows in another order (`padded_half_rows`), the rows
        are padded with zero rows to a count that sums them all in one order."""
        import torch

        features = hidden.shape[-1]
        rows = hidden.numel() // features
        missing = padded_half_rows(rows) - rows
        if not missing:
            return torch.ops.quantized.linear_dynamic_fp16(hidden, self.packed)
        flat = hidden.reshape(rows, features)
        padded = torch.cat([flat, flat.new_zeros(missing, features)])
        output = torch.ops.quantized.linear_dynamic_fp16(padded, self.packed)[:rows]
        return output.reshape(*hidden.shape[:-1], output.shape[-1])


# Half products are checked at every count of rows up to this (`padded_half_rows`): two rounds of
# the 120 rows fbgemm's AVX2 kernels repeat their choices over; a decoder step multiplies up to 40
# rows in the common cases (8 windows of 5 beams). Beyond, a multiple of one of HALF_ROW_STEPS.
HALF_CHECKED_ROWS = 240
HALF_ROW_STEPS = (1, 2, 3, 4, 6)


def padded_half_rows(rows: int) -> int:
    """The count of rows `rows` rows are multiplied as, by a half copy on this CPU: the fewest at
    least `rows` whose every row this CPU's half products sum in the order they sum it among any
    other such count. fbgemm cuts the rows into blocks for its kernels, and on AVX2 those for blocks
    of one or two rows sum in another order than the rest, so one row alone, or the row left after
    blocks of six, rounds differently from the same row among others (there: 1 and 2 rows -> 3,
    7 -> 8, 14 -> 15, ...; no padding where there is no such difference, as with AVX-512)."""
    padded, step = _half_row_counts()
    if rows < len(padded):
        return padded[rows]
    return -(-rows // step) * step


@functools.lru_cache(maxsize=1)
def _half_row_counts() -> tuple[tuple[int, ...], int]:
    """`padded_half_rows` for 0..HALF_CHECKED_ROWS rows, and the fewest of HALF_ROW_STEPS whose
    every multiple up to there is such a count: checked once per process (under 0.2 s) against
    the products of HALF_CHECKED_ROWS rows."""
    import torch

    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(32, 256, generator=generator).half().float()
    packed = torch.ops.quantized.linear_prepack_fp16(weight, torch.randn(32, generator=generator))
    rows = torch.randn(HALF_CHECKED_ROWS, 256, generator=generator)
    with torch.no_grad():
        expected = torch.ops.quantized.linear_dynamic_fp16(rows, packed)
        agree = [True] + [
            bool(torch.equal(torch.ops.quantized.linear_dynamic_fp16(rows[:count], packed), expected[:count]))
            for count in range(1, HALF_CHECKED_ROWS + 1)
        ]
    padded = []
    for count in range(HALF_CHECKED_ROWS + 1):
        padded.append(next((other for other in range(count, HALF_CHECKED_ROWS + 1) if agree[other]), count))
    steps = (step for step in HALF_ROW_STEPS if all(agree[count] for count in range(step, HALF_CHECKED_ROWS + 1, step)))
    return tuple(padded), next(steps, HALF_ROW_STEPS[-1])


@functools.lru_cache(maxsize=1)
def half_products_available() -> bool:
    """Whether this torch multiplies float32 rows by half weights (fbgemm's product)."""
    import torch

    try:
        packed = torch.ops.quantized.linear_prepack_fp16(torch.ones(2, 2), None)
        product = torch.ops.quantized.linear_dynamic_fp16(torch.ones(1, 2), packed)
        return bool(torch.equal(product, torch.full((1, 2), 2.0)))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


# At most this many blocks of rows per matrix-vector product (one per torch thread).
MAX_ROW_BLOCKS = 16


class Product:
    """hidden @ weight^T + bias for one weight that is multiplied many times (a decoder layer's),
    for hidden of shape (..., features). On CPU in float32: with `half_if_lossless`, from a
    half-precision copy of a weight that half precision holds exactly (`HalfWeights`); else the
    product `cpu_products` chose (the module docstring), for one row in blocks, the weight's blocks
    of rows (views: nothing is copied) cut once per thread count. Elsewhere, F.linear."""

    def __init__(
        self,
        weight: Any,
        bias: Optional[Any],
        products: Optional[CpuProducts] = None,
        *,
        half_if_lossless: bool = False,
    ) -> None:
        import torch

        self.weight = weight
        self.bias = bias
        self.out_features, self.features = weight.shape
        self.shape: Shape = (self.out_features, self.features)
        # The inputs are on the weight's device, in its dtype (else F.linear would refuse them).
        self.cpu_float32 = weight.device.type == "cpu" and weight.dtype == torch.float32
        self.half = HalfWeights.of(weight, bias) if half_if_lossless and self.cpu_float32 else None
        self.products = products  # None: cpu_products() at each call
        self._packed: Any = None  # the weight packed for oneDNN, once a measured choice takes it
        self._blocks_for = 0  # the thread count the blocks below were cut for
        self._weight_blocks: Any = None
        self._bias_blocks: Any = None

    def use(self, products: CpuProducts) -> None:
        """Multiply with `products` from now on; the weight is packed now if they take oneDNN's
        product for its shape (at load, not in a request)."""
        self.products = products
        if self.half is None and self._packed is None and any(
            products.for_several_rows(self.shape, rows) == ONEDNN for rows in MEASURED_ROWS
        ):
            self._packed = pack_for_onednn(self.weight)

    def __call__(self, hidden: Any) -> Any:
        import torch
        import torch.nn.functional as F

        if not self.cpu_float32:
            return F.linear(hidden, self.weight, self.bias)
        if self.half is not None:
            return self.half(hidden)
        products = self.products if self.products is not None else cpu_products([self.shape])
        if hidden.numel() == self.features:
            if products.one_row_in_blocks:
                return self._one_row_in_blocks(hidden)
            return F.linear(hidden, self.weight, self.bias)
        several_rows = products.for_several_rows(self.shape, hidden.numel() // self.features)
        if several_rows == ONEDNN:
            if self._packed is None:
                self._packed = pack_for_onednn(self.weight)
            return onednn_linear(hidden, self._packed, self.bias)
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
