"""`tidescale alerts` and `tidescale reviews` (filled by the alerts work)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Recording and alerting rules, Alertmanager config.", no_args_is_help=True)
reviews_app = typer.Typer(help="The model-review service (Alertmanager webhook receiver).", no_args_is_help=True)


def register_bench(bench: typer.Typer) -> None:
    """The alerts package has no benchmark."""
