"""`python -m whosaid convert SOURCE [SOURCE ...] --output DIR [--dtype D] [--overwrite]`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from whosaid.convert.errors import ConversionError
from whosaid.convert.writer import OUTPUT_DTYPES, convert_ctranslate2_whisper


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`python -m whosaid convert SOURCE [SOURCE ...] --output DIR [--dtype D] [--overwrite]`."""
    parser.add_argument(
        "source",
        nargs="+",
        type=Path,
        help="CTranslate2 Whisper checkpoint directory, or the directories of its split parts",
    )
    parser.add_argument(
        "--output", "-o", type=Path, required=True, help="transformers model directory to write"
    )
    parser.add_argument(
        "--dtype", choices=OUTPUT_DTYPES, default="float32", help="weights dtype (default float32)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a non-empty output directory"
    )


def run(args: argparse.Namespace) -> int:
    """Convert and print a one-line summary; a ConversionError goes to stderr, exit status 1."""
    started = time.perf_counter()
    try:
        output = convert_ctranslate2_whisper(
            args.source, args.output, dtype=args.dtype, overwrite=args.overwrite
        )
    except ConversionError as e:
        print(f"whosaid convert: {e}", file=sys.stderr)
        return 1
    elapsed_s = time.perf_counter() - started
    sources = " + ".join(map(str, args.source))
    print(f"Converted {sources} -> {output} ({args.dtype}, {elapsed_s:.1f} s)")
    return 0
