"""Command-line options every service's `serve` command shares (typer only: loaded as the CLI starts)."""

from __future__ import annotations

import typer

HEALTH_PORT_OPTION = typer.Option(
    None, "--health-port", help="Also listen on this port for /healthz and /readyz only, outside the client "
    "connection cap (the kubelet's probes; the chart sets it).")
