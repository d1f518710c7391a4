"""`tidescale sim`: the local fleet of real Triton replicas with simulated GPUs (filled by the fleet work)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Local fleet: real Triton replicas, simulated GPUs and dcgm-exporter, traffic.",
                  no_args_is_help=True)


def register_bench(bench: typer.Typer) -> None:
    """Add `bench sim` and `bench fidelity`."""
