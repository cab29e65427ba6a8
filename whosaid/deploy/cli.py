"""Create, inspect, update and remove the GPU Inference Endpoint, and upload the handler repo.

Both `python -m whosaid deploy <command>` and `python -m deploy.endpoint <command>` run `run` /
`main` here, so the two entry points cannot drift apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from huggingface_hub import HfApi, InferenceEndpoint
from huggingface_hub import constants as hf_constants

from whosaid import __version__
from whosaid.deploy import api
from whosaid.deploy.errors import DeployError
from whosaid.deploy.handler_repo import PACKAGE_REPO_ROOT, handler_files
from whosaid.deploy.output import describe, note, print_ready
from whosaid.deploy.spec import (
    API_URL_ENV,
    ASR_MODEL_ENV,
    ASSISTANT_MODEL_ENV,
    DEFAULT_ACCELERATOR,
    DEFAULT_ASR_MODEL,
    DEFAULT_INSTANCE_SIZE,
    DEFAULT_INSTANCE_TYPE,
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_REGION,
    DEFAULT_SCALE_TO_ZERO_TIMEOUT_MIN,
    DEFAULT_VENDOR,
    DEFAULT_WAIT_TIMEOUT_S,
    DIARIZATION_MODEL_ENV,
    ENDPOINT_TYPES,
    TOKEN_SECRET_NAME,
    EndpointSpec,
    create_request_body,
    redact_secrets,
)


@dataclasses.dataclass
class _Context:
    """What every endpoint command needs: an authenticated client and the namespace."""

    api: HfApi
    token: str
    namespace: str


def _context(args: argparse.Namespace) -> _Context:
    token = api.resolve_token(args.token)
    hf_api = HfApi(token=token, library_name="whosaid", library_version=__version__)
    return _Context(api=hf_api, token=token, namespace=api.resolve_namespace(hf_api, token, args.namespace))


def _fetch(ctx: _Context, name: str) -> InferenceEndpoint:
    with api.explained("get", f"endpoint {ctx.namespace}/{name}"):
        return ctx.api.get_inference_endpoint(name, namespace=ctx.namespace, token=ctx.token)


def _finish(endpoint: InferenceEndpoint, args: argparse.Namespace) -> int:
    """Either wait for `running` and print how to call it, or show where the endpoint stands."""
    if getattr(args, "wait", False):
        note(
            f"waiting for {endpoint.namespace}/{endpoint.name} to run "
            f"(up to {args.timeout:g} s, checking every {args.poll_interval:g} s)..."
        )
        print_ready(
            api.wait_until_running(endpoint, timeout_s=args.timeout, poll_interval_s=args.poll_interval)
        )
    else:
        print(describe(endpoint))
    return 0


def _spec_from_args(args: argparse.Namespace) -> EndpointSpec:
    return EndpointSpec(
        name=args.name,
        repository=args.repository,
        revision=args.revision,
        vendor=args.vendor,
        region=args.region,
        accelerator=args.accelerator,
        instance_type=args.instance_type,
        instance_size=args.instance_size,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        scale_to_zero_timeout_min=args.scale_to_zero_timeout,
        asr_model=args.asr_model,
        assistant_model=args.assistant_model,
        diarization_model=args.diarization_model,
        endpoint_type=args.type,
    )


def _cmd_create(args: argparse.Namespace) -> int:
    spec = _spec_from_args(args)
    token = api.resolve_token(args.token)
    if args.dry_run:
        body = redact_secrets(create_request_body(spec, {TOKEN_SECRET_NAME: token}))
        print(json.dumps(body, indent=2))
        url = f"{hf_constants.INFERENCE_ENDPOINTS_ENDPOINT}/endpoint/"
        url += args.namespace or "<your user name>"
        note(f"dry run: nothing sent; POST {url} with this body")
        return 0
    ctx = _context(args)
    endpoint = api.create_endpoint(ctx.api, spec, namespace=ctx.namespace, token=ctx.token)
    note(f"created endpoint {ctx.namespace}/{endpoint.name} ({endpoint.status})")
    return _finish(endpoint, args)


def _cmd_status(args: argparse.Namespace) -> int:
    endpoint = _fetch(_context(args), args.name)
    if args.json:
        print(json.dumps(redact_secrets(endpoint.raw), indent=2))
    else:
        print(describe(endpoint))
    return 0


def _cmd_update(args: argparse.Namespace) -> int:
    ctx = _context(args)
    current = _fetch(ctx, args.name)
    changes = api.update_changes(
        current.raw,
        models={
            ASR_MODEL_ENV: args.asr_model,
            ASSISTANT_MODEL_ENV: args.assistant_model,
            DIARIZATION_MODEL_ENV: args.diarization_model,
        },
        settings={
            "revision": args.revision,
            "accelerator": args.accelerator,
            "instance_type": args.instance_type,
            "instance_size": args.instance_size,
            "min_replica": args.min_replicas,
            "max_replica": args.max_replicas,
            "scale_to_zero_timeout": args.scale_to_zero_timeout,
        },
    )
    if not changes:
        note(f"endpoint {ctx.namespace}/{args.name} already has these settings; nothing sent")
        return 0
    with api.explained("update", f"endpoint {ctx.namespace}/{args.name}"):
        endpoint = ctx.api.update_inference_endpoint(
            args.name, **changes, namespace=ctx.namespace, token=ctx.token
        )
    note(f"updated {', '.join(sorted(changes))} of {ctx.namespace}/{args.name}")
    return _finish(endpoint, args)


def _lifecycle_command(method: str, verb: str) -> Callable[[argparse.Namespace], int]:
    """pause, resume and scale-to-zero: one call, then the endpoint's new state."""

    def command(args: argparse.Namespace) -> int:
        ctx = _context(args)
        with api.explained(verb, f"endpoint {ctx.namespace}/{args.name}"):
            endpoint = getattr(ctx.api, method)(args.name, namespace=ctx.namespace, token=ctx.token)
        return _finish(endpoint, args)

    return command


def _cmd_delete(args: argparse.Namespace) -> int:
    ctx = _context(args)
    subject = f"endpoint {ctx.namespace}/{args.name}"
    if not args.yes:
        if not sys.stdin.isatty():
            raise DeployError(f"not deleting {subject} without --yes")
        answer = input(f"Delete {subject}? This cannot be undone. Type its name to confirm: ")
        if answer.strip() != args.name:
            raise DeployError(f"not confirmed: {subject} is untouched")
    with api.explained("delete", subject):
        ctx.api.delete_inference_endpoint(args.name, namespace=ctx.namespace, token=ctx.token)
    print(f"deleted {subject}")
    return 0


def _cmd_upload_handler(args: argparse.Namespace) -> int:
    repo_root = Path(args.repo_root)
    if args.dry_run:
        files = handler_files(repo_root)
        print("\n".join(files))
        note(f"dry run: these {len(files)} files would be committed to {args.repo_id}")
        return 0
    token = api.resolve_token(args.token)
    hf_api = HfApi(token=token, library_name="whosaid", library_version=__version__)
    commit = api.upload_handler(
        hf_api,
        args.repo_id,
        repo_root=repo_root,
        token=token,
        private=args.private,
        revision=args.revision,
    )
    print(f"uploaded the handler to {args.repo_id} at commit {commit}")
    note(f"next: create NAME --repository {args.repo_id} --revision {commit} --wait")
    return 0


def _api_url_override(args: argparse.Namespace) -> Optional[str]:
    """--api-url, else $HF_INFERENCE_ENDPOINTS_API, else None: huggingface_hub's own base."""
    return getattr(args, "api_url", None) or os.environ.get(API_URL_ENV) or None


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def _add_wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait", action="store_true", help="poll until running, then print the URL and examples"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=DEFAULT_WAIT_TIMEOUT_S,
        metavar="S",
        help=f"stop waiting after S seconds (default {DEFAULT_WAIT_TIMEOUT_S:g}); the deployment "
        "itself goes on",
    )
    parser.add_argument(
        "--poll-interval",
        type=_positive_float,
        default=DEFAULT_POLL_INTERVAL_S,
        metavar="S",
        help=f"seconds between status checks (default {DEFAULT_POLL_INTERVAL_S:g})",
    )


def _add_settings_options(parser: argparse.ArgumentParser, *, create: bool) -> None:
    """Model and compute options of create (with defaults) and update (None: keep the current)."""

    def option(flag: str, help_text: str, default: Any = None, **kwargs: Any) -> None:
        if create and default is not None:
            help_text += f" (default {default})"
        parser.add_argument(flag, default=default if create else None, help=help_text, **kwargs)

    removable = "" if create else '; "" removes it'
    option("--asr-model", "Whisper model", DEFAULT_ASR_MODEL)
    option(
        "--assistant-model",
        f"assistant for speculative decoding, e.g. distil-whisper/distil-large-v3{removable}",
    )
    option(
        "--diarization-model",
        f"pyannote pipeline, e.g. pyannote/speaker-diarization-community-1{removable}",
    )
    option("--accelerator", "cpu or gpu", DEFAULT_ACCELERATOR)
    option(
        "--instance-type",
        "accelerator family: nvidia-a10g (the A10G of a g5.2xlarge), nvidia-l4, nvidia-t4 ...",
        DEFAULT_INSTANCE_TYPE,
    )
    option("--instance-size", "accelerators per replica: x1, x2, x4 ...", DEFAULT_INSTANCE_SIZE)
    option("--min-replicas", "0 lets an idle endpoint scale to zero", 0, type=int)
    option("--max-replicas", "autoscaling ceiling", 1, type=int)
    parser.add_argument(
        "--scale-to-zero-timeout",
        type=int,
        default=None,
        metavar="MINUTES",
        help="idle minutes before scaling to zero, with --min-replicas 0"
        + (f" (default {DEFAULT_SCALE_TO_ZERO_TIMEOUT_MIN})" if create else ""),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the deploy sub-commands on `parser` (used by `whosaid.cli.main` and by `main`)."""
    token = argparse.ArgumentParser(add_help=False)
    token.add_argument(
        "--token",
        default=None,
        help="Hugging Face token (default: $HF_TOKEN, else the one stored by `hf auth login`); "
        "prefer the variable, command lines end up in shell history",
    )
    endpoint = argparse.ArgumentParser(add_help=False, parents=[token])
    endpoint.add_argument("name", help="endpoint name, unique in its namespace")
    endpoint.add_argument(
        "--namespace",
        default=None,
        help="user or organization owning the endpoint (default: the token's user)",
    )
    endpoint.add_argument(
        "--api-url",
        default=None,
        help=f"Inference Endpoints API base (default: ${API_URL_ENV}, else "
        f"{hf_constants.INFERENCE_ENDPOINTS_ENDPOINT})",
    )
    commands = parser.add_subparsers(dest="deploy_command", required=True, metavar="COMMAND")

    create = commands.add_parser("create", parents=[endpoint], help="create the endpoint")
    create.add_argument(
        "--repository", required=True, help="Hub model repo holding handler.py (upload-handler)"
    )
    create.add_argument("--revision", default=None, help="branch, tag or commit of --repository")
    create.add_argument("--vendor", default=DEFAULT_VENDOR, help=f"(default {DEFAULT_VENDOR})")
    create.add_argument("--region", default=DEFAULT_REGION, help=f"(default {DEFAULT_REGION})")
    _add_settings_options(create, create=True)
    create.add_argument(
        "--type",
        choices=ENDPOINT_TYPES,
        default="protected",
        help="who may call it (default protected: callers send a Hugging Face token)",
    )
    create.add_argument(
        "--dry-run",
        action="store_true",
        help="print the request body (secrets hidden) and send nothing",
    )
    _add_wait_options(create)
    create.set_defaults(_deploy=_cmd_create)

    status = commands.add_parser("status", parents=[endpoint], help="show the endpoint")
    status.add_argument("--json", action="store_true", help="the API's answer, secrets hidden")
    status.set_defaults(_deploy=_cmd_status)

    update = commands.add_parser(
        "update", parents=[endpoint], help="change models or compute; only what changes is sent"
    )
    update.add_argument("--revision", default=None, help="deploy another handler revision")
    _add_settings_options(update, create=False)
    _add_wait_options(update)
    update.set_defaults(_deploy=_cmd_update)

    for command, method, verb, help_text in (
        ("pause", "pause_inference_endpoint", "pause", "stop it, and its billing, until resumed"),
        ("resume", "resume_inference_endpoint", "resume", "start a paused endpoint again"),
        (
            "scale-to-zero",
            "scale_to_zero_inference_endpoint",
            "scale to zero",
            "stop its replicas now; the next request starts one",
        ),
    ):
        lifecycle = commands.add_parser(command, parents=[endpoint], help=help_text)
        if command == "resume":
            _add_wait_options(lifecycle)
        lifecycle.set_defaults(_deploy=_lifecycle_command(method, verb))

    delete = commands.add_parser("delete", parents=[endpoint], help="delete the endpoint for good")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(_deploy=_cmd_delete)

    upload = commands.add_parser(
        "upload-handler",
        parents=[token],
        help="commit handler.py, its modules and requirements.txt to a Hub model repo",
    )
    upload.add_argument("repo_id", help="Hub model repo, e.g. you/whosaid-handler")
    upload.add_argument(
        "--private", action="store_true", help="make the repo private if it has to be created"
    )
    upload.add_argument("--revision", default=None, help="branch to commit to (created if missing)")
    upload.add_argument(
        "--repo-root",
        default=str(PACKAGE_REPO_ROOT),
        help="checkout to upload from (default: the one this module lives in)",
    )
    upload.add_argument("--dry-run", action="store_true", help="list the files; send nothing")
    upload.set_defaults(_deploy=_cmd_upload_handler)


def run(args: argparse.Namespace) -> int:
    """Run a parsed deploy command. Errors become one line on stderr and exit status 1."""
    try:
        with api.endpoints_api_base(_api_url_override(args)):
            return args._deploy(args)
    except DeployError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; an endpoint being created or updated keeps going", file=sys.stderr)
        return 130


def main(argv: Optional[Sequence[str]] = None, *, prog: str = "whosaid deploy") -> int:
    """Parse `argv` and run it; the entry point of deploy/endpoint.py."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
