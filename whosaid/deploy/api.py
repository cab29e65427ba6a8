"""Talking to the Inference Endpoints API and the Hub through huggingface_hub, with every HTTP or
network failure turned into a one-line `DeployError` that says what failed and what to do."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator, Optional

import requests
from huggingface_hub import CommitOperationAdd, HfApi, InferenceEndpoint, get_token
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import (
    HfHubHTTPError,
    InferenceEndpointError,
    InferenceEndpointTimeoutError,
)

from whosaid import __version__
from whosaid.deploy.errors import DeployError
from whosaid.deploy.handler_repo import handler_files
from whosaid.deploy.spec import (
    ASR_MODEL_ENV,
    ENDPOINTS_UI_URL,
    TOKEN_SECRET_NAME,
    EndpointSpec,
)


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


def one_line(text: str) -> str:
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
    return one_line(message or "")


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
def explained(action: str, subject: str, conflict: Optional[str] = None) -> Iterator[None]:
    """Turn HTTP and network failures into a one-line `DeployError` that names what failed."""
    try:
        yield
    except requests.HTTPError as error:
        raise _http_error(error, action, subject, conflict) from error
    except requests.RequestException as error:
        raise DeployError(
            f"cannot {action} {subject}: no answer from the API ({type(error).__name__}: "
            f"{one_line(str(error))})"
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
    with explained("identify", "the token's user"):
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
    with explained(
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
        with explained("follow", subject):
            return endpoint.wait(timeout=timeout_s, refresh_every=poll_interval_s)
    except InferenceEndpointTimeoutError as error:
        raise DeployError(
            f"{subject} is still {endpoint.status!r} after {timeout_s:g} s; it keeps deploying: "
            f"follow it with `status {endpoint.name}` or at "
            f"{endpoint_ui_url(endpoint.namespace, endpoint.name)}"
        ) from error
    except InferenceEndpointError as error:
        message = one_line(endpoint.raw.get("status", {}).get("message") or "")
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
    with explained("create", f"model repo {repo_id}"):
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
    with explained("upload the handler to", f"model repo {repo_id}"):
        commit = api.create_commit(
            repo_id,
            operations=operations,
            commit_message=f"whosaid {__version__} handler ({len(files)} files)",
            revision=revision,
            token=token,
        )
    return commit.oid
