"""What multiplying from exact half-precision copies of the weights buys on CPU in float32
(whosaid.recognition.kernels.products.HalfWeights, used for every weight half precision holds exactly:
all of Whisper's released checkpoints).

1. Each weight shape of the decoder's step at 1, 4 and 8 rows: the half product against the
   float32 product the step takes without it (the one `cpu_products` measures fastest here), on as
   many copies of the weight as fill 64 MB, so that each product reads its weight from memory as in
   a step; the two interleaved, median of `--repeats`.
2. The greedy decoding of pyannote's sample (one 30 s window; and the same window four times, a
   batch of 4 rows), the step built with and without the half copies, interleaved, median of
   `--repeats`, and whether the tokens are the same.

    python -m benchmarks.asr.half_weights                 # whisper-base, 2 threads
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from benchmarks.common.timing import interleaved_medians
from benchmarks.server.local_server import REPO_ROOT

COPIES_BYTES = 64 * 2**20


@contextmanager
def without_half_weights() -> Iterator[None]:
    """Products built inside take no half copy (the step as it multiplies other weights)."""
    from whosaid.recognition.kernels import products

    original = products.HalfWeights.of
    products.HalfWeights.of = classmethod(lambda cls, weight, bias: None)  # type: ignore[method-assign]
    try:
        yield
    finally:
        products.HalfWeights.of = original  # type: ignore[method-assign]


def products_table(step: Any, repeats: int) -> None:
    import torch

    from whosaid.recognition.kernels.products import HalfWeights, Product, cpu_products

    shapes = sorted({tuple(product.weight.shape) for product in step_products(step)})
    print("| weight (out x in) | rows | half copy ms | float32 ms (its product) | half / float32 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    generator = torch.Generator().manual_seed(0)
    for shape in shapes:
        copies = max(1, COPIES_BYTES // (4 * shape[0] * shape[1]))
        weights = [(torch.randn(*shape, generator=generator) * 0.05).half().float() for _ in range(copies)]
        halves = [HalfWeights.of(weight, None) for weight in weights]
        measured = cpu_products([shape])
        floats = [Product(weight, None, measured) for weight in weights]
        for product in floats:
            product.use(measured)
        for rows in (1, 4, 8):
            hidden = torch.randn(rows, 1, shape[1], generator=generator)
            with torch.inference_mode():
                times = interleaved_medians({"half": each(halves, hidden), "float32": each(floats, hidden)}, repeats)
            kind = "one row in blocks" if rows == 1 and measured.one_row_in_blocks else "plain"
            if rows > 1:
                kind = measured.for_several_rows(shape, rows)
            half_ms, float_ms = 1e3 * times["half"] / copies, 1e3 * times["float32"] / copies
            print(
                f"| {shape[0]} x {shape[1]} | {rows} | {half_ms:.3f} | {float_ms:.3f} ({kind}) | "
                f"{half_ms / float_ms:.2f} |"
            )


def each(functions: list[Any], hidden: Any) -> Callable[[], None]:
    return lambda: [function(hidden) for function in functions]


def decoding(decoder: Any, states: Any, prompt: list[int], tokens: dict[str, Any], name: str) -> Callable[[], None]:
    """One greedy decoding of `states`; its tokens kept in `tokens[name]`."""

    def run() -> None:
        tokens[name] = [result.tokens for result in decoder.decode(states, prompt)]

    return run


def step_products(step: Any) -> list[Any]:
    from whosaid.recognition.kernels.products import Product

    found = [product for plan in step.plans for product in plan.products()]
    return found + ([step.output] if isinstance(step.output, Product) else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "whisper-base"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    import torch

    from benchmarks.common.clips import build_clip
    from whosaid.config import ModelSettings
    from whosaid.recognition.greedy import GreedyWhisperDecoder
    from whosaid.recognition.recognizer import SpeechRecognizer

    torch.set_num_threads(args.threads)
    recognizer = SpeechRecognizer.from_settings(ModelSettings(asr_model=args.model, diarization_model=None))
    with_halves = recognizer.decoder
    with without_half_weights():
        without = GreedyWhisperDecoder(recognizer.model, recognizer.fallback)
    halves = sum(product.half is not None for product in step_products(with_halves.step))
    print(f"{args.model}: {halves} of {len(step_products(with_halves.step))} decoder weights have a half copy")
    products_table(with_halves.step, args.repeats)

    clip = build_clip("30")
    window = recognizer.vad.windows(clip.samples, 30.0)[0]
    features = recognizer.features([window.samples(clip.samples)])
    prompt = with_halves.prompt(None, "transcribe")
    print("\n| decoding | rows | with half copies s | float32 weights s | same tokens |")
    print("| --- | ---: | ---: | ---: | --- |")
    with torch.inference_mode():
        states = recognizer.encode(features)
        for rows in (1, 4):
            batch = states.expand(rows, -1, -1).contiguous()
            tokens: dict[str, Any] = {}
            runs = {
                "half": decoding(with_halves, batch, prompt, tokens, "half"),
                "float32": decoding(without, batch, prompt, tokens, "float32"),
            }
            times = interleaved_medians(runs, args.repeats)
            print(
                f"| greedy, one 30 s window x {rows} | {rows} | {times['half']:.3f} | "
                f"{times['float32']:.3f} | {tokens['half'] == tokens['float32']} |"
            )


if __name__ == "__main__":
    main()
