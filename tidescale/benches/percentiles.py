"""`tidescale bench percentiles`: fleet P50/P95/P99 from the exporter's buckets vs the peers.

≥ 1 M request latencies over 24 pods, shaped like Triton request latency: a lognormal body,
batching steps (the V100 service curve at batch sizes 1..32), a bimodal mix (a fast cached path)
and a heavy Pareto tail; a few pods run on slower nodes. Ground truth is the exact quantile of
all latencies (numpy on the raw values). Methods, all in the same run on the same data:

- `tidescale_histogram`: `histogram_quantile` over our SLO-aware log buckets (what the exporter
  serves and the recording rules `namespace_model:tidescale_request_duration_seconds:p50/p95/p99`
  read), evaluated by a real Prometheus that scrapes one endpoint per pod;
- `default_buckets`: the same over prometheus-client's default buckets;
- `averaged_summaries`: `avg(nv_inference_request_summary_us{quantile=...})` across pods, the
  per-pod Triton summary that dashboards average today (exact per-pod quantiles, so this
  peer's error is pure aggregation error).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import HistogramMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from tidescale.benches.common import bench_main
from tidescale.benches.report import BENCH_DIR, save_figure
from tidescale.contracts import catalog
from tidescale.contracts.promql import selector
from tidescale.devstack.fleet.httpserve import LoopbackHttpServer, text_response
from tidescale.devstack.promstack import PrometheusServer, ScrapeTarget
from tidescale.exporters.buckets import BucketHistogram, log_buckets
from tidescale.sim.samples import sample_quantile
from tidescale.sim.servicecurve import ServiceCurve

QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
PODS = 24
PER_POD_FULL = 100_000
PER_POD_QUICK = 42_000  # 24 × 42,000 = 1.008 M
SLO_THRESHOLDS = (0.1, 0.25, 0.5, 1.0)
BUCKET_RANGE_S = (0.001, 20.0)  # ExporterSettings defaults
PROM_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
JOB_OURS = "bench-tidescale-buckets"
JOB_DEFAULT = "bench-default-buckets"
MODEL, VERSION = "ranker", "1"
RESULT_MD = BENCH_DIR / "percentiles.md"
RESULT_PNG = RESULT_MD.with_suffix(".png")


# --- the workload ------------------------------------------------------------------------------

def pod_latencies(rng: np.random.Generator, n: int, pod: int) -> np.ndarray:
    """Request latencies (s) of one pod: body × batching step, cached fast path, heavy tail."""
    node_factor = 1.6 if pod % 6 == 0 else 1.0  # slower nodes: per-pod summaries disagree
    curve = ServiceCurve.v100()
    batch = rng.choice([1, 2, 4, 8, 16, 32], size=n, p=[0.1, 0.15, 0.25, 0.25, 0.15, 0.1])
    steps = np.array([curve.exec_seconds(int(b)) for b in range(1, 33)])[batch - 1]
    body = rng.lognormal(mean=math.log(0.008), sigma=0.35, size=n)
    latency = (steps + body) * node_factor
    cached = rng.random(n) < 0.2
    latency[cached] = rng.lognormal(mean=math.log(0.0015), sigma=0.25, size=int(cached.sum()))
    tail = rng.random(n) < 0.015
    latency[tail] += 0.05 * (rng.pareto(1.6, size=int(tail.sum())) + 1.0)
    return np.asarray(latency)


def workload(seed: int, per_pod: int, pods: int = PODS) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [pod_latencies(rng, per_pod, pod) for pod in range(pods)]


# --- our methods and the peers ------------------------------------------------------------------

def relative_errors(estimates: dict[str, float | None], truth: dict[str, float]) -> dict[str, float | None]:
    return {k: (None if estimates[k] is None else abs(float(estimates[k]) - truth[k]) / truth[k])  # type: ignore[arg-type]
            for k in QUANTILES}


class _PodPage(Collector):
    """One pod's page: a histogram with the given bounds (and, optionally, a Triton summary)."""

    def __init__(self, values: np.ndarray, bounds: tuple[float, ...], with_summary: bool) -> None:
        self.hist = BucketHistogram(bounds)
        self.hist.observe_many(values)
        self.summary = ({q: float(sample_quantile(values, q) or 0.0) * 1e6 for q in QUANTILES.values()}
                        if with_summary else None)
        self.sum_us = float(values.sum()) * 1e6
        self.count = int(values.size)

    def collect(self) -> Any:
        fam = catalog.get("tidescale_request_duration_seconds")
        hist = HistogramMetricFamily(fam.name, fam.help, labels=["model", "version", "stage"])
        hist.add_metric([MODEL, VERSION, "request"], self.hist.cumulative(), self.hist.total)
        yield hist
        if self.summary is not None:
            fam = catalog.get("nv_inference_request_summary_us")
            summary = SummaryMetricFamily(fam.name, fam.help, labels=["model", "version"])
            summary.add_metric([MODEL, VERSION], self.count, self.sum_us)
            # SummaryMetricFamily.add_metric has no quantiles; add them the way Triton exposes them.
            for sample_q, value in self.summary.items():
                summary.add_sample(fam.name, {"model": MODEL, "version": VERSION, "quantile": str(sample_q)}, value)
            yield summary


def _page_server(name: str, page: _PodPage) -> LoopbackHttpServer:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(page)
    text = generate_latest(registry).decode()
    server = LoopbackHttpServer(name)
    server.get_routes["/metrics"] = lambda: text_response(text)
    return server.start()


def prometheus_quantiles(pods: list[np.ndarray], bounds: tuple[float, ...], workdir: Path,
                         progress: Callable[[str], None]) -> dict[str, dict[str, float | None]]:
    """histogram_quantile over both bucket layouts and avg() of the summaries, by a real Prometheus."""
    servers: list[LoopbackHttpServer] = []
    targets: list[ScrapeTarget] = []
    try:
        for i, values in enumerate(pods):
            pod = f"triton-{i:02d}"
            ours = _page_server(f"bench-{pod}", _PodPage(values, bounds, with_summary=True))
            default = _page_server(f"bench-default-{pod}", _PodPage(values, PROM_DEFAULT_BUCKETS, False))
            servers += [ours, default]
            labels = {"namespace": "bench", "pod": pod}
            targets += [ScrapeTarget(JOB_OURS, ours.address, labels),
                        ScrapeTarget(JOB_DEFAULT, default.address, labels)]
        progress(f"{len(servers)} pod pages up; starting Prometheus")
        with PrometheusServer(workdir, targets) as prom:
            prom.wait_for_targets_up(len(targets), timeout=60)
            hist = catalog.get("tidescale_request_duration_seconds").name + "_bucket"
            summary = catalog.get("nv_inference_request_summary_us").name
            for job in (JOB_OURS, JOB_DEFAULT):
                prom.wait_for(f"count(count by (pod) ({selector(hist, job=job)})) >= {len(pods)}", timeout=60)
            out: dict[str, dict[str, float | None]] = {"tidescale_histogram": {}, "default_buckets": {},
                                                       "averaged_summaries": {}}
            for key, q in QUANTILES.items():
                for method, job in (("tidescale_histogram", JOB_OURS), ("default_buckets", JOB_DEFAULT)):
                    out[method][key] = prom.query_value(
                        f"histogram_quantile({q}, sum by (le) ({selector(hist, job=job)}))")
                avg_us = prom.query_value(f"avg({selector(summary, job=JOB_OURS, quantile=str(q))})")
                out["averaged_summaries"][key] = None if avg_us is None else avg_us / 1e6
            return out
    finally:
        for server in servers:
            server.stop()


def run(seed: int = 7, quick: bool = False, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    per_pod = PER_POD_QUICK if quick else PER_POD_FULL
    progress(f"generating {PODS} × {per_pod:,} latencies")
    pods = workload(seed, per_pod)
    everything = np.concatenate(pods)
    truth = {k: float(sample_quantile(everything, q) or 0.0) for k, q in QUANTILES.items()}
    bounds = log_buckets(*BUCKET_RANGE_S, SLO_THRESHOLDS, 60)
    with tempfile.TemporaryDirectory(prefix="tidescale-bench-percentiles-") as tmp:
        estimates = prometheus_quantiles(pods, bounds, Path(tmp), progress)
    methods: dict[str, dict[str, Any]] = {name: relative_errors(est, truth) for name, est in estimates.items()}
    methods["tidescale_histogram"]["buckets"] = len(bounds) + 1
    methods["default_buckets"]["buckets"] = len(PROM_DEFAULT_BUCKETS) + 1
    return {
        "methods": methods,
        "estimates_seconds": estimates,
        "truth_seconds": truth,
        "requests": int(everything.size),
        "pods": PODS,
        "seed": seed,
        "goal": {"tidescale_histogram": 0.05},
    }


# --- output ------------------------------------------------------------------------------------

def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f} %"


def plot(result: dict[str, Any], path: Path) -> None:
    """Grouped bars of the relative error per method and quantile (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(result["methods"])
    fig, ax = plt.subplots(figsize=(7, 3.2))
    width = 0.8 / len(QUANTILES)
    for i, key in enumerate(QUANTILES):
        errors = [100 * max(result["methods"][m][key] or 0.0, 1e-4) for m in methods]
        ax.bar([j + i * width for j in range(len(methods))], errors, width, label=key.upper())
    ax.set_xticks([j + width for j in range(len(methods))], [m.replace("_", " ") for m in methods])
    ax.set_yscale("log")
    ax.set_ylabel("relative error, %")
    ax.axhline(1, color="grey", lw=0.8, ls=":")
    ax.axhline(5, color="grey", lw=0.8, ls="--")
    ax.legend(frameon=False)
    ax.set_title(f"Fleet quantiles: {result['requests']:,} latencies over {result['pods']} pods")
    save_figure(fig, path)


def markdown(result: dict[str, Any]) -> str:
    plot(result, RESULT_PNG)
    rows = []
    for name, errs in result["methods"].items():
        buckets = errs.get("buckets", "")
        rows.append(f"| `{name}` | {_pct(errs['p50'])} | {_pct(errs['p95'])} | {_pct(errs['p99'])} | {buckets} |")
    truth = result["truth_seconds"]
    return "\n".join([
        "# Benchmark: aggregatable percentiles",
        "",
        "Generated by `tidescale bench percentiles` (see `tidescale/benches/percentiles.py`).",
        f"{result['requests']:,} request latencies over {result['pods']} pods (lognormal body, V100 batching "
        "steps, a 20 % cached fast path, a 1.5 % Pareto tail, every 6th pod on a 1.6× slower node). "
        "Relative error of the fleet quantile against the exact quantile of all latencies; histogram "
        "methods are evaluated by a real Prometheus (`histogram_quantile` over `sum by (le)`), the "
        "summaries by `avg(nv_inference_request_summary_us{quantile=...})`.",
        "",
        f"Exact: P50 {truth['p50'] * 1e3:.2f} ms, P95 {truth['p95'] * 1e3:.2f} ms, P99 {truth['p99'] * 1e3:.2f} ms.",
        "",
        "| method | P50 error | P95 error | P99 error | buckets |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Goal: our buckets ≤ 5 % with ≤ 60 buckets. The exporter serves only this histogram (no quantile "
        "gauges): it adds up across pods and exporter replicas, and the recording rules take its quantiles.",
        "",
        f"![relative error per method]({RESULT_PNG.name})",
        "",
        "```json",
        json.dumps(result["methods"], indent=1, sort_keys=True),
        "```",
        "",
    ])


def run_command(json_only: bool = False, quick: bool = False, seed: int = 7) -> None:
    bench_main(lambda progress: run(seed=seed, quick=quick, progress=progress), markdown, RESULT_MD, json_only)
