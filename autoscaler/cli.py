"""`tidescale autoscale` (filled by the autoscaler work)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Custom metrics, HPA/KEDA manifests, the recommender.", no_args_is_help=True)


def register_bench(bench: typer.Typer) -> None:
    """Add `bench autoscale`."""
