"""Writing results: a JSON file per run (everything, for later comparison) and a markdown table
(what a person reads), both under benchmarks/results/."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from benchmarks.common.environment import REPO_ROOT

_NUMBER = re.compile(r"^-?\d+(\.\d+)?( %)?$")
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
# Smoke runs (CI, tests) write here so they never replace the committed latest results.
SMOKE_RESULTS_DIR = RESULTS_DIR / "tmp"


def timestamp() -> str:
    """UTC time for file names: sortable, no colons."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; numbers right-aligned, text left-aligned."""
    def cell(value: Any) -> str:
        return "–" if value is None else str(value).replace("|", "\\|")

    def is_number(value: Any) -> bool:
        return value is None or isinstance(value, (int, float)) or bool(_NUMBER.match(str(value)))

    numeric = [bool(rows) and all(is_number(row[i]) for row in rows) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---:" if is_numeric else "---" for is_numeric in numeric) + "|",
    ]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: Optional[float], digits: int = 2) -> Optional[str]:
    """A number for a table cell; None stays None (shown as a dash)."""
    return None if value is None else f"{value:.{digits}f}"


def fmt_load(load: Optional[Sequence[float]]) -> Optional[str]:
    """Load average as `uptime` shows it (1, 5, 15 min)."""
    return None if not load else " / ".join(f"{value:.2f}" for value in load)


def write_results(
    output_dir: Path, prefix: str, data: dict[str, Any], markdown: str, json_path: Optional[Path] = None
) -> tuple[Path, Path]:
    """`<prefix>-<timestamp>.json` (or `json_path`) and `<prefix>-latest.md` in `output_dir`."""
    output_dir.mkdir(parents=True, exist_ok=True)
    json_path = json_path or output_dir / f"{prefix}-{timestamp()}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    markdown_path = output_dir / f"{prefix}-latest.md"
    markdown_path.write_text(markdown.rstrip() + "\n", encoding="utf-8")
    return json_path, markdown_path
