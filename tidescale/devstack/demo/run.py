"""The demo's run loop: start the stack, play traffic, sample once a second, summarise, stop."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from tidescale.contracts import recorded
from tidescale.contracts.promql import selector, triton_sum
from tidescale.devstack.demo.faults import string_heavy_trace_viewer
from tidescale.devstack.demo.plots import write_plots
from tidescale.devstack.demo.settings import DemoSettings
from tidescale.devstack.demo.timeline import Sample, Timeline
from tidescale.devstack.fleet.fleet import ReplicaCrash
from tidescale.devstack.localstack import LocalStack, StackOptions
from tidescale.sim.samples import sample_quantile
from tidescale.sim.traffic import Scenario, replay, scenario

FAULT_MODEL, FAULT_VERSION = "ctr_ranker", "1"


def build_scenario(s: DemoSettings) -> Scenario:
    if s.trace_csv is not None:
        sc = replay(s.trace_csv, time_scale=s.time_scale, target_rps=s.base_rps, seed=s.seed, unit=s.trace_unit)
        return dataclasses.replace(sc, duration_s=min(sc.duration_s, s.duration_s))
    return scenario(s.scenario, s.base_rps, s.duration_s)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the demo like Ctrl-C does, so every child process is stopped."""
    def handler(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _fmt_ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f} ms"


def render_table(sample: Sample, duration_s: float, scenario_name: str) -> Table:
    table = Table(title=f"tidescale demo — {scenario_name} — t={sample.t:.0f}/{duration_s:.0f}s", expand=False)
    for col in ("replicas ready/spec", "desired", "offered req/s", "done req/s", "P50", "P95", "P99",
                "queue", "firing alerts"):
        table.add_column(col)
    crashed = f" ({sample.replica_crashes} crashed)" if sample.replica_crashes else ""
    table.add_row(
        f"{sample.replicas_ready}/{sample.replicas_total}{crashed}",
        "-" if sample.replicas_desired is None else str(sample.replicas_desired),
        f"{sample.offered_rps:.1f}", f"{sample.completed_rps:.1f}",
        _fmt_ms(sample.p50_s), _fmt_ms(sample.p95_s), _fmt_ms(sample.p99_s),
        "-" if sample.queue_depth is None else f"{sample.queue_depth:.1f}",
        ", ".join(sample.firing) or "-",
    )
    return table


def compact_line(sample: Sample, duration_s: float, title: str) -> str:
    """The live table as one line, for a log without a terminal (a table a second would repeat itself)."""
    desired = "-" if sample.replicas_desired is None else str(sample.replicas_desired)
    queue = "-" if sample.queue_depth is None else f"{sample.queue_depth:.1f}"
    return (f"t={sample.t:.0f}/{duration_s:.0f}s {title}: replicas {sample.replicas_ready}/{sample.replicas_total} "
            f"(desired {desired}), {sample.offered_rps:.1f} req/s offered, {sample.completed_rps:.1f} done, "
            f"P50/P95/P99 {_fmt_ms(sample.p50_s)}/{_fmt_ms(sample.p95_s)}/{_fmt_ms(sample.p99_s)}, "
            f"queue {queue}, firing {', '.join(sample.firing) or '-'}")


def show(console: Console, live: Any, sample: Sample, duration_s: float, title: str) -> None:
    """The live table on a terminal; without one, a compact line every 10 s."""
    if live is not None:
        live.update(render_table(sample, duration_s, title))
    elif int(sample.t) % 10 == 0:
        console.print(compact_line(sample, duration_s, title), markup=False, highlight=False)


class Sampler:
    """Reads the stack once a second (client latency, replicas, Prometheus queue depth and alerts)."""

    def __init__(self, stack: LocalStack, sc: Scenario, loadgen: Any) -> None:
        self.stack, self.sc, self.loadgen = stack, sc, loadgen
        self.alerts_seen: set[str] = set()
        self._queue: float | None = None
        self._firing: tuple[str, ...] = ()
        self._n = 0

    def final_read(self) -> None:
        """One more read of Prometheus and Alertmanager after the traffic stopped."""
        self._n = 0
        self._prometheus_reads()

    def _prometheus_reads(self) -> None:
        prom = self.stack.prometheus
        assert prom is not None
        with contextlib.suppress(Exception):
            self._queue = prom.query_value(triton_sum("nv_inference_pending_request_count"))
        with contextlib.suppress(Exception):
            res = prom.query('ALERTS{alertstate="firing", alertname!="Watchdog"}')
            self._firing = tuple(sorted({r["metric"]["alertname"] for r in res}))
        if self._n % 5 == 0 and self.stack.alertmanager is not None:
            from tidescale.devstack.demo.summary import alerts_fired

            with contextlib.suppress(Exception):
                self.alerts_seen |= set(alerts_fired(self.stack.alertmanager.url))

    def sample(self, t: float) -> Sample:
        self._n += 1
        self._prometheus_reads()
        stats = self.loadgen.stats(window_s=10.0)
        fleet = self.stack.fleet
        desired = None
        if self.stack.autoscaler is not None:
            with contextlib.suppress(Exception):
                desired = int(self.stack.autoscaler.status().desired_replicas)
        return Sample(
            t=t, offered_rps=float(self.sc.rate(min(t, self.sc.duration_s - 1e-6))),
            completed_rps=stats.completed_rps, p50_s=stats.p50_s, p95_s=stats.p95_s, p99_s=stats.p99_s,
            replicas_ready=len(fleet.ready_replicas()), replicas_total=fleet.spec_replicas,
            replicas_desired=desired, queue_depth=self._queue, firing=self._firing,
            replica_crashes=len(fleet.crashes()),
        )


# The generated alert groups evaluate every 30 s: a fault needs that long (plus a scrape and
# Alertmanager's group_wait) before its alert can reach the receivers.
ALERT_GROUP_INTERVAL_S = 30.0
ALERT_DELIVERY_S = 5.0


def fault_time(duration_s: float) -> float:
    """Half-way, but early enough in short runs that one alert evaluation follows the fault."""
    return min(duration_s / 2, max(duration_s / 6, duration_s - ALERT_GROUP_INTERVAL_S - ALERT_DELIVERY_S))


def settle_seconds(elapsed_s: float, fault_at_s: float | None) -> float:
    """How long to wait after the traffic stops so alerts caused by the faults can be delivered."""
    if fault_at_s is None:
        return 3.0
    since = elapsed_s - fault_at_s
    return max(3.0, min(ALERT_GROUP_INTERVAL_S + ALERT_DELIVERY_S - since, ALERT_GROUP_INTERVAL_S + ALERT_DELIVERY_S))


def inject_faults(stack: LocalStack) -> dict[str, Any]:
    """A GPU XID error on the first GPU and a string-heavy profile for one model version."""
    done: dict[str, Any] = {}
    assert stack.fleet_stack is not None
    node = stack.fleet_stack.gpus.nodes[0]
    node.inject_xid(79, gpu=0)
    done["xid"] = {"node": node.hostname, "gpu": 0, "code": 79}
    try:
        report = stack.post_profile(string_heavy_trace_viewer(0.3), model=FAULT_MODEL, version=FAULT_VERSION,
                                    filename="string_heavy.trace_viewer.json", content_type="application/json")
        done["profile"] = {"model": FAULT_MODEL, "version": FAULT_VERSION,
                           "string_share": report.get("op_class_share", {}).get("string")}
    except Exception as exc:  # the demo goes on; the summary says what failed
        done["profile_error"] = f"{type(exc).__name__}: {exc}"
    return done


_STATUS_NAMES = {-1: "dropped_max_in_flight", -2: "no_ready_replica", 0: "connect_error_or_timeout"}


def error_breakdown(records: list[Any]) -> dict[str, int]:
    """Failed requests by cause: the load generator's own codes named, HTTP statuses as numbers."""
    out: dict[str, int] = {}
    for r in records:
        if not r.ok:
            key = _STATUS_NAMES.get(r.status, f"http_{r.status}")
            out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def percentile(values: list[float], q: float) -> float:
    """The demo's client-side latency quantile (a latency some request had); 0.0 for none."""
    return sample_quantile(values, q, "nearest") or 0.0


def crash_rows(crashes: list[ReplicaCrash], started_at: float) -> list[dict[str, Any]]:
    """The summary's view of replica crashes: when (seconds into the run), which pod, how it died."""
    return [{"pod": c.pod, "at_s": round(c.at - started_at, 1), "exit_code": c.exit_code, "signal": c.signal}
            for c in crashes]


def summarise(s: DemoSettings, sc: Scenario, stack: LocalStack, timeline: Timeline, sampler: Sampler,
              loadgen: Any, faults: dict[str, Any], elapsed: float, started_at: float) -> dict[str, Any]:
    prom = stack.prometheus
    assert prom is not None
    targets = prom.targets()
    records = loadgen.records()
    ok = [r.latency_s for r in records if r.ok]
    summary: dict[str, Any] = {
        "scenario": sc.name,
        "duration_s": round(elapsed, 1),
        "triton": {"server_version": stack.fleet.replicas[0].server_version() if stack.fleet.replicas else None,
                   "models": [m.name for m in stack.opts.models]},
        "prometheus": {"targets_up": sum(1 for t in targets if t.get("health") == "up"),
                       "targets_total": len(targets),
                       "jobs": sorted({t["labels"].get("job", "") for t in targets})},
        "latency_p50_s": percentile(ok, 0.50),
        "latency_p95_s": percentile(ok, 0.95),
        "latency_p99_s": percentile(ok, 0.99),
        "requests": {"sent": len(records), "ok": len(ok), "errors": len(records) - len(ok),
                     "errors_by_status": error_breakdown(records)},
        # A crashed replica is restarted like a pod (the demo's fleet has been seen to lose its only
        # replica to a tritonserver SIGSEGV under overload); the crashes explain a minimum of 0.
        "replicas": {**timeline.replicas_range(), "crashes": crash_rows(stack.fleet.crashes(), started_at)},
        "alerts_fired": sorted(sampler.alerts_seen | set(timeline.alerts_seen())),
        "notifications": stack.sink.alert_names(),
        "faults_injected": faults,
        "slo_latency_threshold_s": s.slo_latency_threshold_s,
    }
    with contextlib.suppress(Exception):
        # The recording rule over the exporter's histogram, as the dashboards read it.
        fleet_p99 = prom.query_value(f"max({selector(recorded.P99, stage='request')})")
        summary["exporter_p99_s"] = fleet_p99
    with contextlib.suppress(Exception):
        from tidescale.devstack.demo.summary import reviews_opened

        summary["reviews_opened"] = reviews_opened(stack.reviews_url)
    summary.setdefault("reviews_opened", [])
    return summary


def run_demo(s: DemoSettings, out: Path) -> dict[str, Any]:
    from tidescale.devstack.fleet.loadgen import LoadGenerator

    sc = build_scenario(s)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    if sc.reading:
        console.print(f"trace {sc.name.removeprefix('trace:')}: {sc.reading}", markup=False, highlight=False)
    opts = StackOptions(replicas=s.min_replicas, min_replicas=s.min_replicas, max_replicas=s.max_replicas,
                        cold_start_s=s.cold_start_s, slo_latency_threshold_s=s.slo_latency_threshold_s, seed=s.seed,
                        curve_scale=s.curve_scale)
    stack = LocalStack(out / "run", opts)
    timeline = Timeline()
    with sigterm_as_interrupt():
        try:
            console.print(f"[bold]tidescale demo[/]: starting the local stack in {out / 'run'} …")
            stack.start()
            assert stack.prometheus is not None
            stack.prometheus.wait_for_targets_up(timeout=60)
            am_url = stack.alertmanager.url if stack.alertmanager else "-"
            console.print(f"prometheus {stack.prometheus.url}  alertmanager {am_url}"
                          f"  exporter {stack.exporter_url}  reviews {stack.reviews_url}")
            loadgen = LoadGenerator(sc, stack.fleet.ready_urls, s.model_mix, seed=s.seed).start()
            sampler = Sampler(stack, sc, loadgen)
            faults: dict[str, Any] = {}
            start, started_at = time.monotonic(), time.time()
            crashes_told = 0
            live_ctx: Any = Live(console=console, refresh_per_second=2, transient=False) if (
                s.live and console.is_terminal) else contextlib.nullcontext()
            with live_ctx as live:
                while True:
                    t = time.monotonic() - start
                    if t >= sc.duration_s or not loadgen.running:
                        break
                    if s.inject_faults and not faults and t >= fault_time(sc.duration_s):
                        faults = inject_faults(stack)
                        faults["at_s"] = round(t, 1)
                    sample = sampler.sample(t)
                    timeline.add(sample)
                    crashes = stack.fleet.crashes()
                    for crash in crashes[crashes_told:]:
                        console.print(f"[yellow]{crash.describe()}; restarting it like the kubelet would[/]")
                    crashes_told = len(crashes)
                    show(console, live, sample, sc.duration_s, sc.name)
                    time.sleep(max(0.0, 1.0 - (time.monotonic() - start - t)))
            loadgen.stop()
            elapsed = time.monotonic() - start
            # Let Prometheus scrape and Alertmanager notify once more before reading the results.
            time.sleep(settle_seconds(elapsed, faults.get("at_s")))
            sampler.final_read()
            summary = summarise(s, sc, stack, timeline, sampler, loadgen, faults, elapsed, started_at)
            summary["plots"] = [p.name for p in write_plots(timeline, out, s.slo_latency_threshold_s)]
            summary["dashboard_previews"] = _dashboard_previews(stack, out, console)
            (out / "timeline.json").write_text(json.dumps(timeline.to_rows(), indent=1))
            (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
            return summary
        finally:
            console.print("stopping the local stack …")
            stack.stop()


def _dashboard_previews(stack: LocalStack, out: Path, console: Console) -> list[str]:
    try:
        from tidescale.devstack.preview import render_previews

        assert stack.prometheus is not None
        paths = render_previews(stack.prometheus.url, out / "dashboards")
        return [str(p.relative_to(out)) for p in paths]
    except Exception as exc:  # previews are a bonus; the summary says why they are missing
        console.print(f"[yellow]dashboard previews failed: {type(exc).__name__}: {exc}[/]")
        return []
