"""The endpoint's requirements.txt: what the Inference Endpoints toolkit installs over itself.

It must keep the toolkit importable (transformers 4.57.x, no FastAPI/Starlette upgrade) and
must cover every third-party import of the files the handler repo ships.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

from whosaid.deploy import handler_files

REPO_ROOT = Path(__file__).resolve().parents[1]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(path: Path) -> dict[str, str]:
    """{canonical distribution name: version specifier} of a requirements file."""
    requirements = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = re.match(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)", line)
        assert match, line
        requirements[canonical(match.group(1))] = match.group(3)
    return requirements


def test_endpoint_requirements_keep_the_toolkit_importable() -> None:
    requirements = pinned(REPO_ROOT / "requirements.txt")
    assert re.fullmatch(r"==4\.57\.\d+", requirements["transformers"]), requirements["transformers"]
    assert requirements["torch"] == requirements["torchaudio"] == "==2.11.0"
    for web_package in ("fastapi", "starlette", "uvicorn"):
        assert web_package not in requirements
    # what the toolkit imports at start-up, gone in transformers 5
    from transformers.file_utils import is_tf_available  # noqa: F401


def third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    local = {"whosaid", "config", "handler", "diarization_utils"}
    return {name for name in names if name not in local and name not in sys.stdlib_module_names}


def test_every_import_of_the_handler_repo_is_a_requirement() -> None:
    requirements = pinned(REPO_ROOT / "requirements.txt")
    distributions = importlib.metadata.packages_distributions()
    missing = {}
    for relative in handler_files(REPO_ROOT):
        if not relative.endswith(".py"):
            continue
        for module in third_party_imports(REPO_ROOT / relative):
            providers = {canonical(name) for name in distributions.get(module, [])}
            if not providers & set(requirements):
                missing.setdefault(module, []).append(relative)
    assert missing == {}
