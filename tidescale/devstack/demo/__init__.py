"""`tidescale demo`: tidescale as users run it, playing a story, watched live, summarised on disk.

By default (`--on cluster`) on the local Kubernetes cluster: real Triton pods, `helm install` of the
chart next to prometheus-operator, KEDA or prometheus-adapter, and the real HPA scaling the pods
(devstack/demo/on_cluster.py). `--on local` plays a scenario on the process stack instead: real
Triton replicas, Prometheus and Alertmanager, simulated GPUs and the recommender driving an
emulated HPA (devstack/demo/run.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tidescale.contracts.settings import load_settings


def demo_command(
    duration: float | None = typer.Option(None, "--duration", help="Seconds of traffic (default 300)."),
    out: Path = typer.Option(Path("demo-out"), "--out", help="Folder for summary.json, plots and logs."),
    scenario: str | None = typer.Option(None, "--scenario",
                                        help="steady, diurnal, surge, flash-crowd, diurnal-surge (default with "
                                             "--on local; on the cluster the default is the four-part story)."),
    base_rps: float | None = typer.Option(None, "--base-rps", help="Mean request rate of the scenario."),
    trace_csv: Path | None = typer.Option(None, "--trace-csv", help="Replay a CSV of request timestamps."),
    trace_unit: str | None = typer.Option(None, "--trace-unit", help="The unit of --trace-csv's numeric "
                                          "timestamps, s, ms, us or ns (default: its header's or their size's)."),
    time_scale: float | None = typer.Option(None, "--time-scale", help="Time compression of --trace-csv."),
    min_replicas: int | None = typer.Option(None, "--min-replicas"),
    max_replicas: int | None = typer.Option(None, "--max-replicas"),
    cold_start: float | None = typer.Option(None, "--cold-start", help="Model load time of a new replica (s)."),
    faults: bool | None = typer.Option(None, "--faults/--no-faults", help="Inject a GPU XID error and a "
                                       "string-heavy profile half-way."),
    live: bool | None = typer.Option(None, "--live/--no-live", help="Live terminal table."),
    seed: int | None = typer.Option(None, "--seed", min=0),
    config: Path | None = typer.Option(None, "--config", help="YAML file with a `demo:` section."),
    on: str | None = typer.Option(None, "--on", help="cluster (default): the local Kubernetes, the chart and the "
                                  "real HPA (needs root); local: the process stack with an emulated HPA."),
    mode: str | None = typer.Option(None, "--mode", help="On the cluster: keda (default) or adapter."),
) -> None:
    """Run the demo and write DIR/summary.json plus PNG plots."""
    from tidescale.devstack.demo.run import run_demo
    from tidescale.devstack.demo.settings import DemoSettings

    settings = load_settings(
        DemoSettings, config, duration_s=duration, scenario=scenario, base_rps=base_rps, trace_csv=trace_csv,
        trace_unit=trace_unit, time_scale=time_scale, min_replicas=min_replicas, max_replicas=max_replicas,
        cold_start_s=cold_start, inject_faults=faults, live=live, seed=seed, on=on, autoscaling_mode=mode,
    )
    if settings.on == "cluster":
        from tidescale.devstack.demo.on_cluster import run_cluster_demo

        summary = run_cluster_demo(settings, out, settings.autoscaling_mode)
        falls = [f for phase in summary["hpa"]["desired_fell_under_load"].values() for f in phase]
        overload = summary["overload_by_design"]
        typer.echo(f"summary: {out / 'summary.json'}  (requests within the SLO while the load fits maxReplicas "
                   f"{summary['requests_within_slo_within_capacity']}; {overload['phase']}, overload by design, "
                   f"{overload['requests_within_slo']}; HPA desired fell under load {len(falls)} time(s); "
                   f"{_spread(summary)}"
                   f"replicas {summary['hpa']['replicas_seen']['min']}..{summary['hpa']['replicas_seen']['max']}, "
                   f"alerts {', '.join(summary['alerts_fired']) or 'none'}, "
                   f"reviews {len(summary['reviews_opened'])})")
        return
    summary = run_demo(settings, out)
    typer.echo(f"summary: {out / 'summary.json'}  (p99 {summary['latency_p99_s']:.3f}s, "
               f"replicas {summary['replicas']['min']}..{summary['replicas']['max']}, "
               f"alerts {', '.join(summary['alerts_fired']) or 'none'})")


def _spread(summary: dict[str, Any]) -> str:
    """The surge's load spread in a few words: where the Service kept it on one pod, the replicas added
    did not carry the surge, whatever the autoscaler asked."""
    spread = summary.get("load_spread", {}).get("surge 3x") or {}
    busiest, even = spread.get("busiest_pod_share"), spread.get("even_share")
    if busiest is None or even is None:
        return ""
    return f"busiest pod's share of the surge {100 * busiest:.0f} % (even {100 * even:.0f} %); "
