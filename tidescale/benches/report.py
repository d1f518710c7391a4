"""Where benchmark results go and how they are written (a Markdown page per benchmark)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tidescale.devstack.tools import REPO_ROOT


def is_source_checkout(root: Path) -> bool:
    """True for a clone (editable install); False for a wheel, whose root is site-packages."""
    return (root / "pyproject.toml").is_file() and not {"site-packages", "dist-packages"} & set(root.parts)


def bench_dir(root: Path = REPO_ROOT, env: dict[str, str] | None = None, cwd: Path | None = None) -> Path:
    """Where benchmarks record: $TIDESCALE_BENCH_DIR, else the checkout's docs/benchmarks, else
    ./tidescale-benchmarks. Never a directory inside an installed package, which a later upgrade
    would wipe and which may not be writable at all."""
    override = (os.environ if env is None else env).get("TIDESCALE_BENCH_DIR")
    if override:
        return Path(override)
    if is_source_checkout(root):
        return root / "docs" / "benchmarks"
    return (cwd or Path.cwd()) / "tidescale-benchmarks"


BENCH_DIR = bench_dir()


def recorded(value: Any, digits: int = 4) -> Any:
    """A float as the recorded JSON keeps it (rounded, so a page's diff shows what moved); anything else as is."""
    return round(value, digits) if isinstance(value, float) else value


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def json_block(result: dict[str, Any]) -> list[str]:
    """The run's JSON as a page's closing lines, for pages that write their JSON without a heading."""
    return ["```json", json.dumps(result, indent=1, sort_keys=True), "```", ""]


def write_page(name: str, body: str, result: dict[str, Any], out_dir: Path = BENCH_DIR) -> Path:
    """Write docs/benchmarks/<name>.md: the prose/tables, then the raw JSON of the run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.md"
    raw = json.dumps(result, indent=2, sort_keys=True)
    path.write_text(f"{body.rstrip()}\n\n## Raw result\n\n```json\n{raw}\n```\n")
    return path


def save_figure(fig: Any, path: Path) -> None:
    """Lay out, write (creating the folder) and close a matplotlib figure, as every bench plot is."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
