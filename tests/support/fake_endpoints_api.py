"""A fake of the Hugging Face Inference Endpoints API and of the few Hub routes `whosaid deploy`
calls, served by a real HTTP server on 127.0.0.1 so that huggingface_hub's own client code runs
unchanged.

It records every request (method, path, headers, body) and answers like the service does, as far
as huggingface_hub 0.36 reads the answers:

- `/v2/endpoint/{namespace}[/{name}[/pause|/resume|/scale-to-zero]]`: create (409 on a taken
  name, 400 on an unknown instance), get, update, delete, pause, resume, scale to zero. A new
  endpoint goes pending -> initializing -> running, one step per GET of it, unless told to fail
  (-> `failed` with a message) or to stall (stays `initializing`).
- `/endpoints/{namespace}/{name}/health`: the deployed endpoint's health route, which
  `InferenceEndpoint.wait` probes once the API says `running`.
- `/api/whoami-v2`, `/api/repos/create`, `/api/models/{repo}/branch/{branch}`,
  `/api/models/{repo}/preupload/{revision}` and `/api/models/{repo}/commit/{revision}` (NDJSON):
  enough of the Hub to record which files an upload commits.

Every route but the health route wants `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, unquote, urlsplit

# (vendor, region, instance type, instance size) the fake API accepts.
KNOWN_INSTANCES = frozenset(
    {
        ("aws", "us-east-1", "nvidia-a10g", "x1"),
        ("aws", "us-east-1", "nvidia-a10g", "x4"),
        ("aws", "us-east-1", "nvidia-l4", "x1"),
        ("aws", "us-east-1", "nvidia-t4", "x1"),
        ("aws", "us-east-1", "intel-spr", "x2"),
    }
)
RUNNING = "running"

_ENDPOINT_PATH = re.compile(
    r"^/v2/endpoint/(?P<ns>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<action>[^/]+))?)?$"
)
_HEALTH_PATH = re.compile(r"^/endpoints/(?P<ns>[^/]+)/(?P<name>[^/]+)/health$")
_REPO_PATH = re.compile(
    r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<route>branch|preupload|commit)/(?P<rev>.+)$"
)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it."""

    method: str
    path: str  # URL-decoded, without the query string
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased: HTTP header names are case-insensitive
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def ndjson(self) -> list[Any]:
        return [json.loads(line) for line in self.body.splitlines() if line.strip()]


@dataclass
class FakeEndpoint:
    """Server-side state of one endpoint. `plan` holds the states the next GETs move through."""

    namespace: str
    name: str
    spec: dict[str, Any]  # the create body, secrets left out (the API never returns their values)
    secret_names: list[str]
    state: str = "pending"
    plan: list[str] = field(default_factory=list)
    message: Optional[str] = None


class FakeEndpointsApi:
    """Serve the fake on a random port in a background thread; use as a context manager."""

    def __init__(self, *, token: str, user: str = "alice") -> None:
        self.token = token
        self.user = user
        self.requests: list[RecordedRequest] = []
        self.endpoints: dict[tuple[str, str], FakeEndpoint] = {}
        self.repos: set[str] = set()
        # repo id -> one list of committed paths per commit, in commit order
        self.commits: dict[str, list[list[str]]] = {}
        self._failure: Optional[str] = None
        self._stall = False
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        # A short poll interval keeps shutdown, and so each test's teardown, quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    # -- life cycle ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def api_url(self) -> str:
        """What `--api-url` takes: the Inference Endpoints API base."""
        return f"{self.url}/v2"

    @property
    def hub_url(self) -> str:
        """What HF_ENDPOINT takes."""
        return self.url

    def __enter__(self) -> "FakeEndpointsApi":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- scenarios -------------------------------------------------------------------------------

    def fail_deployments(self, message: str) -> None:
        """Endpoints created or resumed from now on end in `failed` with `message`."""
        self._failure = message

    def stall_deployments(self) -> None:
        """Endpoints created from now on stay `initializing` for ever."""
        self._stall = True

    def add_endpoint(
        self, name: str, *, env: dict[str, str], state: str = RUNNING, **compute: Any
    ) -> FakeEndpoint:
        """An endpoint that already exists, as `create` would have left it."""
        spec = {
            "accountId": None,
            "compute": {
                "accelerator": "gpu",
                "instanceSize": compute.get("instance_size", "x1"),
                "instanceType": compute.get("instance_type", "nvidia-a10g"),
                "scaling": {"maxReplica": 1, "minReplica": 0, "scaleToZeroTimeout": 15},
            },
            "model": {
                "framework": "pytorch",
                "repository": "alice/whosaid-handler",
                "revision": None,
                "task": "custom",
                "image": {"huggingface": {}},
                "env": dict(env),
            },
            "name": name,
            "provider": {"region": "us-east-1", "vendor": "aws"},
            "type": "protected",
        }
        endpoint = FakeEndpoint(self.user, name, spec, ["HF_TOKEN"], state=state)
        with self._lock:
            self.endpoints[(self.user, name)] = endpoint
        return endpoint

    # -- observations ----------------------------------------------------------------------------

    def requests_to(self, method: str, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method and r.path == path]

    # -- serving ---------------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def _serve(self) -> None:
                split = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                request = RecordedRequest(
                    method=self.command,
                    path=unquote(split.path),
                    query=parse_qs(split.query),
                    headers={name.lower(): value for name, value in self.headers.items()},
                    body=self.rfile.read(length) if length else b"",
                )
                with fake._lock:
                    fake.requests.append(request)
                    status, payload = fake._route(request)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        return Handler

    def _route(self, request: RecordedRequest) -> tuple[int, Any]:
        health = _HEALTH_PATH.match(request.path)
        if health:
            endpoint = self.endpoints.get((health["ns"], health["name"]))
            ok = endpoint is not None and endpoint.state == RUNNING
            return (200, {"status": "ok"}) if ok else (503, {"error": "not ready"})
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"error": "Invalid credentials in Authorization header"}
        if request.method == "GET" and request.path == "/api/whoami-v2":
            return 200, {"type": "user", "name": self.user, "orgs": []}
        if request.method == "POST" and request.path == "/api/repos/create":
            return self._create_repo(request.json())
        repo = _REPO_PATH.match(request.path)
        if repo and request.method == "POST":
            return self._repo_route(repo["repo"], repo["route"], repo["rev"], request)
        endpoint = _ENDPOINT_PATH.match(request.path)
        if endpoint:
            return self._endpoint_route(
                request, endpoint["ns"], endpoint["name"], endpoint["action"]
            )
        return 404, {"error": f"no route for {request.method} {request.path}"}

    # -- Hub -------------------------------------------------------------------------------------

    def _create_repo(self, body: dict[str, Any]) -> tuple[int, Any]:
        repo_id = f"{body.get('organization') or self.user}/{body['name']}"
        if repo_id in self.repos:
            # The Hub's 409 carries the repo URL too: create_repo(exist_ok=True) reads it.
            message = "You already created this model repo"
            return 409, {"error": message, "url": self._repo_url(repo_id)}
        self.repos.add(repo_id)
        return 200, {"url": self._repo_url(repo_id)}

    def _repo_url(self, repo_id: str) -> str:
        return f"{self.url}/{repo_id}"

    def _repo_route(
        self, repo_id: str, route: str, revision: str, request: RecordedRequest
    ) -> tuple[int, Any]:
        if repo_id not in self.repos:
            return 404, {"error": "Repository not found"}
        if route == "branch":
            return 200, {}
        if route == "preupload":
            files = request.json()["files"]
            return 200, {
                "files": [
                    {"path": file["path"], "uploadMode": "regular", "shouldIgnore": False}
                    for file in files
                ]
            }
        lines = request.ndjson()
        paths = [line["value"]["path"] for line in lines if line["key"] == "file"]
        for line in lines:
            if line["key"] == "file":
                base64.b64decode(line["value"]["content"], validate=True)
        self.commits.setdefault(repo_id, []).append(paths)
        oid = f"{len(self.commits[repo_id]):040x}"
        return 200, {
            "commitUrl": f"{self._repo_url(repo_id)}/commit/{oid}",
            "commitOid": oid,
            "pullRequestUrl": None,
        }

    # -- Inference Endpoints ---------------------------------------------------------------------

    def _endpoint_route(
        self, request: RecordedRequest, namespace: str, name: Optional[str], action: Optional[str]
    ) -> tuple[int, Any]:
        if name is None:
            if request.method == "POST":
                return self._create_endpoint(namespace, request.json())
            return 405, {"error": "method not allowed"}
        endpoint = self.endpoints.get((namespace, name))
        if endpoint is None:
            return 404, {"error": f"Endpoint {name} not found"}
        if action is None and request.method == "GET":
            if endpoint.plan:
                self._move(endpoint, endpoint.plan.pop(0))
            return 200, self._render(endpoint)
        if action is None and request.method == "PUT":
            return self._update_endpoint(endpoint, request.json())
        if action is None and request.method == "DELETE":
            del self.endpoints[(namespace, name)]
            return 200, {}
        if request.method == "POST" and action == "pause":
            self._move(endpoint, "paused")
            endpoint.plan = []
        elif request.method == "POST" and action == "scale-to-zero":
            self._move(endpoint, "scaledToZero")
            endpoint.plan = []
        elif request.method == "POST" and action == "resume":
            if endpoint.state == RUNNING:
                return 400, {"error": "Endpoint is already running"}
            self._move(endpoint, "initializing")
            endpoint.plan = self._deployment_plan()[1:]
        else:
            return 404, {"error": f"no route for {request.method} {request.path}"}
        return 200, self._render(endpoint)

    def _create_endpoint(self, namespace: str, body: dict[str, Any]) -> tuple[int, Any]:
        name = body["name"]
        if (namespace, name) in self.endpoints:
            return 409, {"error": f"Endpoint name {name} is already taken in {namespace}"}
        provider, compute = body["provider"], body["compute"]
        instance = (
            provider["vendor"],
            provider["region"],
            compute["instanceType"],
            compute["instanceSize"],
        )
        if instance not in KNOWN_INSTANCES:
            return 400, {
                "error": f"Instance {compute['instanceType']} {compute['instanceSize']} is not "
                f"available for {provider['vendor']} in {provider['region']}"
            }
        model = dict(body["model"])
        secrets = model.pop("secrets", None) or {}
        spec = {**body, "model": model}
        endpoint = FakeEndpoint(
            namespace, name, spec, sorted(secrets), plan=self._deployment_plan()
        )
        self.endpoints[(namespace, name)] = endpoint
        return 200, self._render(endpoint)

    def _update_endpoint(self, endpoint: FakeEndpoint, body: dict[str, Any]) -> tuple[int, Any]:
        for section, values in body.items():
            if isinstance(values, dict) and isinstance(endpoint.spec.get(section), dict):
                merged = endpoint.spec[section]
                for key, value in values.items():
                    nested = isinstance(value, dict) and isinstance(merged.get(key), dict)
                    if nested and key != "env":
                        merged[key] = {**merged[key], **value}
                    else:
                        merged[key] = value  # the env map is replaced whole
            else:
                endpoint.spec[section] = values
        self._move(endpoint, "updating")
        endpoint.plan = [RUNNING]
        return 200, self._render(endpoint)

    def _deployment_plan(self) -> list[str]:
        if self._stall:
            return ["initializing"]
        return ["initializing", "failed" if self._failure else RUNNING]

    def _move(self, endpoint: FakeEndpoint, state: str) -> None:
        endpoint.state = state
        endpoint.message = self._failure if state == "failed" else None

    def _render(self, endpoint: FakeEndpoint) -> dict[str, Any]:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        url = f"{self.url}/endpoints/{endpoint.namespace}/{endpoint.name}"
        return {
            **json.loads(json.dumps(endpoint.spec)),
            "healthRoute": "/health",
            "status": {
                "state": endpoint.state,
                "message": endpoint.message,
                "url": url if endpoint.state == RUNNING else None,
                "createdAt": now,
                "updatedAt": now,
                "readyReplica": 1 if endpoint.state == RUNNING else 0,
                "targetReplica": 1,
            },
        }
