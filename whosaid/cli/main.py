"""Command line: `python -m whosaid <command>`. Each command lives in its own module, which
registers its sub-parser here; modules are imported only when their command runs."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

# command name -> (module, one-line help). The module provides `add_arguments(parser)` and
# `run(args) -> int`.
COMMANDS: dict[str, tuple[str, str]] = {
    "batch": ("whosaid.batch.cli", "transcribe (and diarize) an archive on Ray Data, on this machine or a cluster"),
    "convert": ("whosaid.convert.cli", "convert a CTranslate2 (faster-whisper) Whisper checkpoint"),
    "deploy": ("whosaid.deploy.cli", "create and manage the Inference Endpoint"),
    "make-assistant": (
        "whosaid.cli.make_assistant",
        "build a speculative-decoding assistant from a Whisper model's own decoder",
    ),
    "transcribe": ("whosaid.cli.transcribe", "transcribe (and diarize) audio files"),
    "listen": ("whosaid.cli.listen", "live captions with speakers: stream audio to a server's /v1/realtime"),
    "serve": ("whosaid.cli.serve", "run the HTTP server (Inference Endpoints and OpenAI-compatible API)"),
}


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """Every command is listed; only `command`'s module is imported to add its arguments, so one
    command's heavy or broken imports never affect another."""
    parser = argparse.ArgumentParser(prog="whosaid", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(_module=module_name)
        if name == command:
            importlib.import_module(module_name).add_arguments(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((word for word in argv if not word.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
