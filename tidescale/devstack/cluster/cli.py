"""`tidescale cluster`: the local Kubernetes built from upstream (see docs/local-cluster.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from tidescale.devstack.cluster.config import ClusterConfig

app = typer.Typer(help="The local Kubernetes cluster: upstream control plane, node agent, add-ons.",
                  no_args_is_help=True)


def _config(nodes: int = 1) -> ClusterConfig:
    return ClusterConfig(nodes=nodes)


@app.command()
def up(nodes: int = typer.Option(1, min=1, max=8, help="Nodes to register (one agent each)."),
       monitoring: bool = typer.Option(True, help="Install prometheus-operator with a Prometheus and an Alertmanager.")
       ) -> None:
    """Bring the cluster up (idempotent); Ctrl-C or a failure tears everything down."""
    from tidescale.devstack.cluster import lifecycle

    start = time.monotonic()
    steps = lifecycle.up(_config(nodes), progress=lambda s: typer.echo(f"[cluster] {s}", err=True),
                         monitoring=monitoring)
    if steps:
        typer.echo(f"[cluster] up in {time.monotonic() - start:.1f} s; "
                   f"export KUBECONFIG=$(tidescale cluster kubeconfig)", err=True)


@app.command()
def down() -> None:
    """Stop every process and remove every namespace, link, mount point and rule the cluster made."""
    from tidescale.devstack.cluster import lifecycle

    lifecycle.down(_config())
    typer.echo("[cluster] down", err=True)


@app.command()
def status() -> None:
    """Processes, nodes and leftovers, as JSON; exit 1 when the cluster is not up."""
    from tidescale.devstack.cluster import lifecycle

    report = lifecycle.status(_config())
    typer.echo(json.dumps(report, indent=2))
    raise typer.Exit(0 if report["up"] else 1)


@app.command()
def kubeconfig() -> None:
    """Print the admin kubeconfig's path, for `export KUBECONFIG=$(tidescale cluster kubeconfig)`."""
    from tidescale.devstack.cluster import lifecycle

    typer.echo(str(lifecycle.kubeconfig_path(_config())))


@app.command()
def usage() -> None:
    """Resident memory (MiB) and CPU seconds of each cluster process and pod container, as JSON."""
    from tidescale.devstack.cluster.usage import usage as measure

    typer.echo(json.dumps(measure(_config()), indent=2))


@app.command("dcgm-exporter", hidden=True)
def dcgm_exporter(
        pod_resources: Path = typer.Option(Path("/var/lib/kubelet/pod-resources/pod-resources.json"),
                                           help="The node's GPU assignments, written by the node agent."),
        hostname: str = typer.Option(..., envvar="NODE_NAME", help="The node's name (the Hostname label)."),
        gpus: int = typer.Option(4, min=1, max=16), port: int = typer.Option(9400, min=1, max=65535),
        fault_token: str = typer.Option(..., envvar="TIDESCALE_DCGM_FAULT_TOKEN", show_default=False,
                                        help="Bearer token for POST /faults."),
        dcgm_version: str = typer.Option("4.x", "--dcgm-version", envvar="TIDESCALE_DCGM_EXPORTER_VERSION",
                                         help="Names and units of dcgm-exporter 4.x or 4.9.")) -> None:
    """The simulated dcgm-exporter's container process (image dcgm-exporter on the local cluster)."""
    from tidescale.devstack.cluster.dcgm import serve
    from tidescale.devstack.fleet.gpus import DCGM_VERSIONS

    if dcgm_version not in DCGM_VERSIONS:
        raise typer.BadParameter(f"must be one of {', '.join(DCGM_VERSIONS)}", param_hint="--dcgm-version")
    serve(pod_resources, hostname, gpus, port, fault_token, dcgm_version)
