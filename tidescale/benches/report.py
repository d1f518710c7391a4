"""Where benchmark results go and how they are written (a Markdown page per benchmark)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def write_page(name: str, body: str, result: dict[str, Any], out_dir: Path = BENCH_DIR) -> Path:
    """Write docs/benchmarks/<name>.md: the prose/tables, then the raw JSON of the run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.md"
    raw = json.dumps(result, indent=2, sort_keys=True)
    path.write_text(f"{body.rstrip()}\n\n## Raw result\n\n```json\n{raw}\n```\n")
    return path
