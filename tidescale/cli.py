"""The `tidescale` command: the product's groups, plus the dev stack and benchmarks loaded on demand.

The product groups (exporter, profile, reviews, alerts, autoscale, dashboards) are imported eagerly;
`demo`, `fleet`, `bench`, `generate` and `dashboards preview` are resolved only when named, so that
the image, which installs no dev-stack extra, runs every product command without importing
`tidescale.devstack`, `tidescale.benches` or `tidescale.sim`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, ClassVar

import typer
from typer.core import TyperGroup
from typer.core import _click as click  # typer vendors its own click; its types are these

from tidescale import __version__
from tidescale.alerts import cli as alerts_cli
from tidescale.autoscaler import cli as autoscaler_cli
from tidescale.contracts.errors import TidescaleError
from tidescale.dashboards import cli as dashboards_cli
from tidescale.exporters import cli as exporters_cli


class LazyGroup(TyperGroup):
    """A click group some of whose commands live in modules imported only when the command is used.

    `lazy` maps a command name to (module, attribute, one-line help); the attribute is a Typer app
    (a group) or a plain function (one command).
    """

    lazy: ClassVar[dict[str, tuple[str, str, str]]] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *(n for n, (m, _, _) in self.lazy.items() if _installed(m))})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module_name, attr, short_help = self.lazy[cmd_name]
        if not _installed(module_name):
            return None
        target = getattr(importlib.import_module(module_name), attr)
        if not isinstance(target, typer.Typer):
            single = typer.Typer()
            single.command(cmd_name, help=short_help)(target)
            target = single
        command = typer.main.get_command(target)
        command.name = cmd_name
        command.short_help = short_help
        return command


def _installed(module_name: str) -> bool:
    """Whether the area a lazy command lives in (tidescale.devstack, tidescale.benches) is installed: the
    image leaves both out, and `tidescale --help` (its default command) must still work there.
    Only the `tidescale` package is imported to find out."""
    area = ".".join(module_name.split(".")[:2])
    try:
        return importlib.util.find_spec(area) is not None
    except (ImportError, ValueError):
        return False


def lazy_group(entries: dict[str, tuple[str, str, str]]) -> type[LazyGroup]:
    return type("LazyGroup", (LazyGroup,), {"lazy": entries})


# What the `devstack` extra installs: the dev stack and the benchmarks import these, the product never.
DEVSTACK_PACKAGES = frozenset({"matplotlib", "tritonclient", "pytriton"})


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tidescale {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="tidescale",
    help="Observability and autoscaling for NVIDIA Triton Inference Server on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=lazy_group({
        "demo": ("tidescale.devstack.demo", "demo_command",
                 "Run the local stack (real Triton, Prometheus, Alertmanager) and play a scenario."),
        "fleet": ("tidescale.devstack.fleet.cli", "app",
                  "The dev fleet: real Triton replicas, simulated GPUs and dcgm-exporter, traffic."),
        "cluster": ("tidescale.devstack.cluster.cli", "app",
                    "The local Kubernetes built from upstream: up, down, status, kubeconfig."),
        "bench": ("tidescale.benches.cli", "app", "Benchmarks against the peers, JSON on stdout."),
        "generate": ("tidescale.devstack.artifacts", "generate_command",
                     "Regenerate rules, dashboards and adapter config; --check fails on drift."),
    }),
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Observability and autoscaling for NVIDIA Triton Inference Server on Kubernetes."""


# `dashboards preview` queries a live Prometheus and draws with matplotlib: a dev-stack command.
dashboards_cli.app.info.cls = lazy_group({
    "preview": ("tidescale.devstack.preview", "preview_command",
                "Render each dashboard's panels to PNG from live queries (no Grafana needed)."),
})
app.add_typer(exporters_cli.app, name="exporter")
app.add_typer(exporters_cli.profile_app, name="profile")
app.add_typer(autoscaler_cli.app, name="autoscale")
app.add_typer(alerts_cli.reviews_app, name="reviews")
app.add_typer(alerts_cli.app, name="alerts")
app.add_typer(dashboards_cli.app, name="dashboards")


def main(argv: list[str] | None = None) -> Any:
    """Entry point: usage errors exit 2 (click's standalone handling), tidescale errors print a message."""
    try:
        app(args=argv)
    except TidescaleError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in DEVSTACK_PACKAGES:
            raise
        typer.echo(f"error: this command needs the dev-stack extra, which is not installed ({exc}): "
                   "pip install 'tidescale[devstack]'", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
