"""The `tidescale` command: one group per component, errors as messages with exit codes."""

from __future__ import annotations

import sys

import typer

from alerts import cli as alerts_cli
from autoscaler import cli as autoscaler_cli
from dashboards import cli as dashboards_cli
from exporters import cli as exporters_cli
from tidescale import artifacts, demo, fleet_cli
from tidescale.errors import TidescaleError

app = typer.Typer(
    name="tidescale",
    help="Observability and autoscaling for NVIDIA Triton Inference Server on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
bench_app = typer.Typer(help="Benchmarks against the peers, JSON on stdout (results in docs/benchmarks/).",
                        no_args_is_help=True)

app.command("demo", help="Run the local stack (real Triton, Prometheus, Alertmanager) and play a scenario.")(
    demo.demo_command
)
app.add_typer(fleet_cli.app, name="sim")
app.add_typer(exporters_cli.app, name="exporter")
app.add_typer(exporters_cli.profile_app, name="profile")
app.add_typer(autoscaler_cli.app, name="autoscale")
app.add_typer(alerts_cli.reviews_app, name="reviews")
app.add_typer(alerts_cli.app, name="alerts")
app.add_typer(dashboards_cli.app, name="dashboards")
app.add_typer(bench_app, name="bench")
app.command("generate", help="Regenerate rules, dashboards and adapter config; --check fails on drift.")(
    artifacts.generate_command
)

for module in (fleet_cli, exporters_cli, autoscaler_cli, alerts_cli, dashboards_cli):
    module.register_bench(bench_app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: usage errors exit 2 (click's standalone handling), tidescale errors print a message."""
    try:
        app(args=argv)
    except TidescaleError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
