"""GPU check of the built-in diarizer: segmentation-3.0 with its shared first convolution against
pyannote's own `Inference` on the same device, then the whole diarizer's DER and time on
pyannote's sample and the ten AMI snippets, one JSON line per check and a table at the end.

    python -m scripts.gpu_diarizer_check                 # CUDA (fails without one)
    python -m scripts.gpu_diarizer_check --device cpu  # the smoke run tests/benchmarks/test_gpu_diarizer_check.py makes

Exit status 1 when the segmentation disagrees with pyannote's or a DER passes its bound (the
bounds tests/core/test_builtin_diarizer.py holds on CPU: AMI aggregated 0.28, the sample 0.06).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from benchmarks.common.scoring import AMI_DIR, new_metric, read_rttm, sample_wav
from benchmarks.diarization.builtin import der

AMI_BOUND = 0.28
SAMPLE_BOUND = 0.06


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--snippets", type=int, default=10, help="how many AMI snippets")
    args = parser.parse_args()

    import torch
    from pyannote.audio import Inference

    from whosaid.audio.loading import load_audio_file
    from whosaid.speaker_hints import SpeakerHints
    from whosaid.speakers.builtin import BuiltinDiarizer

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    print(json.dumps({"torch": torch.__version__, "device": args.device}), flush=True)
    diarizer = BuiltinDiarizer.load(args.device)
    sample = load_audio_file(sample_wav())

    # The shared first convolution against the whole model on every chunk, on this device.
    segmentation = diarizer.segmenter(2.5)
    with torch.inference_mode():
        theirs = Inference(
            diarizer.segmentation_model, duration=10.0, step=2.5, skip_aggregation=True, skip_conversion=True
        )({"waveform": torch.from_numpy(sample.samples)[None], "sample_rate": 16_000}).data
    ours = torch.cat(list(segmentation.scores(torch.from_numpy(sample.samples)))).float().cpu().numpy()
    likely = theirs > -10.0
    agreement = {
        "check": "segmentation",
        "shared_first_convolution": segmentation.shared,
        "max_abs_difference": float(np.abs(ours - theirs)[likely].max()),
        "argmax_agreement": float((ours.argmax(-1) == theirs.argmax(-1)).mean()),
    }
    print(json.dumps(agreement), flush=True)
    failed = agreement["max_abs_difference"] > 1e-2 or agreement["argmax_agreement"] < 0.999

    references = read_rttm(AMI_DIR / "ami-train.rttm")
    files = [("sample", sample, next(iter(read_rttm(sample_wav().with_suffix(".rttm")).values())))]
    files += [
        (path.stem, load_audio_file(path), references[path.stem.removeprefix("ami_")])
        for path in sorted(AMI_DIR.glob("ami_*.wav"))[: args.snippets]
    ]
    diarizer.diarize(sample, SpeakerHints())  # warm-up
    ami = new_metric()
    rows = []
    for name, audio, reference in files:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        started = time.perf_counter()
        diarization = diarizer.diarize(audio, SpeakerHints())
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        error = der(reference, diarization.turns, audio.duration_s, metric=None if name == "sample" else ami)
        row = {
            "check": "diarization",
            "file": name,
            "seconds": round(seconds, 3),
            "der": round(error, 3),
            "speakers": len({turn.speaker for turn in diarization.turns}),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    sample_der = rows[0]["der"]
    ami_der = round(abs(ami), 3) if len(rows) > 1 else None
    failed |= sample_der > SAMPLE_BOUND or (args.snippets == 10 and ami_der is not None and ami_der > AMI_BOUND)
    print("\n| file | seconds | DER | speakers |\n|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['file']} | {row['seconds']} | {row['der']} | {row['speakers']} |")
    print(f"| AMI, aggregated | {sum(r['seconds'] for r in rows[1:]):.2f} | {ami_der} | |")
    print(json.dumps({"check": "summary", "sample_der": sample_der, "ami_der": ami_der, "failed": bool(failed)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
