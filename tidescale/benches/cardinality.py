"""`tidescale bench cardinality`: the series tidescale adds to a Prometheus, per Triton pod, per model
version and per GPU, next to what Triton and dcgm-exporter expose themselves, and what a real
Prometheus pays for the whole (its RSS, its rule evaluation) at fleet scale.

The sources speak their exact formats: Triton's `/metrics` is the real 2.51 capture in tests/fixtures,
its two models renamed per Deployment; dcgm-exporter and kube-state-metrics are the dev stack's
simulated ones (held to their fixtures by the unit tests); tidescale's exporter is the real exporter
code (`build_state`, `render_metrics`) fed a request of every model on every pod, one exporter per
node as the chart's daemonset mode runs it. A real Prometheus scrapes them all, one target per pod and
per node as a PodMonitor and a ServiceMonitor would find them, and evaluates the chart's rules. Counters
grow at every scrape, so every rate the rules take is non-zero and every recorded series exists.

A fleet too large for this machine is extrapolated from the per-unit counts and said to be.
"""

from __future__ import annotations

import math
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from tidescale.benches.common import bench_main
from tidescale.benches.report import BENCH_DIR, markdown_table
from tidescale.benches.scrape import request_spans
from tidescale.contracts import recorded
from tidescale.devstack.fleet.exposition import escape_label_value, parse
from tidescale.devstack.fleet.gpus import GpuAssignment, SimulatedGpuNode
from tidescale.devstack.fleet.kube import render_kube_state
from tidescale.devstack.promstack import PrometheusServer, ScrapeTarget
from tidescale.devstack.rulecheck import filled_rule_files
from tidescale.devstack.tools import FIXTURES
from tidescale.sim.hpa_controller import HpaStatus

RESULT_MD = BENCH_DIR / "cardinality.md"
RESULT_PNG = BENCH_DIR / "cardinality.png"
TRITON_CAPTURE = FIXTURES / "triton" / "real-2.51" / "metrics_during_load.txt"
CAPTURE_MODELS = ("batcher", "echo")  # the models of the captured server: two per pod
NAMESPACE = "ml"
PODS_PER_DEPLOYMENT = 10
GPUS_PER_NODE = 8
SCRAPE_INTERVAL = "15s"
EVALUATION_INTERVAL = "30s"
MEASURED_FLEETS = (100, 1_000)
LEAN_BUCKETS = (30, 16)  # the exporter's max_buckets (shipped: 60), for the per-unit counts
EXTRAPOLATED_FLEETS = (10_000,)
# Sources by scrape job; tidescale's own are the exporter and the recording rules.
THEIRS = ("triton", "dcgm-exporter")
KUBE = "kube-state-metrics"
EXPORTER = "tidescale-exporter"
RECORDED = "recorded by tidescale's rules"
COUNTER_TYPES = frozenset({"counter", "histogram", "summary"})


@dataclass(frozen=True)
class Fleet:
    """P Triton pods, one GPU each, ten per Deployment, eight GPUs per node, two models per pod."""

    pods: int

    def deployments(self) -> list[str]:
        return [f"triton-{d:04d}" for d in range(math.ceil(self.pods / PODS_PER_DEPLOYMENT))]

    def pods_of(self, deployment: str) -> list[str]:
        d = int(deployment.rsplit("-", 1)[1])
        count = min(PODS_PER_DEPLOYMENT, self.pods - d * PODS_PER_DEPLOYMENT)
        return [f"{deployment}-5d8f7c6b9-x{i:04d}" for i in range(count)]

    def all_pods(self) -> list[tuple[str, str]]:
        """(deployment, pod) of every pod, in node order."""
        return [(d, p) for d in self.deployments() for p in self.pods_of(d)]

    @staticmethod
    def models_of(deployment: str) -> list[str]:
        return [f"{m}_{deployment.replace('-', '_')}" for m in CAPTURE_MODELS]


class _Pod:
    """What a simulated GPU needs of the pod it is assigned to."""

    def __init__(self, namespace: str, pod: str) -> None:
        self.namespace, self.pod = namespace, pod

    @property
    def http_url(self) -> str:
        return ""

    def alive(self) -> bool:
        return True

    def set_slowdown(self, factor: float) -> None:
        pass


@dataclass
class Body:
    """One target's exposition: its gauge lines as they are, its counter lines grown at every scrape."""

    static: str
    counters: list[tuple[str, float]]
    scrapes: int = 0

    def render(self) -> bytes:
        self.scrapes += 1
        grown = "".join(f"{prefix} {value * (1 + self.scrapes):.17g}\n" for prefix, value in self.counters)
        return (self.static + grown).encode()

    @property
    def series(self) -> int:
        return self.static.count("\n") + len(self.counters)


def as_body(text: str, relabel: Callable[[dict[str, str]], dict[str, str]] = lambda labels: labels) -> Body:
    """*text* (an exposition) as a Body, each sample's labels passed through *relabel*."""
    static, counters = [], []
    for family in parse(text).values():
        for s in family.samples:
            labels = relabel(dict(s.labels))
            inner = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
            prefix = f"{s.name}{{{inner}}}" if inner else s.name
            if family.type in COUNTER_TYPES:
                counters.append((prefix, max(s.value, 1.0)))
            else:
                static.append(f"{prefix} {s.value:.17g}\n")
    return Body("".join(static), counters)


def triton_body(deployment: str) -> Body:
    """The captured Triton server's page, its models renamed for *deployment*'s."""
    names = dict(zip(CAPTURE_MODELS, Fleet.models_of(deployment), strict=True))
    return as_body(TRITON_CAPTURE.read_text(),
                   lambda labels: {**labels, "model": names[labels["model"]]} if "model" in labels else labels)


def dcgm_body(node: int, pods: list[str]) -> Body:
    gpus = [GpuAssignment(replica=_Pod(NAMESPACE, p)) for p in pods]
    return as_body(SimulatedGpuNode(f"gpu-node-{node:04d}", gpus).render())


def kube_body(fleet: Fleet) -> Body:
    """kube-state-metrics' page: every Deployment's pods and HPA (one page, each family once)."""
    now = time.time()
    parts = []
    for d in fleet.deployments():
        pods = fleet.pods_of(d)
        hpa = HpaStatus(1, 50, len(pods), len(pods))
        parts.append(as_body(render_kube_state(NAMESPACE, d, [(p, True, 0) for p in pods], {d: hpa},
                                               {p: (now - 600.0, now - 570.0) for p in pods})))
    return Body("".join(b.static for b in parts), [c for b in parts for c in b.counters])


def exporter_body(pods: list[tuple[str, str]], seed: int, **settings: Any) -> Body:
    """The real exporter's page (its shipped settings, but *settings*) after one request of each model
    on each of *pods* (one node's)."""
    from tidescale.exporters.service import build_state, render_metrics
    from tidescale.exporters.settings import ExporterSettings

    state = build_state(ExporterSettings.model_validate(settings))
    rng = np.random.default_rng(seed)
    t0 = time.time_ns()
    for deployment, pod in pods:
        for model in Fleet.models_of(deployment):
            t0 += 1_000_000
            spans = request_spans(rng, model, t0)
            for span in spans:
                span.namespace, span.pod = NAMESPACE, pod
            samples, _ = state.joiner.add(spans)
            state.latency.observe_all(samples)
    return as_body(render_metrics(state).decode())


class SyntheticExporters:
    """Serves every Body at `/<job>/<index>` from one loopback server."""

    def __init__(self, bodies: dict[str, list[Body]]) -> None:
        self.bodies = bodies
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                job, _, index = self.path.strip("/").partition("/")
                try:
                    body = outer.bodies[job][int(index)]
                except (KeyError, ValueError, IndexError):
                    self.send_error(404)
                    return
                with lock:
                    payload = body.render()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="synthetic-exporters", daemon=True)

    def __enter__(self) -> SyntheticExporters:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def targets(self, fleet: Fleet) -> list[ScrapeTarget]:
        """One target per Triton pod (a PodMonitor's labels), per node's dcgm-exporter and exporter, and
        kube-state-metrics, each at its own path."""
        out = [ScrapeTarget("triton", self.address, {"__metrics_path__": f"/triton/{i}", "namespace": NAMESPACE,
                                                     "pod": pod, "deployment": dep})
               for i, (dep, pod) in enumerate(fleet.all_pods())]
        for job in ("dcgm-exporter", EXPORTER):
            out += [ScrapeTarget(job, self.address, {"__metrics_path__": f"/{job}/{n}", "node": f"gpu-node-{n:04d}"})
                    for n in range(len(self.bodies[job]))]
        out.append(ScrapeTarget(KUBE, self.address, {"__metrics_path__": f"/{KUBE}/0"}))
        return out


def build_bodies(fleet: Fleet) -> dict[str, list[Body]]:
    pods = fleet.all_pods()
    nodes = [pods[i:i + GPUS_PER_NODE] for i in range(0, len(pods), GPUS_PER_NODE)]
    return {
        "triton": [triton_body(dep) for dep, _ in pods],
        "dcgm-exporter": [dcgm_body(n, [p for _, p in node]) for n, node in enumerate(nodes)],
        EXPORTER: [exporter_body(node, seed=n) for n, node in enumerate(nodes)],
        KUBE: [kube_body(fleet)],
    }


def per_unit() -> dict[str, Any]:
    """Series per unit, counted from one pod, one model version, one GPU of each source."""
    one, two = Fleet(1), Fleet(2)
    [(dep, pod)] = one.all_pods()
    triton = triton_body(dep)
    server_only = sum(1 for line in triton.static.splitlines() + [p for p, _ in triton.counters]
                      if 'model="' not in line)
    exporter_empty = exporter_body([], seed=0)

    def exporter_per_version(**settings: Any) -> float:
        return (exporter_body([(dep, pod)], seed=0, **settings).series - exporter_empty.series) / len(CAPTURE_MODELS)

    return {
        "triton_per_pod": triton.series,
        "triton_per_pod_without_models": server_only,
        "triton_per_model_version": (triton.series - server_only) / len(CAPTURE_MODELS),
        "dcgm_per_gpu": dcgm_body(0, [pod]).series,
        "kube_state_metrics_per_pod": kube_body(two).series - kube_body(one).series,
        "exporter_per_pod_and_model_version": exporter_per_version(),
        **{f"exporter_per_pod_and_model_version_at_max_buckets_{n}": exporter_per_version(max_buckets=n)
           for n in LEAN_BUCKETS},
        "exporter_per_exporter": exporter_empty.series,
    }


def _seconds(duration: str) -> float:
    return float(duration.removesuffix("s"))


def _rss_bytes(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) * 1024
    return math.nan


def measure_fleet(fleet: Fleet, progress: Callable[[str], None]) -> dict[str, Any]:
    progress(f"{fleet.pods} pods: building the exporters' pages")
    bodies = build_bodies(fleet)
    with tempfile.TemporaryDirectory(prefix="tidescale-bench-cardinality-") as tmp, \
            SyntheticExporters(bodies) as exporters:
        rules = filled_rule_files(Path(tmp) / "rules")
        with PrometheusServer(Path(tmp) / "prometheus", exporters.targets(fleet), rules,
                              scrape_interval=SCRAPE_INTERVAL, evaluation_interval=EVALUATION_INTERVAL) as prom:
            targets = len(exporters.targets(fleet))
            progress(f"{fleet.pods} pods: Prometheus scraping {targets} targets, waiting for the rules")
            prom.wait_for_targets_up(targets, timeout=120)
            # Every target scraped twice (a rate needs two points), then two rounds of every rule group.
            settle_s = 2 * _seconds(SCRAPE_INTERVAL) + 2 * _seconds(EVALUATION_INTERVAL) + 10
            progress(f"{fleet.pods} pods: every target up; {settle_s:.0f} s for two scrapes and two rule rounds")
            time.sleep(settle_s)
            # Each source's series are the samples it serves (every one a series: each target is
            # scraped, and the head count below checks the sum); counting them by job in PromQL
            # touches every series and takes longer than the API's 15 s at 1,000 pods.
            served = {job: float(sum(b.series for b in bs)) for job, bs in bodies.items()}
            recorded = {r["metric"]["__name__"]: float(r["value"][1])
                        for r in prom.query('count by (__name__) ({__name__=~".+:.+"})')}
            alerts = prom.query_value("count(ALERTS)") or 0.0
            head = float(prom.tsdb_status()["headStats"]["numSeries"])
            groups = prom.rules()
            assert prom.proc is not None
            rss = _rss_bytes(prom.proc.pid)
    eval_s = [float(g.get("evaluationTime", 0.0)) for g in groups]
    return {
        "pods": fleet.pods, "deployments": len(fleet.deployments()), "model_versions": 2 * len(fleet.deployments()),
        "gpus": fleet.pods, "nodes": len(bodies["dcgm-exporter"]),
        "series": {**{job: served[job] for job in (*THEIRS, KUBE, EXPORTER)},
                   RECORDED: sum(recorded.values()), "ALERTS": alerts},
        # Prometheus' own per target: up and the four scrape_* series.
        "per_target_series": 5.0 * targets, "targets": targets,
        "recorded_by_rule": dict(sorted(recorded.items(), key=lambda kv: -kv[1])[:15]),
        "head_series": head, "prometheus_rss_bytes": rss,
        # What the head holds beyond the sources, the rules and Prometheus' per-target series (0 when
        # every count above is whole).
        "unaccounted_series": head - (sum(served.values()) + sum(recorded.values()) + alerts + 5.0 * targets),
        "rule_groups": len(groups), "rule_evaluation_s_sum": sum(eval_s), "rule_evaluation_s_max": max(eval_s),
        "rule_evaluation_s_by_group": {g["name"]: round(float(g.get("evaluationTime", 0.0)), 3)
                                       for g in sorted(groups, key=lambda g: -float(g.get("evaluationTime", 0.0)))[:5]},
    }


def extrapolate(point: dict[str, Any], pods: int) -> dict[str, Any]:
    """*point* scaled to *pods* (every source grows with the fleet: pods, Deployments, nodes)."""
    k = pods / point["pods"]
    return {"pods": pods, "extrapolated_from": point["pods"],
            "series": {s: v * k for s, v in point["series"].items()},
            "head_series": point["head_series"] * k if point["head_series"] else None,
            "prometheus_rss_bytes": point["prometheus_rss_bytes"] * k,
            "rule_evaluation_s_sum": point["rule_evaluation_s_sum"] * k}


def run(quick: bool = False, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    fleets = MEASURED_FLEETS[:1] if quick else MEASURED_FLEETS
    measured = {str(p): measure_fleet(Fleet(p), progress) for p in fleets}
    largest = measured[str(fleets[-1])]
    return {
        "config": {"pods_per_deployment": PODS_PER_DEPLOYMENT, "gpus_per_pod": 1, "gpus_per_node": GPUS_PER_NODE,
                   "models_per_pod": len(CAPTURE_MODELS), "scrape_interval": SCRAPE_INTERVAL,
                   "evaluation_interval": EVALUATION_INTERVAL, "exporter": "one per node (daemonset mode)"},
        "per_unit": per_unit(),
        "fleets": measured,
        "extrapolated": {str(p): extrapolate(largest, p) for p in EXTRAPOLATED_FLEETS},
    }


def tidescale_share(series: dict[str, float]) -> tuple[float, float]:
    """(series tidescale adds, series Triton and dcgm-exporter expose)."""
    return series[EXPORTER] + series[RECORDED] + series["ALERTS"], sum(series[j] for j in THEIRS)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [*result["fleets"].values(), *result["extrapolated"].values()]
    sources = [*THEIRS, KUBE, EXPORTER, RECORDED]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = np.arange(len(points))
    width = 0.8 / len(sources)
    for i, source in enumerate(sources):
        ax.bar(x + (i - (len(sources) - 1) / 2) * width, [p["series"][source] for p in points], width,
               label=source + (" (tidescale)" if source in (EXPORTER, RECORDED) else ""))
    ax.set_xticks(x, [f"{p['pods']:,} pods" + (" (extrapolated)" if "extrapolated_from" in p else "")
                      for p in points])
    ax.set_yscale("log")
    ax.set_ylabel("series in Prometheus (log)")
    ax.set_title("Series in Prometheus by source, per fleet size")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(result: dict[str, Any]) -> str:
    import json

    unit = result["per_unit"]
    rows = []
    for p in [*result["fleets"].values(), *result["extrapolated"].values()]:
        ours, theirs = tidescale_share(p["series"])
        rss = p["prometheus_rss_bytes"] / 2**30
        rows.append([f"{p['pods']:,}" + (" (extrapolated)" if "extrapolated_from" in p else ""),
                     *(f"{p['series'][s]:,.0f}" for s in (*THEIRS, KUBE, EXPORTER, RECORDED)),
                     f"{ours / theirs:.2f}×", f"{rss:.2f}", f"{p['rule_evaluation_s_sum']:.2f}"])
    plot(result, RESULT_PNG)
    return "\n".join([
        "# Benchmark: what tidescale costs Prometheus",
        "",
        "Generated by `tidescale bench cardinality` (`tidescale/benches/cardinality.py`). A real Prometheus "
        f"scrapes a synthetic fleet every {result['config']['scrape_interval']} and evaluates the chart's rules "
        f"every {result['config']['evaluation_interval']}: one GPU per pod, {PODS_PER_DEPLOYMENT} pods per "
        f"Deployment, {GPUS_PER_NODE} GPUs per node, two models per pod (the captured Triton 2.51 page, its "
        "models renamed per Deployment), dcgm-exporter and kube-state-metrics as the dev stack simulates them, "
        "and tidescale's exporter as its own code renders its page after a request of every model on every "
        "pod, one exporter per node. Fleets this machine cannot hold are extrapolated from the largest one "
        "measured (every source grows linearly with pods).",
        "",
        "## Per unit",
        "",
        markdown_table(["what", "series"], [[k.replace("_", " "), f"{v:g}"] for k, v in unit.items()]),
        "",
        "## Per fleet",
        "",
        markdown_table(["pods", "Triton", "dcgm-exporter", "kube-state-metrics", "tidescale exporter",
                        "tidescale recorded", "tidescale / (Triton + dcgm)", "Prometheus RSS GiB",
                        "rule evaluation s (all groups, one round)"], rows),
        "",
        "![series by source](cardinality.png)",
        "",
        *advice(result),
        "",
        "```json",
        json.dumps(result, indent=1, sort_keys=True),
        "```",
        "",
    ])


def slowest_group(point: dict[str, Any]) -> list[str]:
    """The rule group that costs the most, against its interval: a miss when it runs longer."""
    by_group = point.get("rule_evaluation_s_by_group") or {}
    if not by_group:
        return []
    name, seconds = max(by_group.items(), key=lambda kv: float(kv[1]))
    interval = _seconds(EVALUATION_INTERVAL)
    verdict = (f"**longer than its {interval:g} s interval: a miss** (Prometheus skips rounds, and the "
               "recorded percentiles age)" if seconds > interval else f"within its {interval:g} s interval")
    why = ("It takes `rate()` over every bucket series of the exporter's per-pod histogram once a round "
           f"(`{recorded.BUCKET_RATE5M}`, the pod summed away) and every percentile from that; before, each "
           "percentile took its own `rate()` over the per-pod buckets and the group ran 51.8 s a round at "
           "1,000 pods, past its interval. What is left of its cost grows with the bucket series: fewer "
           "buckets (above), or a Prometheus with more cores." if name == "tidescale.rules.latency" else "")
    return [f"- **The slowest rule group is `{name}`: {seconds:.1f} s a round at {point['pods']:,} pods**, "
            f"{verdict}. {why}".rstrip()]


def bucket_rates(point: dict[str, Any]) -> str:
    """The share of the recorded series that is the latency histogram's rate (the percentiles' input)."""
    n = (point.get("recorded_by_rule") or {}).get(recorded.BUCKET_RATE5M)
    if not n:
        return ""
    return (f"; {n:,.0f} of them are the latency histogram's rate per Deployment, model version, stage and `le` "
            f"(`{recorded.BUCKET_RATE5M}`, {n / point['model_versions']:g} per Deployment and "
            "model version here, the same whatever its pod count), which every percentile reads")


def advice(result: dict[str, Any]) -> list[str]:
    """What to turn off or shard, from this run's figures."""
    from tidescale.exporters.settings import ExporterSettings
    from tidescale.exporters.stages import STAGES

    unit = result["per_unit"]
    largest = list(result["fleets"].values())[-1]
    ours, theirs = tidescale_share(largest["series"])
    exporter_share = largest["series"][EXPORTER] / ours
    cap = ExporterSettings.model_validate({}).max_series
    per_version = unit["exporter_per_pod_and_model_version"]
    lean = {n: unit[f"exporter_per_pod_and_model_version_at_max_buckets_{n}"] for n in LEAN_BUCKETS}
    pods_per_exporter = cap // (len(STAGES) * len(CAPTURE_MODELS))
    return [
        "## Advice for large fleets",
        "",
        f"- **The exporter's latency histogram is the cost.** It is {exporter_share:.0%} of what tidescale adds at "
        f"{largest['pods']:,} pods: {per_version:g} series per pod and model version ({len(STAGES)} stages × the "
        "buckets + `_sum` + `_count`), where Triton itself exposes "
        f"{unit['triton_per_model_version']:g} per model version and dcgm-exporter {unit['dcgm_per_gpu']:g} per GPU. "
        "It is what makes P99 aggregatable across pods; its buckets are the knob: `exporter.settings.max_buckets` "
        + ", ".join(f"{n} gives {v:g}" for n, v in lean.items()) + " (the SLO thresholds stay exact boundaries; "
        "the quantiles between them get coarser).",
        f"- **One exporter holds {cap:,} latency label sets** (`max_series`, shipped): {pods_per_exporter} pods of "
        f"{len(CAPTURE_MODELS)} models. Beyond that it refuses new ones and TidescaleSeriesCapped fires. Run "
        "`exporter.mode: daemonset` (one exporter per node, as measured here) for a large fleet, or raise "
        "`max_series` with the Prometheus memory to match.",
        f"- **The recording rules add {largest['series'][RECORDED] / largest['pods']:.1f} series per pod** "
        f"({largest['series'][RECORDED]:,.0f} at {largest['pods']:,} pods): per pod and GPU for the dashboards' "
        f"joins, per model for the SLO{bucket_rates(largest)}. Keep them in each cluster's own Prometheus "
        "(close to the data, where the exporter's histograms are) and send only the recorded series to a "
        "global Thanos or Mimir if its ingest is the limit.",
        *slowest_group(largest),
        f"- **Prometheus at {largest['pods']:,} pods**: {largest['head_series']:,.0f} head series, "
        f"{largest['prometheus_rss_bytes'] / 2**30:.2f} GiB RSS, {largest['rule_evaluation_s_sum']:.2f} s for one "
        "round of every rule group on this 2-core machine. tidescale's series are "
        f"{ours / theirs:.1f}× what Triton and dcgm-exporter expose. Shard by cluster (one Prometheus per "
        "cluster, as the chart assumes) before sharding by namespace: the SLO joins need a model's pods together.",
    ]


def run_command(json_only: bool = False, quick: bool = False) -> None:
    bench_main(lambda progress: run(quick=quick, progress=progress), markdown, RESULT_MD, json_only)
