"""Which files the Inference Endpoints handler repo ships: the root files and exactly the core
modules they import (the import closure, found with `ast`, nothing executed)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional, Sequence

from whosaid.deploy.errors import DeployError

# Files at the root of the handler repo; the core modules they import ship beside them.
HANDLER_ROOT_FILES = ("handler.py", "config.py", "diarization_utils.py", "requirements.txt")

# The checkout this package lives in: whosaid/deploy/ is two levels below it.
PACKAGE_REPO_ROOT = Path(__file__).resolve().parents[2]


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

