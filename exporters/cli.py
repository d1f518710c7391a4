"""`tidescale exporter` and `tidescale profile` (filled by the exporters work)."""

from __future__ import annotations

import typer

app = typer.Typer(help="The exporter service: aggregatable latency, batch and queue metrics, op shares.",
                  no_args_is_help=True)
profile_app = typer.Typer(help="Profiler captures and the per-op share report (model-release gate).",
                          no_args_is_help=True)


def register_bench(bench: typer.Typer) -> None:
    """Add `bench percentiles`, `bench ingest`, `bench profiles`, `bench poll`."""
