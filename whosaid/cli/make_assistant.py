"""`whosaid make-assistant`: build a speculative-decoding assistant from a Whisper model's own
decoder (whosaid.assistant.build), optionally tuned on your audio (whosaid.assistant.tune), ready
for ASSISTANT_MODEL=DIR.

    python -m whosaid make-assistant --model models/whisper-base --output models/whisper-base-assistant
    python -m whosaid make-assistant --model models/whisper-base --output DIR --tune recordings/ --steps 200

Exit status: 0 when the assistant was written, 1 when the model or the audio failed, 2 for
invalid arguments. Heavy imports stay inside `run`: the CLI imports this module to build its parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from whosaid.cli.model_options import EMBEDDED_ASR_MODEL_DIR

#: Files --tune picks up from a directory (anything PyAV decodes works when named directly).
AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".webm", ".aac")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=str(EMBEDDED_ASR_MODEL_DIR),
        help="the main Whisper model directory (default: the embedded whisper-base)",
    )
    parser.add_argument("--output", required=True, type=Path, help="directory to write the assistant to")
    parser.add_argument(
        "--decoder-layers",
        default="first,last",
        help=(
            "which of the main model's decoder layers to keep: 'first', 'last' or numbers, "
            "comma-separated (default: first,last, as distil-whisper)"
        ),
    )
    parser.add_argument(
        "--tune", nargs="+", type=Path, metavar="AUDIO", help="audio files or directories to tune the assistant on"
    )
    parser.add_argument("--steps", type=int, default=200, help="tuning steps, one speech window each (default: 200)")
    parser.add_argument("--learning-rate", type=float, default=1e-4, help="tuning learning rate (default: 1e-4)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")


def tuning_files(paths: list[Path]) -> list[Path]:
    """The files named, and the audio files inside the directories named (sorted)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(child for child in path.rglob("*") if child.suffix.lower() in AUDIO_SUFFIXES)
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"--tune {path}: no such file or directory")
    if not files:
        raise FileNotFoundError(f"--tune {' '.join(map(str, paths))}: no audio files ({', '.join(AUDIO_SUFFIXES)})")
    return files


def run(args: argparse.Namespace) -> int:
    from whosaid.assistant.build import make_assistant
    from whosaid.assistant.tune import TuningOptions
    from whosaid.audio.loading import load_audio_file
    from whosaid.errors import WhosaidError

    if args.steps < 1 or args.learning_rate <= 0:
        print("whosaid make-assistant: --steps must be at least 1 and --learning-rate above 0", file=sys.stderr)
        return 2
    if not (Path(args.model) / "config.json").is_file():
        print(
            f"whosaid make-assistant: --model {args.model} is not a transformers Whisper directory (no config.json)",
            file=sys.stderr,
        )
        return 2
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        clips = [load_audio_file(path).samples for path in tuning_files(args.tune)] if args.tune else []
        info = make_assistant(
            args.model,
            args.output,
            decoder_layers=args.decoder_layers,
            tuning_clips=clips,
            tuning=TuningOptions(steps=args.steps, learning_rate=args.learning_rate),
        )
    except (WhosaidError, OSError) as error:  # OSError: unreadable files, a broken model directory
        print(f"whosaid make-assistant: {error}", file=sys.stderr)
        return 2 if isinstance(error, (ValueError, FileNotFoundError)) else 1
    print(json.dumps(info, indent=2))
    print(f"wrote {args.output}: set ASSISTANT_MODEL={args.output} to use it", file=sys.stderr)
    return 0
