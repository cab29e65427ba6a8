"""The docs a newcomer reads stay short and whole, and the tree keeps one of each shared tool: the
README under 250 lines, every relative link of README.md and docs/*.md pointing at a file (and, into
a markdown file, at one of its headings), one RTTM reader and one DER set-up
(benchmarks/common/scoring.py), and every folder of tests a package (so that two folders may hold
test modules of the same name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250
DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SCORING = REPO_ROOT / "benchmarks" / "common" / "scoring.py"
# Markdown links and images: [text](target) or ![alt](target), target without spaces.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def markdown_links(path: Path) -> list[str]:
    """The link targets of a markdown file, outside code blocks and code spans."""
    targets, in_fence = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        if not in_fence:
            targets += LINK.findall(re.sub(r"`[^`]*`", "", line))
    return targets


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings: lower-cased, punctuation dropped, spaces
    as hyphens (outside code blocks)."""
    anchors, in_fence = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        if not in_fence and re.match(r"^#{1,6} ", line):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_the_readme_stays_under_250_lines() -> None:
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines: move detail to docs/"


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_relative_link_points_at_an_existing_file(doc: Path) -> None:
    broken = []
    for target in markdown_links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path_part, _, anchor = target.partition("#")
        linked = (doc.parent / path_part).resolve() if path_part else doc
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif not linked.is_relative_to(REPO_ROOT):
            broken.append(f"{target}: outside the repository")
        elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
            broken.append(f"{target}: no such heading in {linked.relative_to(REPO_ROOT)}")
    assert broken == [], f"{doc.relative_to(REPO_ROOT)}: {broken}"


def python_files() -> list[Path]:
    return [
        path
        for folder in ("whosaid", "tests", "benchmarks", "scripts", "deploy")
        for path in sorted((REPO_ROOT / folder).rglob("*.py"))
    ] + sorted(REPO_ROOT.glob("*.py"))


def test_one_rttm_reader_and_one_der_set_up() -> None:
    """RTTM is read (a SPEAKER line's fields split out: the speaker is the eighth) and
    pyannote.metrics' DiarizationErrorRate is made only in benchmarks/common/scoring.py; the rest
    call read_rttm, parse_rttm, rttm_turns, rttm_speakers, new_metric or der."""
    this_file = Path(__file__).resolve()
    readers, metrics = [], []
    for path in python_files():
        if path.resolve() in (SCORING, this_file):
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"(split\(\)|fields|\bf)\[7\]", text):
            readers.append(str(path.relative_to(REPO_ROOT)))
        if "DiarizationErrorRate" in text:
            metrics.append(str(path.relative_to(REPO_ROOT)))
    assert readers == [], f"RTTM read outside benchmarks/common/scoring.py: {readers}"
    assert metrics == [], f"DiarizationErrorRate set up outside benchmarks/common/scoring.py: {metrics}"


def test_every_test_folder_is_a_package() -> None:
    """Test modules are imported by their dotted path (tests.asr.test_x), which needs an
    __init__.py in every folder that holds them."""
    folders = {path.parent for path in (REPO_ROOT / "tests").rglob("test_*.py")}
    missing = [str(path.relative_to(REPO_ROOT)) for path in sorted(folders) if not (path / "__init__.py").exists()]
    assert missing == [], f"folders of tests without __init__.py: {missing}"
