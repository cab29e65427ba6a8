"""`whosaid deploy` against a fake Inference Endpoints API and Hub (tests/support/).

The fake is a real HTTP server, so huggingface_hub's own client code builds and sends every
request; the tests check the exact bodies, where the token goes, and what the user sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import huggingface_hub.constants
import pytest

from tests.support.fake_endpoints_api import FakeEndpointsApi
from whosaid.deploy import errors, spec
from whosaid.deploy.cli import main
from whosaid.deploy.handler_repo import handler_files, import_closure

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_fakeTokenThatMustOnlyTravelAsASecret"
NAME = "whosaid-a10g"
USER = "alice"
FAST_WAIT = ["--wait", "--timeout", "5", "--poll-interval", "0.01"]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEndpointsApi]:
    with FakeEndpointsApi(token=TOKEN, user=USER) as server:
        # What HF_ENDPOINT does in a fresh process (huggingface_hub reads it at import time).
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", server.hub_url)
        yield server


@pytest.fixture(autouse=True)
def isolated_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """HF_TOKEN is the test token and no token stored on this machine can leak in."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.delenv(spec.API_URL_ENV, raising=False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    # conftest.py makes every other test offline; these talk to the fake API on loopback.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


def deploy_cli(fake: FakeEndpointsApi, *argv: str) -> int:
    return main([*argv, "--api-url", fake.api_url])


def assert_token_only_in_secret_and_auth(fake: FakeEndpointsApi, *outputs: str) -> None:
    """The token travels as the Authorization header and as the HF_TOKEN secret, nowhere else."""
    assert fake.requests
    for request in fake.requests:
        assert TOKEN not in request.path and TOKEN not in json.dumps(request.query)
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        for header, value in request.headers.items():
            assert header == "authorization" or TOKEN not in value, header
        if TOKEN.encode() in request.body:
            body = request.json()
            assert body["model"].pop("secrets") == {"HF_TOKEN": TOKEN}
            assert TOKEN not in json.dumps(body)
            assert "HF_TOKEN" not in body["model"].get("env", {})
    for output in outputs:
        assert TOKEN not in output


def last_line(stderr: str) -> str:
    """The error line; progress notes come before it, and nothing (no traceback) after it."""
    lines = stderr.splitlines()
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], stderr
    return lines[-1]


def expected_create_body(secret: str) -> dict:
    return {
        "accountId": None,
        "compute": {
            "accelerator": "gpu",
            "instanceSize": "x1",
            "instanceType": "nvidia-a10g",
            "scaling": {"maxReplica": 1, "minReplica": 0, "scaleToZeroTimeout": 15},
        },
        "model": {
            "framework": "pytorch",
            "repository": "alice/whosaid-handler",
            "revision": "0123abc",
            "task": "custom",
            "image": {"huggingface": {}},
            "env": {
                "ASR_MODEL": "openai/whisper-large-v3",
                "ASSISTANT_MODEL": "distil-whisper/distil-large-v3",
                "DIARIZATION_MODEL": "pyannote/speaker-diarization-community-1",
            },
            "secrets": {"HF_TOKEN": secret},
        },
        "name": NAME,
        "provider": {"region": "us-east-1", "vendor": "aws"},
        "type": "protected",
    }


CREATE_ARGS = [
    "create",
    NAME,
    "--repository",
    "alice/whosaid-handler",
    "--revision",
    "0123abc",
    "--assistant-model",
    "distil-whisper/distil-large-v3",
    "--diarization-model",
    "pyannote/speaker-diarization-community-1",
]


# --------------------------------------------------------------------------------------------------
# create


def test_create_wait_sends_the_exact_body_and_prints_url_and_examples(fake, capsys):
    assert deploy_cli(fake, *CREATE_ARGS, *FAST_WAIT) == 0
    out, err = capsys.readouterr()

    (create,) = fake.requests_to("POST", f"/v2/endpoint/{USER}")
    assert create.json() == expected_create_body(secret=TOKEN)
    assert fake.endpoints[(USER, NAME)].secret_names == ["HF_TOKEN"]
    assert fake.requests_to("GET", "/api/whoami-v2"), "the namespace comes from the token's user"
    polls = fake.requests_to("GET", f"/v2/endpoint/{USER}/{NAME}")
    assert len(polls) == 2, "pending -> initializing -> running"
    assert fake.requests_to("GET", f"/endpoints/{USER}/{NAME}/health")

    url = f"{fake.url}/endpoints/{USER}/{NAME}"
    assert f"url: {url}" in out
    assert f'curl -sS "{url}"' in out
    assert '-H "Authorization: Bearer $HF_TOKEN"' in out
    assert '"parameters": {"batch_size": 24}' in out
    assert f'requests.post(\n      "{url}"' in out
    assert 'json={"inputs": audio_b64, "parameters": {"batch_size": 24}}' in out
    assert_token_only_in_secret_and_auth(fake, out, err)


def test_create_with_namespace_and_compute_options(fake, capsys):
    argv = [
        "create", NAME, "--repository", "alice/whosaid-handler", "--namespace", "acme",
        "--instance-type", "nvidia-l4", "--min-replicas", "1", "--max-replicas", "1",
        "--type", "private",
    ]
    assert deploy_cli(fake, *argv) == 0

    assert not fake.requests_to("GET", "/api/whoami-v2")
    body = fake.requests_to("POST", "/v2/endpoint/acme")[0].json()
    assert body["compute"] == {
        "accelerator": "gpu",
        "instanceSize": "x1",
        "instanceType": "nvidia-l4",
        "scaling": {"maxReplica": 1, "minReplica": 1, "scaleToZeroTimeout": None},
    }
    assert body["model"]["env"] == {"ASR_MODEL": "openai/whisper-large-v3"}
    assert body["model"]["revision"] is None
    assert body["type"] == "private"
    out = capsys.readouterr().out
    assert f"endpoint: acme/{NAME}" in out and "status:   pending" in out


def test_dry_run_prints_what_create_sends_with_the_secret_hidden(fake, capsys):
    assert deploy_cli(fake, *CREATE_ARGS, "--dry-run") == 0
    dry_out, dry_err = capsys.readouterr()
    assert fake.requests == [], "a dry run sends nothing"
    printed = json.loads(dry_out)
    assert printed == expected_create_body(secret="***")
    assert "nothing sent" in dry_err

    assert deploy_cli(fake, *CREATE_ARGS) == 0
    sent = fake.requests_to("POST", f"/v2/endpoint/{USER}")[0].json()
    assert spec.redact_secrets(sent) == printed, "the dry run shows what huggingface_hub sends"
    assert TOKEN not in dry_out + dry_err


def test_wait_times_out_cleanly(fake, capsys):
    fake.stall_deployments()
    code = deploy_cli(fake, *CREATE_ARGS, "--wait", "--timeout", "0.2", "--poll-interval", "0.02")
    out, err = capsys.readouterr()
    assert code == 1
    assert last_line(err).startswith(
        f"error: endpoint {USER}/{NAME} is still 'initializing' after 0.2 s; it keeps deploying"
    )
    assert "Traceback" not in err and "url:" not in out
    assert len(fake.requests_to("GET", f"/v2/endpoint/{USER}/{NAME}")) >= 2


def test_failed_deployment_shows_the_endpoints_message(fake, capsys):
    fake.fail_deployments("Endpoint failed to start: ModuleNotFoundError: No module named 'x'")
    code = deploy_cli(fake, *CREATE_ARGS, *FAST_WAIT)
    err = capsys.readouterr().err
    assert code == 1
    assert last_line(err) == (
        f"error: endpoint {USER}/{NAME} is 'failed': Endpoint failed to start: "
        "ModuleNotFoundError: No module named 'x'; logs at "
        f"https://endpoints.huggingface.co/{USER}/endpoints/{NAME}"
    )
    assert "Traceback" not in err


def test_taken_name_is_a_clear_409(fake, capsys):
    fake.add_endpoint(NAME, env={"ASR_MODEL": "openai/whisper-large-v3"})
    assert deploy_cli(fake, *CREATE_ARGS) == 1
    err = capsys.readouterr().err
    assert err == (
        f"error: an endpoint named '{NAME}' already exists in {USER}: pick another name, change "
        "it with `update`, or remove it with `delete` (HTTP 409): Endpoint name "
        f"{NAME} is already taken in {USER}\n"
    )


def test_unknown_instance_shows_the_apis_400_message(fake, capsys):
    argv = [*CREATE_ARGS, "--instance-type", "g5.2xlarge", "--instance-size", "medium"]
    assert deploy_cli(fake, *argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "HTTP 400: Instance g5.2xlarge medium is not available for aws in us-east-1" in err
    assert "--instance-type nvidia-a10g --instance-size x1" in err


def test_missing_token_fails_before_any_request(fake, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    assert deploy_cli(fake, *CREATE_ARGS) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no Hugging Face token: set HF_TOKEN") and err.count("\n") == 1
    assert fake.requests == []


def test_rejected_token_is_explained(fake, capsys):
    assert deploy_cli(fake, *CREATE_ARGS, "--token", "hf_wrong", "--namespace", USER) == 1
    err = capsys.readouterr().err
    assert "the token was rejected (HTTP 401)" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--min-replicas", "2", "--max-replicas", "1"], "--min-replicas 2 is above"),
        (["--min-replicas", "1", "--scale-to-zero-timeout", "5"], "needs --min-replicas 0"),
        (["--asr-model", " "], "--asr-model is empty"),
    ],
)
def test_inconsistent_options_are_refused_before_sending(fake, capsys, argv, message):
    assert deploy_cli(fake, *CREATE_ARGS, *argv) == 1
    assert message in capsys.readouterr().err
    assert fake.requests == []


# --------------------------------------------------------------------------------------------------
# status, update, pause, resume, scale to zero, delete


def test_status_of_a_missing_endpoint(fake, capsys):
    assert deploy_cli(fake, "status", "nope") == 1
    assert capsys.readouterr().err == (
        f"error: endpoint {USER}/nope not found (HTTP 404): Endpoint nope not found\n"
    )


def test_status_describes_and_json_hides_secrets(fake, capsys):
    fake.add_endpoint(NAME, env={"ASR_MODEL": "openai/whisper-large-v3"})
    assert deploy_cli(fake, "status", NAME) == 0
    out = capsys.readouterr().out
    assert f"endpoint: {USER}/{NAME}\nstatus:   running\n" in out
    assert "aws us-east-1, gpu nvidia-a10g x1, replicas 0-1, scale to zero after 15 min" in out
    assert "env:      ASR_MODEL=openai/whisper-large-v3" in out

    assert deploy_cli(fake, "status", NAME, "--json") == 0
    raw = json.loads(capsys.readouterr().out)
    assert raw["name"] == NAME and raw["status"]["state"] == "running"


def test_update_sends_only_what_changes_and_keeps_the_other_models(fake, capsys):
    fake.add_endpoint(
        NAME,
        env={
            "ASR_MODEL": "openai/whisper-large-v3",
            "DIARIZATION_MODEL": "pyannote/speaker-diarization-community-1",
        },
    )
    argv = [
        "update", NAME,
        "--asr-model", "openai/whisper-large-v3-turbo",
        "--assistant-model", "distil-whisper/distil-large-v3",
        "--instance-type", "nvidia-a10g",  # the current value: not sent
        "--max-replicas", "2",
        *FAST_WAIT,
    ]
    assert deploy_cli(fake, *argv) == 0
    out, err = capsys.readouterr()

    (update,) = fake.requests_to("PUT", f"/v2/endpoint/{USER}/{NAME}")
    assert update.json() == {
        "compute": {"scaling": {"maxReplica": 2}},
        "model": {
            "env": {
                "ASR_MODEL": "openai/whisper-large-v3-turbo",
                "ASSISTANT_MODEL": "distil-whisper/distil-large-v3",
                "DIARIZATION_MODEL": "pyannote/speaker-diarization-community-1",
            }
        },
    }
    assert "updated env, max_replica" in err
    assert f"url: {fake.url}/endpoints/{USER}/{NAME}" in out
    assert_token_only_in_secret_and_auth(fake, out, err)


def test_update_removes_a_model_with_an_empty_value(fake):
    env = {"ASR_MODEL": "a", "ASSISTANT_MODEL": "b", "DIARIZATION_MODEL": "c"}
    fake.add_endpoint(NAME, env=env)
    assert deploy_cli(fake, "update", NAME, "--assistant-model", "", "--revision", "abc123") == 0
    (update,) = fake.requests_to("PUT", f"/v2/endpoint/{USER}/{NAME}")
    assert update.json() == {
        "model": {"revision": "abc123", "env": {"ASR_MODEL": "a", "DIARIZATION_MODEL": "c"}}
    }


def test_update_refuses_to_remove_the_asr_model(fake, capsys):
    fake.add_endpoint(NAME, env={"ASR_MODEL": "openai/whisper-large-v3"})
    assert deploy_cli(fake, "update", NAME, "--asr-model", "") == 1
    assert "--asr-model cannot be empty" in capsys.readouterr().err
    assert fake.requests_to("PUT", f"/v2/endpoint/{USER}/{NAME}") == []


def test_update_with_nothing_new_sends_nothing(fake, capsys):
    fake.add_endpoint(NAME, env={"ASR_MODEL": "openai/whisper-large-v3"})
    assert deploy_cli(fake, "update", NAME, "--asr-model", "openai/whisper-large-v3") == 0
    assert fake.requests_to("PUT", f"/v2/endpoint/{USER}/{NAME}") == []
    assert "nothing sent" in capsys.readouterr().err


def test_pause_scale_to_zero_resume_and_delete(fake, capsys):
    fake.add_endpoint(NAME, env={"ASR_MODEL": "openai/whisper-large-v3"})
    assert deploy_cli(fake, "pause", NAME) == 0
    assert "status:   paused" in capsys.readouterr().out
    assert deploy_cli(fake, "resume", NAME, *FAST_WAIT) == 0
    assert "is running" in capsys.readouterr().out
    assert deploy_cli(fake, "scale-to-zero", NAME) == 0
    assert "status:   scaledToZero" in capsys.readouterr().out

    assert deploy_cli(fake, "delete", NAME) == 1, "stdin is not a terminal: --yes is required"
    assert "not deleting" in capsys.readouterr().err
    assert deploy_cli(fake, "delete", NAME, "--yes") == 0
    assert capsys.readouterr().out == f"deleted endpoint {USER}/{NAME}\n"
    assert [r.path for r in fake.requests if r.method in ("POST", "DELETE")] == [
        f"/v2/endpoint/{USER}/{NAME}/pause",
        f"/v2/endpoint/{USER}/{NAME}/resume",
        f"/v2/endpoint/{USER}/{NAME}/scale-to-zero",
        f"/v2/endpoint/{USER}/{NAME}",
    ]


# --------------------------------------------------------------------------------------------------
# upload-handler and the handler's file list


def make_checkout(root: Path) -> Path:
    """A checkout with the handler, core and edge modules, and files that must never be uploaded."""
    files = [
        "handler.py", "config.py", "diarization_utils.py", "requirements.txt",
        "whosaid/__init__.py", "whosaid/asr.py", "whosaid/errors.py", "whosaid/formats/__init__.py",
        "whosaid/formats/srt.py",
        # edge-only
        "whosaid/cli.py", "whosaid/__main__.py", "whosaid/deploy/__init__.py", "whosaid/deploy/cli.py",
        "whosaid/convert/__init__.py", "whosaid/server.py", "whosaid/server_app.py",
        "whosaid/server/__init__.py",
        "whosaid/server/routes.py", "whosaid/bench.py", "whosaid/benchmarks/__init__.py",
        # never part of the handler repo
        "whosaid/__pycache__/asr.cpython-311.pyc", "whosaid/notes.txt", "tests/test_x.py",
        "models/whisper/config.json", "benchmarks/run.py", "scripts/setup_models.py", ".env",
        "requirements-dev.txt", "requirements-server.txt", ".ci/pipeline.yml", "README.md",
    ]
    imports = {
        "handler.py": "import torch\nfrom whosaid.asr import recognise\n",
        "config.py": "from whosaid.errors import E\n",
        "diarization_utils.py": "from whosaid.formats import srt\n",
        "whosaid/asr.py": "from .errors import E\n",
        "whosaid/cli.py": "from whosaid.asr import recognise\n",
        "whosaid/server/routes.py": "from ..asr import recognise\n",
    }
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(imports.get(name, f"# {name}\n"))
    return root


HANDLER_REPO_FILES = [
    "handler.py", "config.py", "diarization_utils.py", "requirements.txt",
    "whosaid/__init__.py", "whosaid/asr.py", "whosaid/errors.py", "whosaid/formats/__init__.py",
    "whosaid/formats/srt.py",
]


def test_handler_files_are_the_handler_repo_and_nothing_else(tmp_path):
    assert handler_files(make_checkout(tmp_path)) == HANDLER_REPO_FILES


def test_handler_files_names_what_is_missing(tmp_path):
    (tmp_path / "whosaid").mkdir()
    (tmp_path / "whosaid" / "__init__.py").write_text("")
    (tmp_path / "handler.py").write_text("")
    missing = "missing config.py, diarization_utils.py, requirements.txt"
    with pytest.raises(errors.DeployError, match=missing):
        handler_files(tmp_path)


def test_upload_handler_commits_exactly_handler_files(fake, capsys, tmp_path):
    checkout = make_checkout(tmp_path / "checkout")
    argv = ["upload-handler", "alice/whosaid-handler", "--repo-root", str(checkout)]

    assert main([*argv, "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == HANDLER_REPO_FILES
    assert fake.requests == []

    assert main([*argv, "--private", "--revision", "v1"]) == 0
    out, err = capsys.readouterr()
    assert fake.commits == {"alice/whosaid-handler": [handler_files(checkout)]}
    (create_repo,) = fake.requests_to("POST", "/api/repos/create")
    assert create_repo.json() == {
        "name": "whosaid-handler", "organization": "alice", "private": True, "type": "model"
    }
    assert fake.requests_to("POST", "/api/models/alice/whosaid-handler/branch/v1")
    assert fake.requests_to("POST", "/api/models/alice/whosaid-handler/commit/v1")
    oid = f"{1:040x}"
    assert out == f"uploaded the handler to alice/whosaid-handler at commit {oid}\n"
    assert f"--repository alice/whosaid-handler --revision {oid}" in err

    assert main(argv) == 0, "an existing repo (409 on create) is fine"
    assert len(fake.commits["alice/whosaid-handler"]) == 2
    assert "private" not in fake.requests_to("POST", "/api/repos/create")[-1].json()
    assert_token_only_in_secret_and_auth(fake, out, err)


# The rule the file list must keep: whatever handler.py imports from this checkout, directly or
# through other local modules, ships; the edge-only modules never do.
EDGE_ONLY = (
    "whosaid/cli/main.py", "whosaid/__main__.py", "whosaid/formats.py", "whosaid/cli/serve.py",
    "whosaid/cli/transcribe.py", "whosaid/cli/model_options.py",
)
EDGE_ONLY_PREFIXES = ("whosaid/server", "whosaid/bench", "whosaid/deploy/", "whosaid/convert/")


def test_handler_files_cover_every_local_module_handler_py_imports():
    assert (REPO_ROOT / "handler.py").is_file(), "handler.py is the endpoint's entry point"
    shipped = set(handler_files(REPO_ROOT))
    needed = import_closure(REPO_ROOT, ["handler.py"])
    assert needed - shipped == set(), "handler.py imports modules that upload-handler leaves out"
    assert {
        "handler.py", "whosaid/engine.py", "whosaid/recognition/recognizer.py", "whosaid/audio/loading.py"
    } <= needed


def test_handler_files_hold_no_edge_only_module():
    shipped = handler_files(REPO_ROOT)
    edge = [path for path in shipped if path in EDGE_ONLY or path.startswith(EDGE_ONLY_PREFIXES)]
    assert edge == []
    assert not [path for path in shipped if path.split("/")[0] in ("tests", "models", "benchmarks")]


def test_import_closure_follows_relative_and_package_imports(tmp_path):
    """The checker above must see what Python sees, or the coverage test proves nothing."""
    for name, text in {
        "handler.py": "import torch\nfrom config import X\nfrom whosaid.engine import run\n",
        "config.py": "X = 1\n",
        "whosaid/__init__.py": "",
        "whosaid/engine.py": "from . import asr\nfrom .results import Transcript\n"
        "def later():\n    import whosaid.formats.srt\n",
        "whosaid/asr.py": "from .errors import E\n",
        "whosaid/errors.py": "E = Exception\n",
        "whosaid/results.py": "",
        "whosaid/formats/__init__.py": "",
        "whosaid/formats/srt.py": "from ..errors import E\n",
        "whosaid/cli.py": "from whosaid.engine import run\n",
    }.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert import_closure(tmp_path, ["handler.py"]) == {
        "handler.py", "config.py", "whosaid/__init__.py", "whosaid/engine.py", "whosaid/asr.py",
        "whosaid/errors.py", "whosaid/results.py", "whosaid/formats/__init__.py",
        "whosaid/formats/srt.py",
    }


# --------------------------------------------------------------------------------------------------
# Real processes: the script entry point and `python -m whosaid deploy`


def _subprocess_env(fake: FakeEndpointsApi, tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGG"))}
    env.update(
        HF_TOKEN=TOKEN,
        HF_HOME=str(tmp_path / "hf-home"),  # no stored token, no cache of this machine
        HF_ENDPOINT=fake.hub_url,
        HF_INFERENCE_ENDPOINTS_API=fake.api_url,
        NO_PROXY="127.0.0.1",
    )
    return env


def test_script_creates_and_waits_in_a_real_process(fake, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "deploy.endpoint", *CREATE_ARGS, *FAST_WAIT],
        cwd=REPO_ROOT, env=_subprocess_env(fake, tmp_path), capture_output=True, text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"url: {fake.url}/endpoints/{USER}/{NAME}" in result.stdout
    assert fake.requests_to("POST", f"/v2/endpoint/{USER}")[0].json() == expected_create_body(TOKEN)
    assert_token_only_in_secret_and_auth(fake, result.stdout, result.stderr)


def test_module_cli_reports_errors_without_traceback(fake, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "whosaid", "deploy", "status", "nope"],
        cwd=REPO_ROOT, env=_subprocess_env(fake, tmp_path), capture_output=True, text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr == (
        f"error: endpoint {USER}/nope not found (HTTP 404): Endpoint nope not found\n"
    )
    assert result.stdout == ""
