"""The tree shows the architecture: the package's parts (its subpackages and root modules) import
one another without a cycle, and no `__init__.py` imports anything (the handler repo ships
exactly what handler.py imports, so a package's `__init__` must not pull its siblings in)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Optional

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "whosaid"


def part_of(module: str) -> Optional[str]:
    """`whosaid.speakers.builtin` -> `whosaid.speakers`; `whosaid.engine` -> `whosaid.engine`;
    None outside the package or for the package itself."""
    parts = module.split(".")
    if parts[0] != "whosaid" or len(parts) < 2:
        return None
    if (PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file():
        return f"whosaid.{parts[1]}"
    return None


def imported_modules(path: Path) -> Iterator[str]:
    """Absolute module names a file imports, anywhere in it (imports inside functions count)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            if node.module:
                yield node.module
                yield from (f"{node.module}.{alias.name}" for alias in node.names)


def part_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
        source = part_of(module)
        if source is None:
            continue
        for target in filter(None, map(part_of, imported_modules(path))):
            if target != source:
                graph.setdefault(source, set()).add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_parts_import_one_another_without_a_cycle() -> None:
    graph = part_graph()
    assert {"whosaid.engine", "whosaid.recognition", "whosaid.speakers", "whosaid.audio"} <= set(graph)
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_init_file_imports_anything() -> None:
    for path in PACKAGE.rglob("__init__.py"):
        body = ast.parse(path.read_text()).body
        imports = [node for node in body if isinstance(node, (ast.Import, ast.ImportFrom))]
        assert imports == [], f"{path.relative_to(REPO_ROOT)} imports"


def test_the_recognizers_kernels_import_nothing_of_the_package_outside_them() -> None:
    """whosaid.recognition.kernels holds the CPU kernels (the decoder step, its linear products):
    the decoding logic beside them calls them, never the other way round."""
    kernels = PACKAGE / "recognition" / "kernels"
    assert sorted(path.name for path in kernels.glob("*.py")) == ["__init__.py", "decoder_step.py", "products.py"]
    for path in kernels.rglob("*.py"):
        outside = [
            module
            for module in imported_modules(path)
            if module.startswith("whosaid.") and not module.startswith("whosaid.recognition.kernels")
        ]
        assert outside == [], f"{path.relative_to(REPO_ROOT)} imports {outside}"


# The recognizer's window-transcription path: `SpeechRecognizer._transcribe_track_windows` and its
# stages (recognizer), the greedy loop and the decoding measures (greedy), the logits rules
# (logits_rules), word timing (word_timing) and the segment and span types (segments). Every
# function there reads top to bottom in at most this many lines, docstring included. The CPU
# kernels (recognition/kernels) are outside it: their step is one unrolled piece of arithmetic.
RECOGNIZER_PATH = ("recognizer.py", "greedy.py", "logits_rules.py", "word_timing.py", "segments.py")
MAX_FUNCTION_LINES = 40


def function_lengths(path: Path) -> dict[str, int]:
    """Lines of each function of a file (methods as Class.name, nested ones as outer.name)."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.")

    visit(ast.parse(path.read_text()), "")
    return lengths


def test_the_recognizers_window_path_has_no_function_over_40_lines() -> None:
    lengths = {
        f"{name}:{function}": length
        for name in RECOGNIZER_PATH
        for function, length in function_lengths(PACKAGE / "recognition" / name).items()
    }
    assert "recognizer.py:SpeechRecognizer._transcribe_track_windows" in lengths
    assert "greedy.py:GreedyWhisperDecoder._decode_rows" in lengths
    too_long = {function: length for function, length in lengths.items() if length > MAX_FUNCTION_LINES}
    assert too_long == {}


def test_the_recognizer_passes_one_segment_type_from_the_decoder_to_the_spans() -> None:
    """`DecodedSegment` is the only segment type of the path: no other segment class, and no
    tuple or dict of times in its place."""
    for name in RECOGNIZER_PATH:
        source = (PACKAGE / "recognition" / name).read_text()
        classes = {node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)}
        assert not {cls for cls in classes if "Segment" in cls} - {"DecodedSegment"}, name
        assert '["start"]' not in source and '["end"]' not in source, name
