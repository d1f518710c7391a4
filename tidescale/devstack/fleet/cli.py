"""`tidescale fleet`: the dev fleet of real Triton replicas with simulated GPUs and dcgm-exporter."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tidescale.contracts.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console, Group

    from tidescale.devstack.fleet.loadgen import LoadGenerator
    from tidescale.devstack.fleet.stack import FleetStack
    from tidescale.sim.traffic import Scenario

app = typer.Typer(help="Local fleet: real Triton replicas, simulated GPUs and dcgm-exporter, traffic.",
                  no_args_is_help=True)

SNAPSHOT_KINDS = ("triton-metrics", "triton-stats", "dcgm-metrics")


@contextlib.contextmanager
def _workdir(path: Path | None, prefix: str) -> Iterator[Path]:
    """The given directory (kept), or a temporary one removed afterwards."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def parse_model_mix(text: str) -> dict[str, float]:
    """`resnet50=3,ctr_ranker=1` → weights; a bare name has weight 1."""
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, weight = part.partition("=")
        try:
            mix[name.strip()] = float(weight) if weight else 1.0
        except ValueError:
            raise UsageError(f"--models: weight {weight!r} of {name!r} is not a number") from None
    if not mix:
        raise UsageError("--models needs at least one model name")
    return mix


def build_scenario(name: str, base_rps: float, duration: float, trace_csv: Path | None, time_scale: float,
                   rate_scale: float, seed: int, trace_unit: str | None = None) -> Scenario:
    """A built-in scenario, or a replayed trace cut to *duration* seconds."""
    from dataclasses import replace

    from tidescale.sim import traffic

    if trace_csv is None:
        return traffic.scenario(name, base_rps, duration)
    if duration <= 0:
        raise UsageError(f"duration must be > 0 s, got {duration}")
    sc = traffic.replay(trace_csv, time_scale=time_scale, rate_scale=rate_scale, seed=seed, unit=trace_unit)
    return replace(sc, duration_s=min(sc.duration_s, duration))


def _fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _live_table(stack: FleetStack, gen: LoadGenerator, duration: float) -> Group:
    from rich.console import Group
    from rich.table import Table

    stats = gen.stats(window_s=10.0)
    table = Table(title=f"tidescale fleet  t={gen.elapsed():.0f}/{duration:.0f}s  "
                        f"ready {len(stack.fleet.ready_replicas())}/{stack.fleet.spec_replicas}")
    for col in ("req/s (10s)", "P50 ms", "P95 ms", "P99 ms", "errors", "dropped", "in flight", "sent"):
        table.add_column(col, justify="right")
    table.add_row(f"{stats.completed_rps:.1f}", _fmt_ms(stats.p50_s), _fmt_ms(stats.p95_s), _fmt_ms(stats.p99_s),
                  str(stats.errors), str(stats.dropped), str(stats.in_flight), str(stats.total_sent))
    pods = Table(show_header=True)
    for col in ("pod", "ready", "http", "GPU util %"):
        pods.add_column(col)
    for replica in stack.fleet.replicas:
        placed = stack.gpus.node_of(replica.pod)
        util = "-" if placed is None else f"{placed[0].states[placed[1]].util * 100:.0f}"
        pods.add_row(replica.pod, "yes" if replica.ready else "no", replica.http_url, util)
    return Group(table, pods)


@app.command("run")
def run_command(
    config: Path | None = typer.Option(None, "--config", help="YAML file; its `sim` section sets defaults."),
    replicas: int | None = typer.Option(None, "--replicas", help="Triton replicas (pods) to run [2]."),
    scenario: str | None = typer.Option(None, "--scenario", help="Built-in traffic scenario [diurnal-surge]."),
    duration: float | None = typer.Option(None, "--duration", help="Seconds of traffic [120]."),
    base_rps: float | None = typer.Option(None, "--base-rps", help="Base request rate of the scenario [20]."),
    trace_csv: Path | None = typer.Option(None, "--trace-csv", help="Replay a recorded trace instead."),
    trace_unit: str | None = typer.Option(None, "--trace-unit", help="Unit of the trace's numeric timestamps: "
                                          "s, ms, us or ns [its header's, or their size's]."),
    time_scale: float | None = typer.Option(None, "--time-scale", help="Trace time factor (0.1: 1 h in 6 min)."),
    rate_scale: float | None = typer.Option(None, "--rate-scale", help="Trace rate factor [1]."),
    cold_start: float | None = typer.Option(None, "--cold-start", help="Model load seconds per replica start [45]."),
    models: str | None = typer.Option(None, "--models", help="Request mix, name=weight,... [resnet50=1,ctr_ranker=1]"),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node", help="Simulated GPUs on the GPU node [8]."),
    trace_mode: str | None = typer.Option(None, "--trace-mode", help="off, triton or opentelemetry [off]."),
    trace_rate: int | None = typer.Option(None, "--trace-rate", help="Trace 1 request in N [100]."),
    otlp_url: str | None = typer.Option(None, "--otlp-url", help="OTLP/HTTP endpoint for opentelemetry traces."),
    summary_latencies: bool | None = typer.Option(None, "--summary-latencies/--no-summary-latencies",
                                                  help="Triton's quantile summaries [off]."),
    seed: int | None = typer.Option(None, "--seed", min=0),
    workdir: Path | None = typer.Option(None, "--workdir", help="Keep logs and traces here (default: temp)."),
) -> None:
    """Start the fleet and simulated GPU node, play traffic, show a live table; Ctrl-C stops everything."""
    from rich.console import Console
    from rich.live import Live

    from tidescale.contracts.settings import load_settings
    from tidescale.devstack.fleet.loadgen import LoadGenerator
    from tidescale.devstack.fleet.model_repo import DEFAULT_MODELS, with_load_seconds
    from tidescale.devstack.fleet.settings import FleetSettings
    from tidescale.devstack.fleet.stack import FleetStack

    cfg = load_settings(FleetSettings, config, replicas=replicas, scenario=scenario, duration=duration,
                        base_rps=base_rps, time_scale=time_scale, rate_scale=rate_scale, cold_start=cold_start,
                        models=models, gpus_per_node=gpus_per_node, trace_mode=trace_mode, trace_rate=trace_rate,
                        otlp_url=otlp_url, summary_latencies=summary_latencies, seed=seed)
    sc = build_scenario(cfg.scenario, cfg.base_rps, cfg.duration, trace_csv, cfg.time_scale, cfg.rate_scale,
                        cfg.seed, trace_unit)
    mix = parse_model_mix(cfg.models)
    known = {m.name for m in DEFAULT_MODELS}
    if set(mix) - known:
        raise UsageError(f"--models: unknown {sorted(set(mix) - known)}; known: {sorted(known)}")
    err = Console(stderr=True)
    if sc.reading:
        err.print(f"trace {sc.name.removeprefix('trace:')}: {sc.reading}", markup=False, highlight=False)
    with _workdir(workdir, "tidescale-sim-") as wd:
        stack = FleetStack(wd, with_load_seconds(DEFAULT_MODELS, cfg.cold_start), replicas=cfg.replicas,
                           namespace=cfg.namespace, deployment=cfg.deployment, trace=cfg.trace(),
                           summary_latencies=cfg.summary_latencies, gpus_per_node=cfg.gpus_per_node, seed=cfg.seed)
        gen: LoadGenerator | None = None
        try:
            with err.status(f"starting {cfg.replicas} Triton replicas (cold start {cfg.cold_start:g}s)"):
                stack.start()
            _announce(err, stack, wd)
            gen = LoadGenerator(sc, stack.fleet.ready_urls, mix, seed=cfg.seed,
                                max_in_flight=cfg.max_in_flight).start()
            with Live(_live_table(stack, gen, sc.duration_s), console=err, refresh_per_second=2) as live:
                while gen.running:
                    time.sleep(0.5)
                    live.update(_live_table(stack, gen, sc.duration_s))
            final = gen.stats(window_s=gen.elapsed() + 60.0)
            err.print(f"done: {final.total_sent} sent, {final.total_errors} errors, "
                      f"P99 {_fmt_ms(final.p99_s)} ms")
        except KeyboardInterrupt:
            err.print("interrupted: stopping the fleet")
        finally:
            if gen is not None:
                gen.stop()
            stack.stop()


def _announce(err: Console, stack: FleetStack, workdir: Path) -> None:
    """Print scrape addresses; write each GPU node's fault token to a private file, never to the console."""
    targets = stack.targets()
    err.print(f"triton metrics: {', '.join(a for a, _ in targets.triton)}")
    err.print(f"kube-state-metrics: {targets.kube_state_metrics[0][0]}")
    for node in stack.gpus.nodes:
        token_file = workdir / f"{node.hostname}.fault-token"
        token_file.touch(mode=0o600)
        token_file.write_text(node.fault_token)
        err.print(f"dcgm-exporter {node.hostname}: {node.address} (POST /faults, bearer token in {token_file})")


@app.command("snapshot")
def snapshot_command(
    what: str = typer.Option("triton-metrics", "--what", help=f"One of: {', '.join(SNAPSHOT_KINDS)}."),
    rps: float = typer.Option(30.0, "--rps", help="Rate of the short traffic burst."),
    burst_seconds: float = typer.Option(2.0, "--burst-seconds", help="Length of the burst."),
) -> None:
    """Start one replica and a GPU node, send a short burst of traffic, print what one of them serves."""
    import json

    import httpx

    from tidescale.devstack.fleet.loadgen import LoadGenerator
    from tidescale.devstack.fleet.running import running_stack
    from tidescale.sim import traffic

    if what not in SNAPSHOT_KINDS:
        raise UsageError(f"--what must be one of {', '.join(SNAPSHOT_KINDS)}, got {what!r}")
    sc = traffic.scenario("steady", rps, burst_seconds)
    with _workdir(None, "tidescale-snapshot-") as wd, running_stack(wd, replicas=1, gpus_per_node=1,
                                                                    gpu_poll_interval=0.25) as stack:
        gen = LoadGenerator(sc, stack.fleet.ready_urls, ("resnet50", "ctr_ranker")).start()
        gen.wait(burst_seconds + 30)
        gen.stop()
        replica = stack.fleet.replicas[0]
        if what == "triton-metrics":
            out = replica.metrics_text()
        elif what == "triton-stats":
            out = json.dumps(replica.model_stats(), indent=1) + "\n"
        else:
            stack.gpus.tick()
            out = httpx.get(stack.gpus.nodes[0].metrics_url, timeout=5.0).text
    typer.echo(out, nl=False)
