"""What `create` sends: the endpoint's settings with their defaults, checked before anything is
sent, and the JSON body huggingface_hub POSTs for them (shown by `--dry-run`, secrets hidden)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from whosaid.deploy.errors import DeployError

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

