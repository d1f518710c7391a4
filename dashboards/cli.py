"""`tidescale dashboards` (filled by the dashboards work)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Grafana dashboards: generate JSON, preview panels as PNG.", no_args_is_help=True)


def register_bench(bench: typer.Typer) -> None:
    """The dashboards package has no benchmark."""
