"""`whosaid transcribe FILE|DIR...`: the core on local files, without a server; with `--url`,
the same files sent to remote endpoints instead (whosaid.cli.remote).

Output formats: json (the full transcript, as POST / answers), verbose_json, diarized_json,
text, srt, vtt, rttm (diarized_json and rttm need a diarization model), html (one page that opens
from disk: who spoke when, the transcript by speaker, the audio linked or embedded). One file goes to stdout
as is; several go to stdout as JSON Lines (JSON formats, each object with a "file" key) or
behind `==> FILE <==` headers (text formats), or with --output-dir to FILE_STEM.<ext> each (the
audio files found under a DIR keep their folders below it). Outputs are written atomically, so
`--resume` skips exactly the files whose output is complete.

Exit status: 0 when every file was transcribed, 1 when a file or the models failed, 2 for
invalid arguments. Heavy imports stay inside `run`: the CLI imports this module to build its
parser.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from whosaid.cli.model_options import add_model_arguments
from whosaid.formats import FORMATS, Rendering, check_format, parameters_for

if TYPE_CHECKING:
    from whosaid.config import ModelSettings
    from whosaid.results import Transcript

#: `--format`'s choices: the JSON formats first (json, the full transcript, is the default).
FORMAT_CHOICES = tuple(sorted(FORMATS, key=lambda name: not FORMATS[name].is_json))
#: Files taken from a DIR argument (containers PyAV's FFmpeg decodes).
AUDIO_SUFFIXES = frozenset(
    {".wav", ".flac", ".mp3", ".ogg", ".oga", ".opus", ".m4a", ".mp4", ".aac", ".webm"}
    | {".mka", ".mkv", ".mov", ".wma", ".aif", ".aiff"}
)
#: Inputs larger than this in total get a progress bar even when there is only one file
#: (about ten minutes of 128 kbit/s audio, or five of 16 kHz 16-bit WAV).
LONG_INPUT_BYTES = 10 * 1024 * 1024
#: How much of the latest text the progress bar shows beside the file's name.
PROGRESS_TEXT_CHARS = 48


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files", nargs="+", type=Path, metavar="FILE|DIR", help="audio files, or folders searched for audio files"
    )
    parser.add_argument(
        "-f", "--format", default="json", choices=FORMAT_CHOICES, help="output format (default: json)"
    )
    parser.add_argument(
        "--html-audio",
        choices=("link", "embed"),
        default="link",
        help="-f html: link the audio by its path from the page (default), or embed it in the page",
    )
    parser.add_argument("-o", "--output-dir", type=Path, help="write FILE_STEM.<ext> here instead of stdout")
    add_request_arguments(parser, assisted=True)
    parser.add_argument(
        "--voices", type=Path, metavar="DIR", help="known speakers from a folder: one clip per speaker, stem = name"
    )
    parser.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    parser.add_argument("--resume", action="store_true", help="skip files whose output exists (needs --output-dir)")
    remote = parser.add_argument_group("remote endpoints (instead of local models)")
    remote.add_argument(
        "--url",
        action="append",
        default=[],
        help="endpoint base URL: this server, or an Inference Endpoint; repeat for several replicas "
        "(round-robin). Needs --output-dir",
    )
    remote.add_argument(
        "--api-key",
        default=os.environ.get("WHOSAID_API_KEY"),
        help="bearer token: the server's API_KEY, or a Hugging Face token for an Inference Endpoint "
        "(default: $WHOSAID_API_KEY)",
    )
    remote.add_argument("-j", "--jobs", type=int, default=4, help="files in flight at once (default: 4)")
    remote.add_argument(
        "--retries", type=int, default=3, help="retries of a file after connection errors or 5xx (default: 3)"
    )
    remote.add_argument(
        "--max-wait-s",
        type=float,
        default=900.0,
        help="longest a file waits in total on busy answers, 429/503 (default: 900)",
    )
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from whosaid.cli.model_options import model_settings_from_args
    from whosaid.config import InferenceConfig
    from whosaid.engine import Engine
    from whosaid.errors import InvalidInputError, ModelLoadError, WhosaidError

    parameters, problem = request_parameters(args), None
    try:
        known = known_speaker_files(args.speaker, args.voices)
        if known:
            parameters["known_speakers"] = {name: base64.b64encode(p.read_bytes()).decode("ascii") for name, p in known}
    except (ValueError, OSError) as error:
        print(f"whosaid transcribe: {error}", file=sys.stderr)
        return 2
    names, problem = expand_inputs(args.files)
    args.files, args.output_names = list(names), names
    if problem is None:
        problem = _check_outputs(names, args.output_dir)
    if problem is None and args.resume and args.output_dir is None:
        problem = "--resume needs --output-dir: it skips the files whose output is there"
    if problem is None:
        problem = format_task_problem(args.format, parameters)
    if problem is None and args.url:
        problem = _check_remote_arguments(args)
    if problem is None:
        try:
            # Checked before the models load, which can take minutes.
            InferenceConfig.from_parameters(parameters)
        except InvalidInputError as error:
            problem = str(error)
    if problem is not None:
        print(f"whosaid transcribe: {problem}", file=sys.stderr)
        return 2
    if args.url:
        return _run_remote(args, parameters)
    parameters = parameters_for(args.format, parameters)
    try:
        settings = model_settings_from_args(args)
        check_model_format(args.format, settings)
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
        if args.resume and output_path(args.output_names[path], args.output_dir, args.format).exists():
            continue
        listener = None if progress.disable else _ProgressListener(text_progress(progress, path.name))
        try:
            # The engine's one job: memory handed back when it fails, and after long audio.
            transcript = engine.run_job(path, config, warnings=warnings, listener=listener)
        except WhosaidError as error:
            failed += 1
            tqdm.write(f"whosaid transcribe: {path}: {error}", file=sys.stderr)
            continue
        _emit(transcript, path, args, many=many, task=config.task)
    return 1 if failed else 0


def check_model_format(output_format: str, settings: "ModelSettings") -> None:
    """`--format` with these models (`transcribe`, `batch`): InvalidParametersError for a format
    that needs a diarization model when none is named."""
    check_format(
        output_format,
        has_diarizer=lambda: bool(settings.diarization_model),
        option="--format ",
        hint=" (--diarization-model or DIARIZATION_MODEL)",
    )


def format_task_problem(output_format: str, parameters: dict[str, Any]) -> Optional[str]:
    """Why `--format` cannot go with the request's task (a translation has no speakers' turns, as
    /v1/audio/translations refuses diarized_json), or None."""
    if parameters.get("task") == "translate" and not FORMATS[output_format].translatable:
        return f"--format {output_format} is a transcription format: it cannot go with --task translate"
    return None


def _check_remote_arguments(args: argparse.Namespace) -> Optional[str]:
    if args.output_dir is None:
        return "--url writes one output per file: give --output-dir"
    if args.jobs < 1 or args.retries < 0 or args.max_wait_s < 0:
        return "--jobs must be at least 1, --retries and --max-wait-s at least 0"
    bad = [url for url in args.url if not url.startswith(("http://", "https://"))]
    if bad:
        return f"--url {bad[0]}: give an http:// or https:// URL"
    return None


def _run_remote(args: argparse.Namespace, parameters: dict[str, Any]) -> int:
    from tqdm import tqdm

    from whosaid.cli.remote import FileJob, FileOutcome, RemoteOptions, RemoteTranscriber

    options = RemoteOptions(
        urls=tuple(_base_url(url) for url in args.url),
        output_format=args.format,
        task=args.task or "transcribe",
        parameters=parameters,
        api_key=args.api_key or None,
        concurrency=args.jobs,
        retries=args.retries,
        max_wait_s=args.max_wait_s,
        html_audio=args.html_audio,
    )
    jobs = [FileJob(path, output_path(name, args.output_dir, args.format)) for path, name in args.output_names.items()]
    progress = tqdm(total=len(jobs), unit="file", file=sys.stderr, disable=True if args.no_progress else None)
    counts = {"failed": 0, "retried": 0}

    def report(outcome: FileOutcome) -> None:
        if outcome.error is not None:
            counts["failed"] += 1
            tqdm.write(f"whosaid transcribe: {outcome.job.audio_path}: {outcome.error}", file=sys.stderr)
        counts["retried"] += outcome.retries > 0
        progress.set_postfix(counts, refresh=False)
        progress.update(1)

    summary = RemoteTranscriber(options).run(jobs, resume=args.resume, on_outcome=report)
    progress.close()
    print(f"whosaid transcribe: {summary.describe()}", file=sys.stderr)
    return 1 if summary.failed else 0


def _base_url(url: str) -> str:
    """The endpoint's root: a trailing slash or an OpenAI-style /v1 suffix is dropped."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def expand_inputs(paths: list[Path]) -> tuple[dict[Path, Path], Optional[str]]:
    """FILE|DIR arguments as {audio file: its output name without suffix}: a file's stem, or for
    the audio files under a folder (sorted), their path below it, so that same-named files in
    different subfolders stay apart."""
    names: dict[Path, Path] = {}
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
            if not found:
                return names, f"{path} holds no audio file ({', '.join(sorted(AUDIO_SUFFIXES))})"
            names.update((file, file.relative_to(path).with_name(file.stem)) for file in found)
        else:
            names[path] = Path(path.stem)
    return names, None


def output_path(output_name: Path, output_dir: Path, output_format: str) -> Path:
    return output_dir / output_name.parent / f"{output_name.name}{FORMATS[output_format].suffix}"


def add_request_arguments(parser: argparse.ArgumentParser, *, assisted: bool) -> None:
    """The request's options as flags, shared by `transcribe` and `batch` (`assisted`: whether
    this command takes --assisted): one per `InferenceConfig` field that the CLI takes
    (whosaid.config.request_options), typed and described from the field; `request_parameters`
    reads them back."""
    from whosaid.config import request_options

    for option in request_options():
        if option.cli_flag is None or (option.name == "assisted" and not assisted):
            continue
        help_text = option.help.replace("%", "%%")
        if option.kind == "flag":
            parser.add_argument(option.cli_flag, dest=option.name, action="store_const", const=True, help=help_text)
        elif option.kind == "list":
            parser.add_argument(option.cli_flag, dest=option.name, action="append", help=help_text)
        elif option.kind == "choice":
            parser.add_argument(option.cli_flag, dest=option.name, choices=option.choices, help=help_text)
        else:
            converter = {"int": int, "float": float, "str": str}[option.kind]
            parser.add_argument(option.cli_flag, dest=option.name, type=converter, help=help_text)
    parser.add_argument(
        "--speaker",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="a known speaker: label their speech NAME, from a clip of their voice (repeatable; built-in diarizer)",
    )


def request_parameters(args: argparse.Namespace) -> dict[str, Any]:
    """The request parameters `add_request_arguments`' flags set, the unset ones left out."""
    from whosaid.config import request_options

    values = {option.name: getattr(args, option.name, None) for option in request_options() if option.cli_flag}
    return {name: value for name, value in values.items() if value is not None}


def known_speaker_files(speakers: list[str], voices: Optional[Path]) -> list[tuple[str, Path]]:
    """(name, clip) of each --speaker NAME=FILE, then of each clip in --voices DIR (its stem is the name)."""
    from whosaid.speakers.known import AUDIO_SUFFIXES

    known = []
    for value in speakers:
        name, separator, file = value.partition("=")
        if not separator or not name.strip() or not file:
            raise ValueError(f"--speaker takes NAME=FILE, not {value!r}")
        known.append((name.strip(), Path(file)))
    if voices is not None:
        if not voices.is_dir():
            raise ValueError(f"--voices {voices} is not a directory")
        clips = sorted(p for p in voices.iterdir() if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
        if not clips:
            raise ValueError(f"--voices {voices} holds no audio clip ({', '.join(AUDIO_SUFFIXES)})")
        known.extend((clip.stem, clip) for clip in clips)
    from whosaid.config import check_speaker_names

    check_speaker_names([name for name, _ in known])
    for name, path in known:
        if not path.is_file():
            raise ValueError(f"known speaker {name!r}: no such file {path}")
    return known


def _check_outputs(names: dict[Path, Path], output_dir: Optional[Path]) -> Optional[str]:
    if output_dir is None:
        return None
    seen: dict[Path, Path] = {}
    for path, name in names.items():
        if name in seen:
            return f"{seen[name]} and {path} would both be written as {name}.*; rename one"
        seen[name] = path
    return None


def text_progress(progress: Any, name: str) -> Callable[[str], None]:
    """Shows the end of a file's text on its progress bar as windows are decoded: the first
    window is decoded alone, so a long file shows words after one window, not at its end."""
    shown = ""

    def on_text(delta: str) -> None:
        nonlocal shown
        shown = " ".join((shown + delta).split())[-PROGRESS_TEXT_CHARS:]
        progress.set_postfix_str(f"{name}: ...{shown}")

    return on_text


class _ProgressListener:
    """`Engine.run_job`'s listener for a file on the progress bar: its text (`text_progress`)."""

    def __init__(self, on_text: Callable[[str], None]) -> None:
        self._on_text = on_text

    def accepted(self, duration_s: float) -> None:
        pass

    def text(self, delta: str) -> None:
        self._on_text(delta)


def _progress_disabled(args: argparse.Namespace) -> Optional[bool]:
    """None lets tqdm decide (shown on a terminal only); short single jobs never show one."""
    if args.no_progress:
        return True
    total_bytes = sum(path.stat().st_size for path in args.files if path.is_file())
    return None if len(args.files) > 1 or total_bytes > LONG_INPUT_BYTES else True


def _emit(transcript: "Transcript", path: Path, args: argparse.Namespace, *, many: bool, task: str) -> None:
    output_format = args.format
    audio_src = None
    if FORMATS[output_format].plays_audio:
        from whosaid.ui.view import audio_source

        page_dir = Path()
        if args.output_dir is not None:
            page_dir = output_path(args.output_names[path], args.output_dir, output_format).parent
        relative = Path(os.path.relpath(path, page_dir)).as_posix()
        audio_src = audio_source(path.read_bytes() if args.html_audio == "embed" else b"", relative, args.html_audio)
    text = FORMATS[output_format].file_text(transcript, Rendering(task, path.stem, audio_src))  # type: ignore[arg-type]
    if args.output_dir is not None:
        from whosaid.cli.remote import write_atomically

        write_atomically(output_path(args.output_names[path], args.output_dir, output_format), text)
    elif many and FORMATS[output_format].is_json:
        line = {"file": str(path), **json.loads(text)}
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    elif many:
        sys.stdout.write(f"==> {path} <==\n{text}\n")
    else:
        sys.stdout.write(text)
    sys.stdout.flush()
