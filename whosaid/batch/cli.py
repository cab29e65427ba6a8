"""`whosaid batch INPUT... --output DIR`: an archive on Ray Data, on this machine or a cluster.

Inputs are files, folders, globs or manifests (CSV, JSONL or Parquet with a `path` column and
optional per-file parameters), local or behind any URI pyarrow reads (`s3://`, `gs://`). Each
recording gets one output in DIR (the `-f` formats of `whosaid transcribe`, rendered the same
way), and DIR gets a results table, `results.parquet` and `results.jsonl`: path, status,
duration, language, speakers, timings and, for a failed recording, its error. A recording that
cannot be read or decoded is a failed row, never a failed job. A second run skips what the table
says is done; a run killed mid-way keeps every output and row it wrote (both are written
atomically).

Exit status: 0 when every recording is done, 1 when one failed or the models failed to load, 2
for invalid arguments. Ray is imported only when a batch runs.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

from whosaid.cli.model_options import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from whosaid.cli.transcribe import FORMAT_CHOICES, add_request_arguments

    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="audio files, folders, globs (quoted), or manifests (.csv, .jsonl, .parquet with a 'path' "
        "column); local paths or URIs such as s3://bucket/calls/",
    )
    parser.add_argument("-o", "--output", required=True, help="output folder, local or a URI (s3://...)")
    parser.add_argument("-f", "--format", default="json", choices=FORMAT_CHOICES, help="output format (default: json)")
    parser.add_argument(
        "--html-audio",
        choices=("link", "embed"),
        default="link",
        help="-f html: link the audio by its path from the page (default), or embed it in the page",
    )
    add_request_arguments(parser, assisted=False)
    parser.add_argument(
        "--voices",
        metavar="DIR",
        help="known speakers from a folder (VOICES_DIR: one clip or folder of clips per speaker), embedded "
        "once per actor; the folder must be readable on every node",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    cluster = parser.add_argument_group("Ray")
    cluster.add_argument(
        "--address",
        help="join an existing Ray cluster: 'auto' (this node's), or ray://HEAD:10001; default: start a local one",
    )
    cluster.add_argument("--actors", type=int, default=1, help="actors, each with its own models (default: 1)")
    cluster.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per actor (default: 1)")
    cluster.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per actor (default: 0)")
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from whosaid.batch import storage
    from whosaid.batch.inputs import InputError, expand_inputs
    from whosaid.batch.pipeline import ClusterOptions, Summary, run_batch
    from whosaid.batch.worker import BatchJob
    from whosaid.cli.model_options import model_settings_from_args
    from whosaid.cli.transcribe import check_model_format, format_task_problem, known_speaker_files, request_parameters
    from whosaid.config import InferenceConfig
    from whosaid.errors import InvalidInputError, InvalidParametersError, ModelLoadError

    def fail(message: str, status: int = 2) -> int:
        print(f"whosaid batch: {message}", file=sys.stderr)
        return status

    if args.actors < 1 or args.num_cpus < 0 or args.num_gpus < 0:
        return fail("--actors must be at least 1, --num-cpus and --num-gpus at least 0")
    parameters = request_parameters(args)
    problem = format_task_problem(args.format, parameters)
    if problem is not None:
        return fail(problem)
    try:
        known = known_speaker_files(args.speaker, None)
        if known:
            parameters["known_speakers"] = {name: base64.b64encode(p.read_bytes()).decode("ascii") for name, p in known}
        if args.voices is not None and not Path(args.voices).is_dir():
            raise ValueError(f"--voices {args.voices} is not a directory")
        InferenceConfig.from_parameters(parameters)
    except (ValueError, OSError, InvalidInputError) as error:
        return fail(str(error))
    warnings: list[str] = []
    try:
        recordings = expand_inputs(args.inputs, warnings=warnings)
    except InputError as error:
        return fail(str(error))
    for warning in warnings:
        print(f"whosaid batch: warning: {warning}", file=sys.stderr)
    try:
        settings = model_settings_from_args(args)
        if args.voices is not None:
            settings = settings.model_copy(update={"voices_dir": str(Path(args.voices).resolve())})
    except ModelLoadError as error:
        return fail(str(error), 1)
    try:
        check_model_format(args.format, settings)
    except InvalidParametersError as error:
        return fail(str(error))
    if (parameters.get("known_speakers") or args.voices) and settings.diarization_model != "builtin":
        return fail("--speaker and --voices need the built-in diarizer (--diarization-model builtin)")

    job = BatchJob(
        model_settings=settings,
        output_dir=storage.normalise(args.output),
        output_format=args.format,
        parameters=parameters,
        html_audio=args.html_audio,
    )
    options = ClusterOptions(
        address=args.address,
        actors=args.actors,
        num_cpus=args.num_cpus,
        num_gpus=args.num_gpus,
        progress=not args.no_progress,
    )

    def report(row: dict) -> None:
        if row["status"] != "ok":
            print(f"whosaid batch: {row['path']}: {row['error']}", file=sys.stderr)

    try:
        summary: Summary = run_batch(recordings, job, options, on_row=report)
    except Exception as error:  # noqa: BLE001 - Ray wraps a worker's failure (models that fail to load)
        return fail(f"the run stopped: {_root_message(error)}", 1)
    print(f"whosaid batch: {summary.describe()}", file=sys.stderr)
    return 1 if summary.failed else 0


def _root_message(error: BaseException) -> str:
    """The message of the whosaid error behind a Ray error (an actor whose models failed to load),
    else the last line of the error's text (Ray's include the remote traceback)."""
    from whosaid.errors import WhosaidError

    seen: set[int] = set()
    current: object = error
    while isinstance(current, BaseException) and id(current) not in seen:
        if isinstance(current, WhosaidError):
            return str(current)
        seen.add(id(current))
        current = getattr(current, "cause", None) or current.__cause__
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
