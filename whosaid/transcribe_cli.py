"""`whosaid transcribe FILE...`: the core on local files, without a server.

Output formats: json (the full transcript, as POST / answers), verbose_json, diarized_json,
text, srt, vtt, rttm (the last two of those need a diarization model). One file goes to stdout
as is; several go to stdout as JSON Lines (JSON formats, each object with a "file" key) or
behind `==> FILE <==` headers (text formats), or with --output-dir to FILE_STEM.<ext> each.

Exit status: 0 when every file was transcribed, 1 when a file or the models failed, 2 for
invalid arguments. Heavy imports stay inside `run`: the CLI imports this module to build its
parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from whosaid.model_options import add_model_arguments

if TYPE_CHECKING:
    from whosaid.results import Transcript

FORMAT_SUFFIXES = {
    "json": ".json",
    "verbose_json": ".verbose.json",
    "diarized_json": ".diarized.json",
    "text": ".txt",
    "srt": ".srt",
    "vtt": ".vtt",
    "rttm": ".rttm",
}
JSON_FORMATS = ("json", "verbose_json", "diarized_json")
#: Inputs larger than this in total get a progress bar even when there is only one file
#: (about ten minutes of 128 kbit/s audio, or five of 16 kHz 16-bit WAV).
LONG_INPUT_BYTES = 10 * 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="audio files")
    parser.add_argument("-f", "--format", default="json", choices=tuple(FORMAT_SUFFIXES), help="output format (default: json)")
    parser.add_argument("-o", "--output-dir", type=Path, help="write FILE_STEM.<ext> here instead of stdout")
    parser.add_argument("--task", choices=("transcribe", "translate"), help="translate: English text from any language")
    parser.add_argument("--language", help="spoken language (code or name); detected when absent")
    parser.add_argument("--batch-size", type=int, help="chunks decoded together on the batched path")
    parser.add_argument("--assisted", choices=("auto", "true", "false"), help="speculative decoding with the assistant")
    parser.add_argument("--chunk-length-s", type=float, help="window length for long audio, at most 30 s")
    parser.add_argument("--num-speakers", type=int, help="exact number of speakers (diarization)")
    parser.add_argument("--min-speakers", type=int, help="lower bound on speakers (diarization)")
    parser.add_argument("--max-speakers", type=int, help="upper bound on speakers (diarization)")
    parser.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from whosaid.audio import load_audio_file
    from whosaid.config import InferenceConfig
    from whosaid.engine import Engine
    from whosaid.errors import InvalidInputError, ModelLoadError, WhosaidError
    from whosaid.formats import DIARIZED_FORMATS
    from whosaid.model_options import model_settings_from_args

    parameters = _parameters(args)
    problem = _check_outputs(args.files, args.output_dir)
    if problem is None:
        try:
            # Checked before the models load, which can take minutes.
            InferenceConfig.from_parameters(parameters)
        except InvalidInputError as error:
            problem = str(error)
    if problem is not None:
        print(f"whosaid transcribe: {problem}", file=sys.stderr)
        return 2
    try:
        settings = model_settings_from_args(args)
        if args.format in DIARIZED_FORMATS and not settings.diarization_model:
            print(
                f"whosaid transcribe: --format {args.format} needs a diarization model "
                "(--diarization-model or DIARIZATION_MODEL)",
                file=sys.stderr,
            )
            return 2
        engine = Engine.from_settings(settings)
        config, warnings = engine.parse_parameters(parameters)
    except WhosaidError as error:
        print(f"whosaid transcribe: {error}", file=sys.stderr)
        return 1 if isinstance(error, ModelLoadError) else 2
    for warning in warnings:
        print(f"whosaid transcribe: warning: {warning}", file=sys.stderr)

    failed = 0
    many = len(args.files) > 1
    progress = tqdm(args.files, unit="file", file=sys.stderr, disable=_progress_disabled(args))
    for path in progress:
        progress.set_postfix_str(path.name)
        try:
            transcript = engine.transcribe(load_audio_file(path), config, warnings=warnings)
        except WhosaidError as error:
            failed += 1
            tqdm.write(f"whosaid transcribe: {path}: {error}", file=sys.stderr)
            continue
        _emit(transcript, path, args.format, args.output_dir, many=many, task=config.task)
    return 1 if failed else 0


def _parameters(args: argparse.Namespace) -> dict[str, Any]:
    values = {
        "task": args.task,
        "language": args.language,
        "batch_size": args.batch_size,
        "assisted": args.assisted,
        "chunk_length_s": args.chunk_length_s,
        "num_speakers": args.num_speakers,
        "min_speakers": args.min_speakers,
        "max_speakers": args.max_speakers,
    }
    return {name: value for name, value in values.items() if value is not None}


def _check_outputs(files: list[Path], output_dir: Optional[Path]) -> Optional[str]:
    if output_dir is None:
        return None
    seen: dict[str, Path] = {}
    for path in files:
        if path.stem in seen:
            return f"{seen[path.stem]} and {path} would both be written as {path.stem}.*; rename one"
        seen[path.stem] = path
    return None


def _progress_disabled(args: argparse.Namespace) -> Optional[bool]:
    """None lets tqdm decide (shown on a terminal only); short single jobs never show one."""
    if args.no_progress:
        return True
    total_bytes = sum(path.stat().st_size for path in args.files if path.is_file())
    return None if len(args.files) > 1 or total_bytes > LONG_INPUT_BYTES else True


def render_output(transcript: "Transcript", output_format: str, *, task: str, file_id: str) -> str:
    """The transcript as the CLI writes it: `json` is the full transcript (POST /'s response),
    the other formats are whosaid.formats' (the OpenAI routes')."""
    from whosaid.formats import render

    if output_format == "json":
        return json.dumps(transcript.to_dict(), ensure_ascii=False, indent=2) + "\n"
    rendered = render(transcript, output_format, task=task, file_id=file_id)  # type: ignore[arg-type]
    if isinstance(rendered, str):
        return rendered
    return rendered.model_dump_json(indent=2) + "\n"


def _emit(
    transcript: "Transcript", path: Path, output_format: str, output_dir: Optional[Path], *, many: bool, task: str
) -> None:
    text = render_output(transcript, output_format, task=task, file_id=path.stem)
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / f"{path.stem}{FORMAT_SUFFIXES[output_format]}").write_text(text, encoding="utf-8")
    elif many and output_format in JSON_FORMATS:
        line = {"file": str(path), **json.loads(text)}
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    elif many:
        sys.stdout.write(f"==> {path} <==\n{text}\n")
    else:
        sys.stdout.write(text)
    sys.stdout.flush()
