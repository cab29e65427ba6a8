"""What the commands print: endpoint summaries (secret values never part of them) and ready-to-run
calls. Progress goes to stderr, so stdout stays parseable."""

from __future__ import annotations

import sys

from huggingface_hub import InferenceEndpoint

from whosaid.config import DEFAULT_BATCH_SIZE
from whosaid.deploy.api import endpoint_ui_url, one_line


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
    status_message = one_line((raw.get("status") or {}).get("message") or "")
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


def print_ready(endpoint: InferenceEndpoint) -> None:
    print(f"endpoint {endpoint.namespace}/{endpoint.name} is running")
    print(f"url: {endpoint.url}")
    print()
    print(usage_examples(endpoint.url or ""), end="")


def note(message: str) -> None:
    """Progress for people, on stderr, so stdout stays parseable."""
    print(message, file=sys.stderr, flush=True)
