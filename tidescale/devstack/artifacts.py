"""Generated artifacts (rules, dashboards, adapter config): one registry, one drift check.

Each component exposes `artifacts() -> dict[str, str]` mapping a repository-relative path to
the file's full expected content. `tidescale generate` writes them; `--check` exits 1 and lists
the files that differ, which CI runs so committed artifacts never drift from the Python.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import typer

from tidescale.devstack.tools import REPO_ROOT

PROVIDERS = (
    "tidescale.alerts.generate",
    "tidescale.dashboards.generate",
    "tidescale.autoscaler.generate",
    "tidescale.devstack.chart",
)


def collect() -> dict[str, str]:
    out: dict[str, str] = {}
    for mod_name in PROVIDERS:
        mod = importlib.import_module(mod_name)
        provider: Callable[[], dict[str, str]] = mod.artifacts
        for path, content in provider().items():
            if path in out:
                raise RuntimeError(f"artifact {path} produced twice (by {mod_name})")
            out[path] = content
    return out


# Folders that hold generated files only: a file there that no generator produces is stale
# (a renamed dashboard, a second copy) and counts as drift.
GENERATED_DIRS = ("deploy/helm/tidescale/files/rules", "deploy/helm/tidescale/files/alertmanager",
                  "deploy/helm/tidescale/files/dashboards", "deploy/helm/tidescale/files/adapter",
                  "deploy/helm/tidescale/files/autoscaling")


def drift(root: Path = REPO_ROOT) -> list[str]:
    """Paths whose committed content differs from what the generators produce, and stray files in
    the generated folders that nothing produces."""
    produced = collect()
    changed = []
    for rel, content in sorted(produced.items()):
        path = root / rel
        if not path.exists() or path.read_text() != content:
            changed.append(rel)
    for folder in GENERATED_DIRS:
        for path in sorted((root / folder).glob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in produced:
                changed.append(f"{rel} (not produced by any generator: delete it)")
    return changed


def write(root: Path = REPO_ROOT) -> list[str]:
    written = []
    for rel, content in sorted(collect().items()):
        path = root / rel
        if path.exists() and path.read_text() == content:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(rel)
    return written


def generate_command(
    check: bool = typer.Option(False, "--check", help="Fail (exit 1) if anything would change."),
) -> None:
    if check:
        changed = drift()
        if changed:
            typer.echo("generated artifacts are out of date; run `tidescale generate`:", err=True)
            for rel in changed:
                typer.echo(f"  {rel}", err=True)
            raise typer.Exit(1)
        typer.echo("generated artifacts are up to date")
        return
    for rel in write():
        typer.echo(f"wrote {rel}")
