"""`tidescale bench sim` and `tidescale bench fidelity` (heavy imports stay inside the commands)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def _emit(result: dict[str, Any], as_json: bool, summary: str) -> None:
    """JSON on stdout with --json, else a one-screen summary (the full JSON is in the docs page)."""
    if as_json:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        typer.echo(summary)


def register(bench: typer.Typer) -> None:
    """Mount the simulator benchmarks on the `bench` group."""

    @bench.command("sim")
    def sim_command(
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
        quick: bool = typer.Option(False, "--quick", help="5 simulated minutes instead of 1 hour."),
        record: bool = typer.Option(True, "--record/--no-record", help="Write docs/benchmarks/sim.md."),
    ) -> None:
        """Simulate 1 h at 2,000 req/s over 50 replicas; compare with a naive event loop."""
        from rich.console import Console
        from rich.progress import Progress

        from tidescale.benches import sim

        duration = 300.0 if quick else 3600.0
        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("simulating", total=duration)
            result = sim.run_bench(quick, progress=lambda t: progress.update(task, completed=t))
        if record:
            sim.record(result)
        _emit(result, as_json, sim.render(result))

    @bench.command("fidelity")
    def fidelity_command(
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
        quick: bool = typer.Option(False, "--quick", help="~10 s per load point instead of ~25 s."),
        seconds: float | None = typer.Option(None, "--seconds", min=2.0, max=600.0,
                                             help="Seconds of traffic per load point (overrides --quick)."),
        real: bool = typer.Option(True, "--real/--no-real",
                                  help="Run a real Triton replica (--no-real: simulator-only parts)."),
        workdir: Path | None = typer.Option(None, help="Keep Triton's model repository, logs and traces here."),
        record: bool = typer.Option(True, "--record/--no-record",
                                    help="Write docs/benchmarks/fidelity.md and fidelity.png."),
    ) -> None:
        """Real Triton vs the simulator at 50/80/95/120 % load, and the published queue-growth case."""
        from rich.console import Console

        from tidescale.benches import fidelity

        console = Console(stderr=True)
        result = fidelity.run_bench(quick=quick, real=real, workdir=workdir, log=console.log, seconds=seconds)
        if record:
            fidelity.record(result)
        _emit(result, as_json, fidelity.render(result))
