"""What the oneDNN-packed encoder weights (whosaid.recognition.loading.prepack_encoder_linears, used on
CPU in float32) cost and buy: RSS after loading whisper-base with and without them (each in a
fresh process), and one window's encoder time, the two models interleaved, as the recognizer
runs it on CPU (one window per pass).

    python -m benchmarks.asr.packed_encoder            # whisper-base, 2 threads, median of 5
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys

from benchmarks.common.timing import interleaved_medians
from benchmarks.server.local_server import REPO_ROOT


def rss_after_load(model: str, packed: bool) -> float:
    """VmRSS of a fresh process that loaded `model` as the recognizer does, in MiB."""
    code = (
        "import os, torch\n"
        "from transformers import WhisperForConditionalGeneration\n"
        "from whosaid.recognition.loading import prepack_encoder_linears\n"
        "from benchmarks.server.local_server import memory_mb\n"
        f"m = WhisperForConditionalGeneration.from_pretrained({model!r}).eval()\n"
        + ("prepack_encoder_linears(m)\n" if packed else "")
        + "import gc; gc.collect(); print(memory_mb(os.getpid())['VmRSS'])\n"
    )
    output = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return float(output.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "whisper-base"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch
    from transformers import WhisperForConditionalGeneration

    from whosaid.recognition.loading import prepack_encoder_linears

    for packed in (True, False):
        print(f"RSS after load, {'packed' if packed else 'unpacked'}: {rss_after_load(args.model, packed):.0f} MiB")
    torch.set_num_threads(args.threads)
    models = {
        name: WhisperForConditionalGeneration.from_pretrained(args.model).eval() for name in ("packed", "unpacked")
    }
    prepack_encoder_linears(models["packed"])
    features = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        runs = {name: functools.partial(model.get_encoder(), features) for name, model in models.items()}
        medians = interleaved_medians(runs, args.repeats)
    for name, median_s in medians.items():
        print(f"encoder, one window, {name}: median {median_s:.2f} s of {args.repeats}")


if __name__ == "__main__":
    main()
