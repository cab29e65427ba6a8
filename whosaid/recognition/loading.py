"""Loading the Whisper model for CPU or GPU: the keyword arguments of `from_pretrained`, the
int8 quantization option, the packed encoder weights used on CPU in float32, and the
speculative-decoding assistant."""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

from whosaid.config import WHISPER_FRAMES_PER_S, WHISPER_WINDOW_S, ModelSettings
from whosaid.errors import ModelLoadError

logger = logging.getLogger(__name__)


def load_kwargs(settings: ModelSettings) -> dict[str, Any]:
    return {
        "token": settings.token(),
        "dtype": settings.resolved_dtype(),
        "attn_implementation": settings.resolved_attn_implementation(),
        "low_cpu_mem_usage": True,
    }


def check_quantization(settings: ModelSettings) -> None:
    if settings.quantization != "int8":
        return
    import torch

    if not settings.resolved_device().startswith("cpu") or settings.resolved_dtype() != torch.float32:
        raise ModelLoadError(
            f"QUANTIZATION=int8 is for CPU float32 models; this one runs on "
            f"{settings.resolved_device()} in {settings.resolved_dtype()}: on CUDA keep float16 "
            "(QUANTIZATION=none), on CPU leave DTYPE at auto"
        )


def quantize_int8(model: Any) -> None:
    """int8 quantization of every linear layer, in place: int8 weights (a quarter of the memory
    traffic, which bounds each decoding step on CPU), activations quantized on the fly;
    attention, convolutions and layer norms stay float32. Every weight has one scale per output
    channel (torch's default is one per weight, set by its widest row).

    - The encoder's layers quantize each frame with its own scale (`rowwise_int8_linear_class`):
      torch's dynamic layers take one scale for all 1500 frames of a window, set by the loudest
      frames, and most of int8's loss in word error rate came from there.
    - So do the decoder's cross-attention keys and values, computed once per batch from the
      encoder's frames (the batch's windows no longer share one scale).
    - The decoder's other layers are torch's dynamic ones (fbgemm): at 1-8 rows a step they are about
      three times faster than the integer product below, and one scale per step's rows costs little.

    WER and times of each choice: benchmarks/CHANGELOG.md, "Numbers behind the code's choices"."""
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    rowwise = rowwise_int8_linear_class()
    int_mm_is_fast()  # measured now, not in the first request
    replace_encoder_linears(model, rowwise)
    for layer in model.get_decoder().layers:
        layer.encoder_attn.k_proj = rowwise(layer.encoder_attn.k_proj)
        layer.encoder_attn.v_proj = rowwise(layer.encoder_attn.v_proj)
    with warnings.catch_warnings():
        # torch.ao.quantization announces its move to torchao; torch is pinned (2.10), where it
        # still works, and torchao's int8 path would be one more dependency.
        warnings.simplefilter("ignore", DeprecationWarning)
        quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)


def replace_encoder_linears(model: Any, replacement: Callable[[Any], Any]) -> None:
    """Every plain linear layer of the encoder replaced, in place, by `replacement(layer)`."""
    import torch

    for parent in list(model.get_encoder().modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, replacement(child))


def symmetric_int8(rows: Any) -> tuple[Any, Any]:
    """Each row of a float matrix as int8 on its own symmetric scale: (int8 rows, scales (rows, 1))."""
    import torch

    # max |x| as max(max x, -min x), and the division rounded in place: no float copies of the rows
    # beyond the one divided (the same values as abs, then round).
    largest = torch.maximum(rows.amax(dim=1, keepdim=True), rows.amin(dim=1, keepdim=True).neg_())
    scale = (largest / 127).clamp_min_(torch.finfo(torch.float32).tiny)
    return rows.div(scale).round_().clamp_(-127, 127).to(torch.int8), scale


# A rowwise int8 layer takes at most this many rows at once (a third of a window's 1500 frames):
# blocks whose float copies (the rows divided by their scales, the int32 products, the output) stay
# in the caches and keep a request's memory low; rows are independent, so the values are the same.
ROWWISE_BLOCK_ROWS = 512


@functools.lru_cache(maxsize=1)
def rowwise_int8_linear_class() -> type:
    import torch

    class RowwiseInt8Linear(torch.nn.Module):
        """A linear layer on int8 weights (symmetric, one scale per output channel) whose input
        rows are each quantized with their own symmetric scale, multiplied in int32
        (`torch._int_mm`) and scaled back: x W^T ~ (s_x q_x)(s_w q_w)^T."""

        def __init__(self, linear: torch.nn.Linear) -> None:
            super().__init__()
            quantized, scale = symmetric_int8(linear.weight.detach().float())
            self.in_features, self.out_features = linear.in_features, linear.out_features
            self.register_buffer("weight_t", quantized.t().contiguous())  # (in, out), as _int_mm takes it
            self.register_buffer("weight_scale", scale[:, 0])
            bias = linear.bias.detach().float() if linear.bias is not None else torch.zeros(self.out_features)
            self.register_buffer("bias", bias)

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            rows = hidden.reshape(-1, self.in_features)
            if rows.shape[0] <= ROWWISE_BLOCK_ROWS:
                output = self._product(rows)
            else:  # Rows are independent: in blocks that stay in the caches, the same values.
                output = rows.new_empty((rows.shape[0], self.out_features))
                for start in range(0, rows.shape[0], ROWWISE_BLOCK_ROWS):
                    output[start : start + ROWWISE_BLOCK_ROWS] = self._product(rows[start : start + ROWWISE_BLOCK_ROWS])
            return output.reshape(*hidden.shape[:-1], self.out_features)

        def _product(self, rows: torch.Tensor) -> torch.Tensor:
            quantized, scale = symmetric_int8(rows)
            return torch.addcmul(self.bias, int8_product(quantized, self.weight_t), scale * self.weight_scale)

    return RowwiseInt8Linear


# float32 holds every integer up to 2**24: a sum of up to this many products of int8 values in
# [-127, 127] (1024 * 127**2 < 2**24) is exact in float32, in any order of the sums.
EXACT_FLOAT_FEATURES = 1024


def int8_product(rows: Any, weight_t: Any) -> Any:
    """rows @ weight_t in int32 (int8 rows (n, in) and weight (in, out), values in [-127, 127]):
    `torch._int_mm`, or where this CPU does that slowly, float32 products over blocks of at most
    EXACT_FLOAT_FEATURES features, each exact, added in int32. The same integers either way. torch's
    CPU integer product has fast kernels for AVX-512 VNNI (and AMX); on AVX2 it took 50 times as
    long as the float32 product of the same shape."""
    import torch

    return torch._int_mm(rows, weight_t) if int_mm_is_fast() else int8_product_in_float32(rows, weight_t)


def int8_product_in_float32(rows: Any, weight_t: Any) -> Any:
    """`torch._int_mm(rows, weight_t)` from float32 products, exact (`int8_product`)."""
    import torch

    total = None
    for start in range(0, rows.shape[1], EXACT_FLOAT_FEATURES):
        block = slice(start, start + EXACT_FLOAT_FEATURES)
        part = torch.mm(rows[:, block].float(), weight_t[block].float()).to(torch.int32)
        total = part if total is None else total.add_(part)
    return total


@functools.lru_cache(maxsize=1)
def int_mm_is_fast() -> bool:
    """Whether `torch._int_mm` takes at most as long as the exact float32 products in its place,
    measured once per process (when an int8 model loads; under 0.2 s) on 128 frames by a
    whisper-base weight. The choice changes no value, only the time."""
    import torch

    from whosaid.recognition.kernels.products import _fastest_times

    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(-127, 128, (128, 512), generator=generator, dtype=torch.int8)
    weight_t = torch.randint(-127, 128, (512, 512), generator=generator, dtype=torch.int8)
    integer, exact_float = _fastest_times(
        [lambda: torch._int_mm(rows, weight_t), lambda: int8_product_in_float32(rows, weight_t)], rounds=3
    )
    return integer <= exact_float


def prepack_encoder_linears(model: Any) -> None:
    """On CPU (float32), give the encoder's linear layers weights laid out once for their product,
    in place: a half-precision copy where half precision holds the weight exactly (Whisper's own
    checkpoints), else a copy packed for oneDNN, whose GEMM beats the default path at the 1500
    frames a window multiplies by every weight. Outputs differ by float rounding only. Measured:
    benchmarks/CHANGELOG.md, "Numbers behind the code's choices"."""
    from whosaid.recognition.kernels.products import half_products_available, onednn_available

    if not (half_products_available() or onednn_available()):
        logger.info("neither half-precision nor oneDNN products here; the encoder runs unpacked")
        return
    replace_encoder_linears(model, _packed_linear_class())


@functools.lru_cache(maxsize=1)
def _packed_linear_class() -> type:
    import torch

    from whosaid.recognition.kernels.products import HalfWeights, onednn_available, onednn_linear, pack_for_onednn

    # The frames of one 30 s window (1500), the rows the encoder multiplies at a time on CPU.
    window_frames = int(WHISPER_WINDOW_S * WHISPER_FRAMES_PER_S)

    class PackedLinear(torch.nn.Module):
        """A linear layer whose weight is multiplied from a copy laid out for its product once:
        exact half precision (`HalfWeights`) or packed for oneDNN (the original is let go)."""

        def __init__(self, linear: torch.nn.Linear) -> None:
            super().__init__()
            self.in_features, self.out_features = linear.in_features, linear.out_features
            weight = linear.weight.detach()
            self.bias = None if linear.bias is None else linear.bias.detach()
            self.half = HalfWeights.of(weight, self.bias)
            self.packed = None
            if self.half is None and onednn_available():
                self.packed = pack_for_onednn(weight, window_frames)
            self.weight = weight if self.half is None and self.packed is None else None

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            if self.half is not None:
                return self.half(hidden)
            if self.packed is not None:
                return onednn_linear(hidden, self.packed, self.bias)
            return torch.nn.functional.linear(hidden, self.weight, self.bias)

    return PackedLinear


def page_in_weights(model: Any) -> None:
    """Read every CPU weight of `model` once, now (weights on other devices are left alone).
    `from_pretrained` leaves a safetensors checkpoint's tensors mapped from the file, read from
    disk as a forward pass first touches them: without this the first request pays those page
    faults, and the model's memory shows up while it runs rather than at start-up. The pages stay
    the file's (shared with other processes that map it, nothing is copied)."""
    import torch

    with torch.inference_mode():
        for tensor in list(model.parameters()) + list(model.buffers()):
            # oneDNN-packed copies (not strided) are made in memory; the file's pages are the rest.
            on_cpu = tensor.device.type == "cpu" and tensor.layout == torch.strided
            if on_cpu and tensor.is_floating_point() and tensor.numel():
                tensor.detach().amax()


def load_whisper(settings: ModelSettings) -> tuple[Any, Any]:
    """The ASR model (on its device, in eval mode, quantized or with packed encoder weights as
    `settings` say) and its processor."""
    import torch
    from transformers import AutoProcessor, WhisperForConditionalGeneration

    name = settings.asr_model
    # First, outside the loading try below: DEVICE=cuda on a machine where torch cannot use
    # the GPU refuses to start with the versions and the fix, not as "cannot load the model".
    device = settings.resolved_device()
    check_quantization(settings)
    try:
        processor = AutoProcessor.from_pretrained(name, token=settings.token())
        model = WhisperForConditionalGeneration.from_pretrained(name, **load_kwargs(settings))
    except Exception as error:  # noqa: BLE001
        raise ModelLoadError(
            f"cannot load the ASR model {name!r}: {error}. ASR_MODEL must name a Whisper "
            "model on the Hub (e.g. openai/whisper-large-v3) or a local directory"
        ) from error
    model = model.to(device).eval()
    if settings.quantization == "int8":
        quantize_int8(model)
    elif model.device.type == "cpu" and model.dtype == torch.float32:
        # The decoder's products are chosen (and measured) as its step is built, with the model.
        prepack_encoder_linears(model)
    page_in_weights(model)
    return model, processor


def _candidate_whisper_class() -> type:
    """A full Whisper model used as an assistant must draft candidates with plain greedy
    `GenerationMixin.generate`. Whisper's own `generate` re-runs its timestamp and prompt
    machinery inside the candidate generator, which breaks timestamped output;
    the main model still verifies every token, so the result stays exactly greedy."""
    from transformers import GenerationMixin, WhisperForConditionalGeneration

    class CandidateWhisper(WhisperForConditionalGeneration):
        def generate(self, *args: Any, **kwargs: Any) -> Any:
            return GenerationMixin.generate(self, *args, **kwargs)

    return CandidateWhisper


def load_assistant(name: str, main_model: Any, settings: ModelSettings) -> Any:
    """Load the speculative-decoding assistant.

    distil-whisper checkpoints keep the teacher's encoder, so their decoder can read the main
    model's encoder output: same width, layer count and mel bins load as a decoder-only
    `WhisperForCausalLM` (the encoder runs once). Any other Whisper with the same vocabulary is
    used whole, encoder included.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, WhisperForConditionalGeneration

    try:
        config = AutoConfig.from_pretrained(name, token=settings.token())
    except Exception as error:  # noqa: BLE001 - hub and file errors come in many types
        raise ModelLoadError(f"cannot load the assistant model {name!r}: {error}") from error
    main_config = main_model.config
    if config.model_type != "whisper":
        raise ModelLoadError(
            f"the assistant model {name!r} is a {config.model_type!r} model; speculative decoding "
            "needs a Whisper model (e.g. distil-whisper/distil-large-v3 for whisper-large-v3)"
        )
    if config.vocab_size != main_config.vocab_size:
        raise ModelLoadError(
            f"the assistant model {name!r} has a vocabulary of {config.vocab_size} tokens but the "
            f"main model has {main_config.vocab_size}: speculative decoding needs the same "
            "tokenizer (an English-only model cannot assist a multilingual one)"
        )
    shares_encoder = all(
        getattr(config, field) == getattr(main_config, field) for field in ("d_model", "encoder_layers", "num_mel_bins")
    )
    try:
        if shares_encoder:
            assistant = AutoModelForCausalLM.from_pretrained(name, **load_kwargs(settings))
        else:
            assistant = WhisperForConditionalGeneration.from_pretrained(name, **load_kwargs(settings))
            assistant.__class__ = _candidate_whisper_class()
    except Exception as error:  # noqa: BLE001
        raise ModelLoadError(f"cannot load the assistant model {name!r}: {error}") from error
    assistant = assistant.to(settings.resolved_device()).eval()
    page_in_weights(assistant)
    return assistant
