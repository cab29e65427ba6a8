"""Create, inspect, update and remove the GPU Inference Endpoint, and upload the handler repo.

One module per stage: `handler_repo` (which files the handler repo ships), `spec` (what `create`
sends), `api` (huggingface_hub calls, failures explained), `output` (what is printed) and `cli`
(`python -m whosaid deploy`). The Hugging Face token reaches the endpoint only as a secret
(`model.secrets.HF_TOKEN`): never as an environment variable, never printed, never logged.
"""

from whosaid.deploy.api import (
    create_endpoint,
    endpoint_ui_url,
    endpoints_api_base,
    resolve_namespace,
    resolve_token,
    update_changes,
    upload_handler,
    wait_until_running,
)
from whosaid.deploy.cli import add_arguments, main, run
from whosaid.deploy.errors import DeployError
from whosaid.deploy.handler_repo import HANDLER_ROOT_FILES, PACKAGE_REPO_ROOT, handler_files, import_closure
from whosaid.deploy.output import describe, usage_examples
from whosaid.deploy.spec import (
    API_URL_ENV,
    ASR_MODEL_ENV,
    ASSISTANT_MODEL_ENV,
    DIARIZATION_MODEL_ENV,
    TOKEN_SECRET_NAME,
    EndpointSpec,
    create_request_body,
    redact_secrets,
)

__all__ = [
    "API_URL_ENV",
    "ASR_MODEL_ENV",
    "ASSISTANT_MODEL_ENV",
    "DIARIZATION_MODEL_ENV",
    "HANDLER_ROOT_FILES",
    "PACKAGE_REPO_ROOT",
    "TOKEN_SECRET_NAME",
    "DeployError",
    "EndpointSpec",
    "add_arguments",
    "create_endpoint",
    "create_request_body",
    "describe",
    "endpoint_ui_url",
    "endpoints_api_base",
    "handler_files",
    "import_closure",
    "main",
    "redact_secrets",
    "resolve_namespace",
    "resolve_token",
    "run",
    "update_changes",
    "upload_handler",
    "usage_examples",
    "wait_until_running",
]
