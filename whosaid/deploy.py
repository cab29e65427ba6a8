"""Create, inspect, update and remove the GPU Inference Endpoint, and upload the handler repo.

Both `python -m whosaid deploy <command>` and `python deploy/endpoint.py <command>` run `run` /
`main` here, so the two entry points cannot drift apart.

Endpoint calls go through huggingface_hub's Inference Endpoints API (`HfApi.*_inference_endpoint`,
`InferenceEndpoint.wait`). The Hugging Face token reaches the endpoint only as a secret
(`model.secrets.HF_TOKEN`): never as an environment variable, never printed, never logged.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import requests
from huggingface_hub import CommitOperationAdd, HfApi, InferenceEndpoint, get_token
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import (
    HfHubHTTPError,
    InferenceEndpointError,
    InferenceEndpointTimeoutError,
)

from whosaid import __version__
from whosaid.config import DEFAULT_BATCH_SIZE

# Overrides the Inference Endpoints API base, which huggingface_hub hard-codes (endpoints_api_base).
API_URL_ENV = "HF_INFERENCE_ENDPOINTS_API"
TOKEN_SECRET_NAME = "HF_TOKEN"  # the variable the endpoint's handler reads its token from
REDACTED = "***"

# Environment variables the handler reads its model settings from (whosaid.config.ModelSettings).
ASR_MODEL_ENV = "ASR_MODEL"
ASSISTANT_MODEL_ENV = "ASSISTANT_MODEL"
DIARIZATION_MODEL_ENV = "DIARIZATION_MODEL"

DEFAULT_ASR_MODEL = "openai/whisper-large-v3"
DEFAULT_VENDOR = "aws"
DEFAULT_REGION = "us-east-1"
DEFAULT_ACCELERATOR = "gpu"
# One NVIDIA A10G (24 GB), the GPU of an AWS g5.2xlarge. Since May 2024 the API names instances by
# accelerator ("nvidia-a10g" / "x1"), not by cloud instance ("g5.2xlarge" / "medium").
DEFAULT_INSTANCE_TYPE = "nvidia-a10g"
DEFAULT_INSTANCE_SIZE = "x1"
DEFAULT_SCALE_TO_ZERO_TIMEOUT_MIN = 15  # idle minutes before an endpoint with 0 min replicas stops
DEFAULT_WAIT_TIMEOUT_S = 1800.0  # first deployments pull the image and two models: 5-20 minutes
DEFAULT_POLL_INTERVAL_S = 10.0
ENDPOINT_TYPES = ("protected", "private", "public")
ENDPOINTS_UI_URL = "https://endpoints.huggingface.co"

# Files at the root of the handler repo; the core modules they import ship beside them.
HANDLER_ROOT_FILES = ("handler.py", "config.py", "diarization_utils.py", "requirements.txt")

PACKAGE_REPO_ROOT = Path(__file__).resolve().parent.parent


class DeployError(Exception):
    """A failure the user can act on. The CLI prints its message on one line and exits with 1."""


# --------------------------------------------------------------------------------------------------
# The handler repo


def _module_file(repo_root: Path, module: str) -> Optional[Path]:
    """The checkout's file for a dotted module name, or None for a third-party module."""
    base = repo_root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(repo_root: Path, path: Path) -> set[str]:
    """Dotted names a file imports (for `from a import b`: a and a.b, b being maybe a module)."""
    package = list(path.relative_to(repo_root).parts[:-1])
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in names if name}


def import_closure(repo_root: Path, entry_points: Sequence[str]) -> set[str]:
    """Every checkout file the entry points import, directly or not, at import time or later
    (imports inside functions count), found with `ast` alone: nothing is executed."""
    seen: set[Path] = set()
    pending = [repo_root / name for name in entry_points]
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _imported_modules(repo_root, path):
            parts = module.split(".")
            for depth in range(1, len(parts) + 1):  # a package's __init__ runs before its modules
                found = _module_file(repo_root, ".".join(parts[:depth]))
                if found is not None:
                    pending.append(found)
    return {path.relative_to(repo_root).as_posix() for path in seen}


def handler_files(repo_root: Path) -> list[str]:
    """The files of the Inference Endpoints handler repo, as POSIX paths relative to `repo_root`:
    the root files and exactly the core modules they import. The server, CLI and tools never
    ship (they import what the endpoint's image lacks), nor do tests, weights or `.env` files.
    """
    repo_root = Path(repo_root)
    missing = [name for name in HANDLER_ROOT_FILES if not (repo_root / name).is_file()]
    if missing:
        raise DeployError(
            f"not a complete handler repo at {repo_root}: missing {', '.join(missing)}"
        )
    python_roots = [name for name in HANDLER_ROOT_FILES if name.endswith(".py")]
    modules = import_closure(repo_root, python_roots) - set(HANDLER_ROOT_FILES)
    return list(HANDLER_ROOT_FILES) + sorted(modules)


def upload_handler(
    api: HfApi,
    repo_id: str,
    *,
    repo_root: Path,
    token: str,
    private: bool = False,
    revision: Optional[str] = None,
) -> str:
    """Commit exactly `handler_files(repo_root)` to the Hub model repo `repo_id`, creating the repo
    (and the branch `revision`) when missing. Returns the new commit's id."""
    files = handler_files(repo_root)
    with _explained("create", f"model repo {repo_id}"):
        # private=None, not False, leaves the choice to the namespace's default visibility.
        api.create_repo(
            repo_id, repo_type="model", private=private or None, exist_ok=True, token=token
        )
        if revision is not None and revision != hf_constants.DEFAULT_REVISION:
            api.create_branch(repo_id, branch=revision, exist_ok=True, token=token)
    operations = [
        CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(Path(repo_root) / path))
        for path in files
    ]
    with _explained("upload the handler to", f"model repo {repo_id}"):
        commit = api.create_commit(
            repo_id,
            operations=operations,
            commit_message=f"whosaid {__version__} handler ({len(files)} files)",
            revision=revision,
            token=token,
        )
    return commit.oid


# --------------------------------------------------------------------------------------------------
# What `create` sends


@dataclasses.dataclass(frozen=True)
class EndpointSpec:
    """Everything `create` asks for, with the defaults the service is sized for."""

    name: str
    repository: str  # Hub model repo holding handler.py (see `upload-handler`)
    revision: Optional[str] = None  # branch, tag or commit of `repository`; None: default branch
    vendor: str = DEFAULT_VENDOR
    region: str = DEFAULT_REGION
    accelerator: str = DEFAULT_ACCELERATOR
    instance_type: str = DEFAULT_INSTANCE_TYPE
    instance_size: str = DEFAULT_INSTANCE_SIZE
    min_replicas: int = 0  # 0 lets an idle endpoint scale to zero (no cost, then a cold start)
    max_replicas: int = 1
    # Idle minutes before scaling to zero; only meaningful with min_replicas 0, where None means
    # DEFAULT_SCALE_TO_ZERO_TIMEOUT_MIN.
    scale_to_zero_timeout_min: Optional[int] = None
    asr_model: str = DEFAULT_ASR_MODEL
    assistant_model: Optional[str] = None  # speculative decoding; None: not loaded
    diarization_model: Optional[str] = None  # pyannote pipeline; None: no speaker labels
    endpoint_type: str = "protected"  # protected: callers need a Hugging Face token

    def __post_init__(self) -> None:
        self._verify()

    def _verify(self) -> None:
        """Every cross-field rule, checked before anything is sent."""
        if not self.name.strip():
            raise DeployError("the endpoint name is empty")
        if not self.repository.strip():
            raise DeployError("--repository is empty: name the Hub repo holding handler.py")
        if not self.asr_model.strip():
            raise DeployError("--asr-model is empty: the handler needs a Whisper model")
        if self.endpoint_type not in ENDPOINT_TYPES:
            raise DeployError(f"--type must be one of {', '.join(ENDPOINT_TYPES)}")
        if self.min_replicas < 0 or self.max_replicas < 1:
            raise DeployError("replicas: --min-replicas must be >= 0 and --max-replicas >= 1")
        if self.min_replicas > self.max_replicas:
            raise DeployError(
                f"--min-replicas {self.min_replicas} is above --max-replicas {self.max_replicas}"
            )
        if self.scale_to_zero_timeout_min is not None:
            if self.min_replicas > 0:
                raise DeployError(
                    "--scale-to-zero-timeout needs --min-replicas 0: with a replica always up "
                    "there is nothing to scale to zero"
                )
            if self.scale_to_zero_timeout_min < 1:
                raise DeployError("--scale-to-zero-timeout is in minutes and must be >= 1")

    def env(self) -> dict[str, str]:
        """The endpoint's plain environment: model ids only. The token goes in `secrets`."""
        env = {ASR_MODEL_ENV: self.asr_model}
        if self.assistant_model:
            env[ASSISTANT_MODEL_ENV] = self.assistant_model
        if self.diarization_model:
            env[DIARIZATION_MODEL_ENV] = self.diarization_model
        return env

    def create_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `HfApi.create_inference_endpoint`, less name, namespace, secrets
        and token."""
        scale_to_zero = None
        if self.min_replicas == 0:
            scale_to_zero = self.scale_to_zero_timeout_min or DEFAULT_SCALE_TO_ZERO_TIMEOUT_MIN
        return {
            "repository": self.repository,
            "revision": self.revision,
            "framework": "pytorch",
            "task": "custom",  # run the repo's handler.py
            "accelerator": self.accelerator,
            "instance_type": self.instance_type,
            "instance_size": self.instance_size,
            "vendor": self.vendor,
            "region": self.region,
            "min_replica": self.min_replicas,
            "max_replica": self.max_replicas,
            "scale_to_zero_timeout": scale_to_zero,
            "env": self.env(),
            "type": self.endpoint_type,
        }


def create_request_body(spec: EndpointSpec, secrets: dict[str, str]) -> dict[str, Any]:
    """The JSON body `HfApi.create_inference_endpoint` POSTs for `spec` (huggingface_hub 0.36).

    The library builds its body internally, so `--dry-run` can only show it by building the same
    one; a test compares the two, so a huggingface_hub upgrade that changes the body fails loudly.
    """
    kwargs = spec.create_kwargs()
    return {
        "accountId": None,
        "compute": {
            "accelerator": kwargs["accelerator"],
            "instanceSize": kwargs["instance_size"],
            "instanceType": kwargs["instance_type"],
            "scaling": {
                "maxReplica": kwargs["max_replica"],
                "minReplica": kwargs["min_replica"],
                "scaleToZeroTimeout": kwargs["scale_to_zero_timeout"],
            },
        },
        "model": {
            "framework": kwargs["framework"],
            "repository": kwargs["repository"],
            "revision": kwargs["revision"],
            "task": kwargs["task"],
            "image": {"huggingface": {}},  # the default Hugging Face inference container
            "env": kwargs["env"],
            "secrets": secrets,
        },
        "name": spec.name,
        "provider": {"region": kwargs["region"], "vendor": kwargs["vendor"]},
        "type": kwargs["type"],
    }


def redact_secrets(body: dict[str, Any]) -> dict[str, Any]:
    """A copy of an endpoint body (request or API answer) with every secret value replaced."""
    redacted = json.loads(json.dumps(body))
    model = redacted.get("model")
    if isinstance(model, dict) and isinstance(model.get("secrets"), dict):
        model["secrets"] = {name: REDACTED for name in model["secrets"]}
    return redacted


# --------------------------------------------------------------------------------------------------
# Talking to the API


@contextlib.contextmanager
def endpoints_api_base(api_url: Optional[str]) -> Iterator[None]:
    """Point huggingface_hub's Inference Endpoints calls at `api_url` for the duration of a command.

    huggingface_hub (0.36) reads `constants.INFERENCE_ENDPOINTS_ENDPOINT` at call time in every
    `HfApi.*_inference_endpoint` method and in `InferenceEndpoint.fetch`/`wait`, and offers no
    parameter or environment variable for it. Swapping the constant, and restoring it afterwards,
    is the only way to reach a staging API or the tests' fake; with `None` nothing changes.
    """
    if api_url is None:
        yield
        return
    previous = hf_constants.INFERENCE_ENDPOINTS_ENDPOINT
    hf_constants.INFERENCE_ENDPOINTS_ENDPOINT = api_url.rstrip("/")
    try:
        yield
    finally:
        hf_constants.INFERENCE_ENDPOINTS_ENDPOINT = previous


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def _server_detail(error: requests.HTTPError) -> str:
    """What the server said about a failed request, on one line."""
    message = error.server_message if isinstance(error, HfHubHTTPError) else None
    response = error.response
    if not message and response is not None:
        try:
            data = response.json()
        except ValueError:
            data = None
        if isinstance(data, dict):
            message = data.get("error") or data.get("message")
        message = message or response.text[:300]
    return _one_line(message or "")


def _http_error(
    error: requests.HTTPError, action: str, subject: str, conflict: Optional[str]
) -> DeployError:
    status = error.response.status_code if error.response is not None else None
    detail = _server_detail(error)
    said = f": {detail}" if detail else ""
    if status == 401:
        return DeployError(
            f"cannot {action} {subject}: the token was rejected (HTTP 401){said}; check --token, "
            "HF_TOKEN or `hf auth login`"
        )
    if status == 403:
        return DeployError(
            f"cannot {action} {subject}: not allowed (HTTP 403){said}; the token needs write "
            "access to the namespace, and Inference Endpoints need a payment method there"
        )
    if status == 404:
        return DeployError(f"{subject} not found (HTTP 404){said}")
    if status == 409 and conflict:
        return DeployError(f"{conflict} (HTTP 409){said}")
    hint = ""
    if status == 400 and "instance" in detail.lower():
        hint = (
            "; GPU instances are named like --instance-type nvidia-a10g --instance-size x1, "
            "see https://huggingface.co/docs/inference-endpoints/support/pricing"
        )
    return DeployError(f"cannot {action} {subject}: the API answered HTTP {status}{said}{hint}")


@contextlib.contextmanager
def _explained(action: str, subject: str, conflict: Optional[str] = None) -> Iterator[None]:
    """Turn HTTP and network failures into a one-line `DeployError` that names what failed."""
    try:
        yield
    except requests.HTTPError as error:
        raise _http_error(error, action, subject, conflict) from error
    except requests.RequestException as error:
        raise DeployError(
            f"cannot {action} {subject}: no answer from the API ({type(error).__name__}: "
            f"{_one_line(str(error))})"
        ) from error


def resolve_token(explicit: Optional[str]) -> str:
    """--token, else HF_TOKEN, else the token stored by `hf auth login`."""
    token = explicit or get_token()
    if not token:
        raise DeployError(
            "no Hugging Face token: set HF_TOKEN, run `hf auth login`, or pass --token "
            "(a token with write access and Inference Endpoints permission)"
        )
    return token


def resolve_namespace(api: HfApi, token: str, explicit: Optional[str]) -> str:
    """--namespace, else the user the token belongs to."""
    if explicit:
        return explicit
    with _explained("identify", "the token's user"):
        me = api.whoami(token=token)
    if me.get("type") != "user" or not me.get("name"):
        raise DeployError("this token does not belong to a user: pass --namespace")
    return str(me["name"])


def endpoint_ui_url(namespace: str, name: str) -> str:
    return f"{ENDPOINTS_UI_URL}/{namespace}/endpoints/{name}"


def create_endpoint(
    api: HfApi, spec: EndpointSpec, *, namespace: str, token: str
) -> InferenceEndpoint:
    """Create the endpoint; the token goes to it as the `HF_TOKEN` secret."""
    with _explained(
        "create",
        f"endpoint {namespace}/{spec.name}",
        conflict=f"an endpoint named {spec.name!r} already exists in {namespace}: pick another "
        "name, change it with `update`, or remove it with `delete`",
    ):
        return api.create_inference_endpoint(
            spec.name,
            **spec.create_kwargs(),
            secrets={TOKEN_SECRET_NAME: token},
            namespace=namespace,
            token=token,
        )


def wait_until_running(
    endpoint: InferenceEndpoint, *, timeout_s: float, poll_interval_s: float
) -> InferenceEndpoint:
    """Poll until the endpoint runs and answers its health route; fail with the API's reason."""
    subject = f"endpoint {endpoint.namespace}/{endpoint.name}"
    try:
        with _explained("follow", subject):
            return endpoint.wait(timeout=timeout_s, refresh_every=poll_interval_s)
    except InferenceEndpointTimeoutError as error:
        raise DeployError(
            f"{subject} is still {endpoint.status!r} after {timeout_s:g} s; it keeps deploying: "
            f"follow it with `status {endpoint.name}` or at "
            f"{endpoint_ui_url(endpoint.namespace, endpoint.name)}"
        ) from error
    except InferenceEndpointError as error:
        message = _one_line(endpoint.raw.get("status", {}).get("message") or "")
        raise DeployError(
            f"{subject} is {endpoint.status!r}: {message or 'the API gave no reason'}; logs at "
            f"{endpoint_ui_url(endpoint.namespace, endpoint.name)}"
        ) from error


# update_inference_endpoint keyword -> where the API reports the current value.
UPDATE_FIELDS: dict[str, tuple[str, ...]] = {
    "accelerator": ("compute", "accelerator"),
    "instance_type": ("compute", "instanceType"),
    "instance_size": ("compute", "instanceSize"),
    "min_replica": ("compute", "scaling", "minReplica"),
    "max_replica": ("compute", "scaling", "maxReplica"),
    "scale_to_zero_timeout": ("compute", "scaling", "scaleToZeroTimeout"),
    "revision": ("model", "revision"),
}


def _lookup(raw: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = raw
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def update_changes(
    current: dict[str, Any],
    *,
    models: dict[str, Optional[str]],
    settings: dict[str, Any],
) -> dict[str, Any]:
    """The `update_inference_endpoint` keywords that differ from the endpoint's `current` raw state.

    `models` maps a model variable (ASR_MODEL ...) to its new id, "" to remove it, or None to keep
    it. `model.env` is one value in the API, so the whole map is sent, merged into the current one:
    right whether the API merges or replaces it, where sending only the changed variable could drop
    the others. `settings` holds the other keywords, None meaning "keep".
    """
    asr_model = models.get(ASR_MODEL_ENV)
    if asr_model is not None and not asr_model.strip():
        raise DeployError("--asr-model cannot be empty: the handler needs a Whisper model")
    changes: dict[str, Any] = {}
    current_env = dict(_lookup(current, ("model", "env")) or {})
    env = dict(current_env)
    for variable, value in models.items():
        if value is None:
            continue
        if value.strip():
            env[variable] = value.strip()
        else:
            env.pop(variable, None)
    if env != current_env:
        changes["env"] = env
    for keyword, value in settings.items():
        if value is not None and value != _lookup(current, UPDATE_FIELDS[keyword]):
            changes[keyword] = value
    return changes


# --------------------------------------------------------------------------------------------------
# Output


def usage_examples(url: str, batch_size: int = DEFAULT_BATCH_SIZE) -> str:
    """Ready-to-run calls: a base64 JSON body with parameters, as the handler expects it.

    The curl recipe streams the base64 text into a file, so long recordings do not hit the shell's
    argument-length limit; both read the token from $HF_TOKEN rather than showing it.
    """
    body_tail = f'", "parameters": {{"batch_size": {batch_size}}}}}'
    encode = "base64 < sample.wav | tr -d '\\n'"
    return f"""\
curl:
  {{ printf '{{"inputs": "'; {encode}; printf '{body_tail}'; }} > request.json
  curl -sS "{url}" \\
    -H "Authorization: Bearer $HF_TOKEN" \\
    -H "Content-Type: application/json" \\
    --data-binary @request.json

python:
  import base64, os, requests

  with open("sample.wav", "rb") as audio:
      audio_b64 = base64.b64encode(audio.read()).decode("ascii")
  response = requests.post(
      "{url}",
      headers={{"Authorization": f"Bearer {{os.environ['HF_TOKEN']}}"}},
      json={{"inputs": audio_b64, "parameters": {{"batch_size": {batch_size}}}}},
      timeout=600,
  )
  response.raise_for_status()
  print(response.json())
"""


def describe(endpoint: InferenceEndpoint) -> str:
    """A short human summary of an endpoint; secret values are never part of it."""
    raw = endpoint.raw
    compute = raw.get("compute") or {}
    scaling = compute.get("scaling") or {}
    provider = raw.get("provider") or {}
    model = raw.get("model") or {}
    status_message = _one_line((raw.get("status") or {}).get("message") or "")
    replicas = f"replicas {scaling.get('minReplica')}-{scaling.get('maxReplica')}"
    if scaling.get("minReplica") == 0 and scaling.get("scaleToZeroTimeout"):
        replicas += f", scale to zero after {scaling['scaleToZeroTimeout']} min idle"
    revision = f"@{model['revision']}" if model.get("revision") else ""
    env = model.get("env") or {}
    lines = [
        f"endpoint: {endpoint.namespace}/{endpoint.name}",
        f"status:   {endpoint.status}" + (f" ({status_message})" if status_message else ""),
        f"url:      {endpoint.url or '(none yet)'}",
        f"model:    {model.get('repository')}{revision} ({model.get('task')}, "
        f"{model.get('framework')})",
        f"compute:  {provider.get('vendor')} {provider.get('region')}, "
        f"{compute.get('accelerator')} {compute.get('instanceType')} "
        f"{compute.get('instanceSize')}, {replicas}",
        "env:      " + (", ".join(f"{key}={value}" for key, value in sorted(env.items())) or "-"),
    ]
    secrets = model.get("secrets")
    if isinstance(secrets, dict) and secrets:
        lines.append("secrets:  " + ", ".join(sorted(secrets)) + " (values hidden)")
    lines.append(f"console:  {endpoint_ui_url(endpoint.namespace, endpoint.name)}")
    return "\n".join(lines)


def _print_ready(endpoint: InferenceEndpoint) -> None:
    print(f"endpoint {endpoint.namespace}/{endpoint.name} is running")
    print(f"url: {endpoint.url}")
    print()
    print(usage_examples(endpoint.url or ""), end="")


def _note(message: str) -> None:
    """Progress for people, on stderr, so stdout stays parseable."""
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# Command line


@dataclasses.dataclass
class _Context:
    """What every endpoint command needs: an authenticated client and the namespace."""

    api: HfApi
    token: str
    namespace: str


def _context(args: argparse.Namespace) -> _Context:
    token = resolve_token(args.token)
    api = HfApi(token=token, library_name="whosaid", library_version=__version__)
    return _Context(api=api, token=token, namespace=resolve_namespace(api, token, args.namespace))


def _fetch(ctx: _Context, name: str) -> InferenceEndpoint:
    with _explained("get", f"endpoint {ctx.namespace}/{name}"):
        return ctx.api.get_inference_endpoint(name, namespace=ctx.namespace, token=ctx.token)


def _finish(endpoint: InferenceEndpoint, args: argparse.Namespace) -> int:
    """Either wait for `running` and print how to call it, or show where the endpoint stands."""
    if getattr(args, "wait", False):
        _note(
            f"waiting for {endpoint.namespace}/{endpoint.name} to run "
            f"(up to {args.timeout:g} s, checking every {args.poll_interval:g} s)..."
        )
        _print_ready(
            wait_until_running(endpoint, timeout_s=args.timeout, poll_interval_s=args.poll_interval)
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
    token = resolve_token(args.token)
    if args.dry_run:
        body = redact_secrets(create_request_body(spec, {TOKEN_SECRET_NAME: token}))
        print(json.dumps(body, indent=2))
        url = f"{hf_constants.INFERENCE_ENDPOINTS_ENDPOINT}/endpoint/"
        url += args.namespace or "<your user name>"
        _note(f"dry run: nothing sent; POST {url} with this body")
        return 0
    ctx = _context(args)
    endpoint = create_endpoint(ctx.api, spec, namespace=ctx.namespace, token=ctx.token)
    _note(f"created endpoint {ctx.namespace}/{endpoint.name} ({endpoint.status})")
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
    changes = update_changes(
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
        _note(f"endpoint {ctx.namespace}/{args.name} already has these settings; nothing sent")
        return 0
    with _explained("update", f"endpoint {ctx.namespace}/{args.name}"):
        endpoint = ctx.api.update_inference_endpoint(
            args.name, **changes, namespace=ctx.namespace, token=ctx.token
        )
    _note(f"updated {', '.join(sorted(changes))} of {ctx.namespace}/{args.name}")
    return _finish(endpoint, args)


def _lifecycle_command(method: str, verb: str) -> Callable[[argparse.Namespace], int]:
    """pause, resume and scale-to-zero: one call, then the endpoint's new state."""

    def command(args: argparse.Namespace) -> int:
        ctx = _context(args)
        with _explained(verb, f"endpoint {ctx.namespace}/{args.name}"):
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
    with _explained("delete", subject):
        ctx.api.delete_inference_endpoint(args.name, namespace=ctx.namespace, token=ctx.token)
    print(f"deleted {subject}")
    return 0


def _cmd_upload_handler(args: argparse.Namespace) -> int:
    repo_root = Path(args.repo_root)
    if args.dry_run:
        files = handler_files(repo_root)
        print("\n".join(files))
        _note(f"dry run: these {len(files)} files would be committed to {args.repo_id}")
        return 0
    token = resolve_token(args.token)
    api = HfApi(token=token, library_name="whosaid", library_version=__version__)
    commit = upload_handler(
        api,
        args.repo_id,
        repo_root=repo_root,
        token=token,
        private=args.private,
        revision=args.revision,
    )
    print(f"uploaded the handler to {args.repo_id} at commit {commit}")
    _note(f"next: create NAME --repository {args.repo_id} --revision {commit} --wait")
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
    """Register the deploy sub-commands on `parser` (used by `whosaid.cli` and by `main`)."""
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
        with endpoints_api_base(_api_url_override(args)):
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
