"""`tidescale autoscale` (render, capacity, recommend) and `tidescale bench autoscale`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tidescale.contracts.prometheus import DEFAULT_PROMETHEUS_URL
from tidescale.contracts.serveopts import HEALTH_PORT_OPTION
from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S

app = typer.Typer(help="Custom metrics, HPA/KEDA manifests, the recommender.", no_args_is_help=True)


@app.command("render")
def render_command(
    deployment: str = typer.Option(..., "--deployment", help="Triton Deployment to scale."),
    namespace: str = typer.Option(..., "--namespace", help="Its namespace."),
    model: str = typer.Option(..., "--model", help="The model whose load drives it."),
    min_replicas: int = typer.Option(1, "--min-replicas"),
    max_replicas: int = typer.Option(20, "--max-replicas"),
    keda: bool = typer.Option(False, "--keda", help="A KEDA ScaledObject instead of HPA + prometheus-adapter."),
    slo_latency_threshold: float | None = typer.Option(None, "--slo-latency-threshold", "--slo-p99",
                                                       help="Latency SLO (P99 seconds) for the recommender."),
    prometheus_url: str = typer.Option(DEFAULT_PROMETHEUS_URL, "--prometheus-url",
                                       help="Prometheus as KEDA reaches it."),
    recommender_url: str | None = typer.Option(
        None, "--recommender-url", help="With --keda: the recommender's Service as KEDA reaches it "
        "(http://SERVICE.NAMESPACE.svc:PORT); KEDA then reads its answer directly, not through Prometheus."),
    legacy_tolerance: bool = typer.Option(False, "--legacy-tolerance",
                                          help="Cluster without behavior.*.tolerance (Kubernetes < 1.33)."),
    adapter_namespace: str = typer.Option("monitoring", "--adapter-namespace",
                                          help="Namespace of prometheus-adapter's ConfigMap."),
    prescale: list[str] = typer.Option(
        [], "--prescale", help="A known peak, 'TIMEZONE;START CRON;END CRON;REPLICAS' (KEDA cron trigger; "
        "repeatable; needs --keda)."),
    hpa_name: str | None = typer.Option(
        None, "--hpa-name", help="The HPA that scales the Deployment (default: its name). An HPA of yours "
        "of that name is taken over in place (KEDA adopts it; Helm once it carries the release's annotations)."),
    max_batch_exec_ms: float | None = typer.Option(
        None, "--max-batch-exec-ms", help="P99 execution time of the model's largest batch (ms; e.g. "
        "perf_analyzer's P99 at the max batch size, concurrency 1): prints the recommended queue policy, "
        "timeout = SLO minus it, REJECT."),
) -> None:
    """Print the HPA (or KEDA ScaledObject) and the prometheus-adapter config as YAML."""
    from tidescale.autoscaler.manifests import PreScale, Target, render

    target = Target(deployment, namespace, model, min_replicas, max_replicas, slo_latency_threshold,
                    tuple(PreScale.parse(p) for p in prescale), hpa_name=hpa_name)
    typer.echo(render(target, keda=keda, prometheus_url=prometheus_url, legacy=legacy_tolerance,
                      adapter_namespace=adapter_namespace, recommender_url=recommender_url,
                      max_batch_exec_s=None if max_batch_exec_ms is None else max_batch_exec_ms / 1e3), nl=False)


@app.command("capacity")
def capacity_command(
    profile: Path = typer.Option(..., "--profile", help="perf_analyzer CSV (-f)."),
    slo_latency_threshold: float = typer.Option(SLO_LATENCY_THRESHOLD_S, "--slo-latency-threshold", "--slo-p99",
                                                help="Latency SLO, P99 seconds."),
    replicas: int = typer.Option(1, "--replicas", help="Replicas the profile was measured on, through the "
                                 "Service: its throughput is theirs together."),
) -> None:
    """Per-replica capacity at the SLO from a load-test profile."""
    from tidescale.autoscaler.capacity import load_capacity

    typer.echo(json.dumps({"profile": str(profile), "slo_latency_threshold_s": slo_latency_threshold,
                           "replicas": replicas,
                           "capacity_rps": load_capacity(profile, slo_latency_threshold, replicas)}))


@app.command("recommend")
def recommend_command(
    config: Path | None = typer.Option(None, "--config", help="YAML file with a `recommender:` section."),
    prometheus_url: str | None = typer.Option(None, "--prometheus-url"),
    host: str | None = typer.Option(None, "--host"),
    port: int | None = typer.Option(None, "--port"),
    health_port: int | None = HEALTH_PORT_OPTION,
    interval: float | None = typer.Option(None, "--interval", help="Seconds between evaluations."),
    profile: Path | None = typer.Option(None, "--profile", help="perf_analyzer CSV for the capacity."),
    capacity_rps: float | None = typer.Option(None, "--capacity-rps", help="Capacity per replica at the SLO."),
    slo_latency_threshold: float | None = typer.Option(None, "--slo-latency-threshold", "--slo-p99"),
    once: bool = typer.Option(False, "--once", help="Evaluate once, print JSON, exit."),
    print_config: bool = typer.Option(False, "--print-config",
                                      help="Print the effective settings (tuning resolved, per target) as JSON, exit."),
) -> None:
    """Run the recommender service (`/metrics`, `/healthz`), or one evaluation with --once."""
    from tidescale.autoscaler.service import RecommenderService
    from tidescale.autoscaler.settings import RecommenderSettings
    from tidescale.contracts.settings import load_settings

    settings = load_settings(RecommenderSettings, config, prometheus_url=prometheus_url, host=host, port=port,
                             health_port=health_port, interval_s=interval, profile=profile,
                             capacity_rps=capacity_rps, slo_latency_threshold_s=slo_latency_threshold)
    if print_config:
        typer.echo(json.dumps(settings.effective_config(), indent=2, sort_keys=True))
        return
    service = RecommenderService(settings)
    if once:
        states = service.evaluate()
        typer.echo(json.dumps({f"{ns}/{dep}": {"desired": st.published, "failsafe": st.failsafe,
                                               "detail": st.detail,
                                               "capacity_rps": round(st.recommender.capacity_rps, 2)}
                               for (ns, dep), st in states.items()}))
        return
    from tidescale.autoscaler.app import serve

    serve(service)
