"""`tidescale bench closed-loop`: the demo's story as the local cluster played it, against the same
story replayed in the simulator that `bench autoscale` runs.

Why: every autoscale page is only as true as the simulator's closed loop (replicas, routing, the
recommender, the HPA and the lags between them). `bench fidelity` holds one replica against real
Triton; this holds the loop, once, against the real fleet: a recorded `tidescale demo` run
(`demo-out/`: summary.json, timeline.json and the chart values it installed).

The replay takes from the run only what the run configured or measured: the demo's settings, the
chart values (the recommender's settings, the target's capacity and replica bounds, the scrape
interval, KEDA or adapter mode), the very requests the autoscaled model got (the load generator's
schedule is a function of its seed), and the pods' cold start as the cluster gave it (the median
from a replica's creation to Ready). Nothing is fitted to the result. Draws 1..N-1 replay other
realisations of the story with other clock phases: the band the one real run is judged against.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from tidescale.autoscaler.settings import RecommenderSettings
from tidescale.benches.autoscale import policies as pol
from tidescale.benches.autoscale.closedloop import RunResult, SimParams, clock_offsets, run_policy, step_integral
from tidescale.benches.autoscale.scenarios import PUBLISH_DELAY_S
from tidescale.benches.report import BENCH_DIR, markdown_table, save_figure, write_page
from tidescale.contracts.errors import UsageError
from tidescale.devstack.demo import on_cluster as story_run
from tidescale.devstack.demo.settings import DemoSettings
from tidescale.devstack.demo.timeline import load_spread
from tidescale.devstack.fleet.loadgen import request_schedule
from tidescale.devstack.fleet.model_repo import ModelSpec
from tidescale.sim import BatcherConfig, FleetSim, MetricsLag
from tidescale.sim.batcher import SCHEDULERS
from tidescale.sim.clients import OpenRequestCap
from tidescale.sim.fleet import KEEPALIVE_CONNECTIONS
from tidescale.sim.samples import sample_quantile

PAGE = "fidelity-closed-loop"
PNG = BENCH_DIR / f"{PAGE}.png"
FILES = ("summary.json", "timeline.json", "values.yaml")
MAX_FILE_BYTES = 32 * 1024 * 1024  # a 24 h demo's timeline is ~25 MB
MAX_DRAWS = 50
MAX_REPLICAS = 10_000  # a record claiming more is not a demo's (and would cost memory per replica)
DRAW_SEED_STEP = 101  # draw k replays the story with seed + k x this (the load generator uses seed and seed + 1)
# What "agrees" means, per measure (stated on the page): a measure agrees where the cluster's figure
# lies within the simulator's draws, widened by the tolerance.
TOLERANCE = {"replicas": 0.5, "ready": 0.5, "served_rps": 0.1, "requests_within_slo": 0.05,
             "latency_p99_s": 0.25, "first_scale_up_s": 15.0}
RELATIVE = {"served_rps", "latency_p99_s"}  # a share of the figure; the others are absolute
MEASURES = ("replicas", "ready", "served_rps", "requests_within_slo", "latency_p99_s")
WINDOW_S = 10.0  # the plot's P99 windows (the demo's live P99 reads the last 10 s)


class _Target(BaseModel):
    model_config = ConfigDict(extra="allow")
    minReplicas: int = Field(ge=1)
    maxReplicas: int = Field(ge=1, le=1000)
    capacityRps: float = Field(gt=0)


class _Values(BaseModel):
    """The parts of the demo's chart values a replay reads; the rest are the chart's business."""

    model_config = ConfigDict(extra="allow")
    autoscaling: dict[str, Any]
    recommender: dict[str, Any] = Field(default_factory=dict)
    monitoring: dict[str, Any] = Field(default_factory=dict)


class _Row(BaseModel):
    model_config = ConfigDict(extra="ignore")
    t: float = Field(ge=0, allow_inf_nan=False)
    replicas_ready: int = Field(ge=0, le=MAX_REPLICAS)
    replicas_total: int = Field(ge=0, le=MAX_REPLICAS)
    p99_s: float | None = None
    pod_rps: dict[str, float] | None = None  # older records lack the two diagnostics
    host_cpu_busy: float | None = Field(default=None, ge=0, le=1)


class _PhaseFigures(BaseModel):
    model_config = ConfigDict(extra="ignore")
    sent: int = Field(ge=0)
    errors: int = Field(default=0, ge=0)
    requests_within_slo: float | None = Field(default=None, ge=0, le=1)
    latency_p99_s: float | None = Field(default=None, ge=0)


@dataclass(frozen=True)
class RecordedRun:
    """A demo run as its files recorded it."""

    folder: Path
    settings: DemoSettings
    mode: str
    kubernetes: str
    target: _Target
    recommender_settings: dict[str, Any]
    scrape_interval_s: float
    max_in_flight: int  # the load generator's cap on open requests, all models together
    rows: list[_Row]
    by_phase: dict[str, _PhaseFigures]


def prometheus_seconds(text: str) -> float:
    """A Prometheus duration ('5s', '1m30s', '500ms') in seconds."""
    parts = re.findall(r"(\d+)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise UsageError(f"monitoring.interval {text!r} is not a Prometheus duration such as 5s or 1m")
    return sum(int(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u] for n, u in parts)


def _read(path: Path) -> Any:
    if not path.is_file():
        raise UsageError(f"{path}: not found; `tidescale demo` writes summary.json, timeline.json and "
                         "values.yaml there")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise UsageError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB; not a demo's record")
    try:
        text = path.read_text(encoding="utf-8")
        return yaml.safe_load(text) if path.suffix == ".yaml" else json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as e:
        raise UsageError(f"{path}: not readable as {path.suffix[1:].upper()}: {str(e).splitlines()[0][:200]}") from None


def _invalid(path: Path, e: ValidationError, prefix: tuple[str, ...] = ()) -> UsageError:
    first = e.errors()[0]
    where = ".".join(str(p) for p in (*prefix, *first["loc"])) or "(top)"
    return UsageError(f"{path}: {where}: {first['msg']}")


def load_recorded_run(folder: Path) -> RecordedRun:
    """The run in *folder*, checked: a clear UsageError for anything a replay cannot use."""
    summary, rows, values = (_read(folder / name) for name in FILES)
    spath = folder / "summary.json"
    if not isinstance(summary, dict) or summary.get("on") != "cluster":
        raise UsageError(f"{spath}: not a demo on the cluster (`tidescale demo`, on: cluster)")
    if summary.get("scenario") != "cluster-story":
        raise UsageError(f"{spath}: the run played {summary.get('scenario')!r}; only the told story can be replayed")
    if "settings" not in summary or "autoscaled_model" not in summary:
        raise UsageError(f"{spath}: recorded by an older tidescale (no settings or autoscaled_model); "
                         "run the demo again")
    try:
        settings = DemoSettings.model_validate(summary["settings"])
    except ValidationError as e:
        raise _invalid(spath, e, ("settings",)) from None
    model = summary["autoscaled_model"]
    try:
        by_phase = TypeAdapter(dict[str, _PhaseFigures]).validate_python(
            model.get("by_phase") if isinstance(model, dict) else None)
    except ValidationError as e:
        raise _invalid(spath, e, ("autoscaled_model", "by_phase")) from None
    missing = [p.name for p in story_run.story_phases() if p.name not in by_phase]
    if missing:
        raise UsageError(f"{spath}: autoscaled_model.by_phase lacks the phases {', '.join(missing)}")
    tpath, vpath = folder / "timeline.json", folder / "values.yaml"
    try:
        timeline = TypeAdapter(list[_Row]).validate_python(rows)
    except ValidationError as e:
        raise _invalid(tpath, e) from None
    if len(timeline) < 2:
        raise UsageError(f"{tpath}: fewer than two samples")
    if any(b.t < a.t for a, b in itertools.pairwise(timeline)):
        raise UsageError(f"{tpath}: samples out of time order")
    try:
        chart = _Values.model_validate(values)
        targets = chart.autoscaling.get("targets")
        if not isinstance(targets, list) or not targets:
            raise UsageError(f"{vpath}: autoscaling.targets is empty")
        target = _Target.model_validate(targets[0])  # the demo autoscales one Deployment
    except ValidationError as e:
        raise _invalid(vpath, e) from None
    recommender = chart.recommender.get("settings") or {}
    try:
        if not isinstance(recommender, dict):
            raise UsageError(f"{vpath}: recommender.settings must be a mapping")
        pol.shipped_settings(**recommender)
    except ValidationError as e:
        raise _invalid(vpath, e, ("recommender", "settings")) from None
    except TypeError:  # a key that is not a string
        raise UsageError(f"{vpath}: recommender.settings keys must be setting names") from None
    loadgen, kube = summary.get("load_generator"), summary.get("kubernetes")
    cap = loadgen.get("max_in_flight") if isinstance(loadgen, dict) else story_run.MAX_IN_FLIGHT
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise UsageError(f"{spath}: load_generator.max_in_flight must be a positive integer, got {cap!r}")
    return RecordedRun(folder, settings, str(summary.get("autoscaling_mode", "keda")),
                       str(kube.get("server_version", "?") if isinstance(kube, dict) else "?"), target,
                       recommender,
                       prometheus_seconds(str(chart.monitoring.get("interval", "15s"))), cap, timeline, by_phase)


def pod_start_seconds(rows: Sequence[_Row]) -> list[float]:
    """Per replica the Deployment added, seconds until that many were Ready: the cold start the
    cluster gave (image, tritonserver, model load, readiness probe), sample-resolution."""
    waiting: list[tuple[float, int]] = []  # (created at, the count it makes)
    out: list[float] = []
    for prev, row in itertools.pairwise(rows):
        waiting += [(row.t, k) for k in range(prev.replicas_total + 1, row.replicas_total + 1)]
        waiting = [(t, k) for t, k in waiting if k <= row.replicas_total]  # scaled away before Ready
        out += [round(row.t - t, 1) for t, k in waiting if row.replicas_ready >= k]
        waiting = [(t, k) for t, k in waiting if row.replicas_ready < k]
    return out


def autoscaled_spec(settings: DemoSettings) -> ModelSpec:
    return next(m for m in story_run.served_models(settings) if m.name == story_run.AUTOSCALED_MODEL)


def batcher_of(spec: ModelSpec, scheduler: str = "stepped") -> BatcherConfig:
    """The model's `dynamic_batching` and instances as the simulator's batcher (by default the stepped
    scheduler, the one `bench autoscale` runs)."""
    timeout = None if spec.queue_timeout_us is None else spec.queue_timeout_us / 1e6
    return BatcherConfig(max_batch_size=spec.max_batch_size, preferred_batch_sizes=spec.preferred_batch_sizes,
                         max_queue_delay_s=spec.max_queue_delay_us / 1e6, instance_count=spec.instance_count,
                         queue_timeout_s=timeout, scheduler=scheduler)


def autoscaled_share(settings: DemoSettings) -> float:
    return settings.model_mix.get(story_run.AUTOSCALED_MODEL, 0.0) / sum(settings.model_mix.values())


def open_cap(run: RecordedRun) -> OpenRequestCap:
    """The autoscaled model's part of the load generator's cap: the models hold the open requests in
    proportion to what they send (all of them are past their SLO when the cap binds)."""
    return OpenRequestCap(max(1, round(run.max_in_flight * autoscaled_share(run.settings))))


def replay_arrivals(run: RecordedRun, draw: int) -> np.ndarray:
    """The autoscaled model's requests: draw 0 the ones the run sent, draw k another realisation."""
    s = run.settings
    models = story_run.served_models(s)
    sc = story_run.story(s, story_run.overload_rate(s, models))
    arrivals, names = request_schedule(sc, s.model_mix, s.seed + draw * DRAW_SEED_STEP)
    return arrivals[np.asarray(names) == story_run.AUTOSCALED_MODEL]


PodRates = tuple[float, int, dict[str, float]]  # (t, Ready replicas, req/s by pod over the last RATE_WINDOW_S)
RATE_WINDOW_S = 15.0  # as the demo's sampler reads each pod's rate (three of its 5 s scrapes)


class PodSampler:
    """A policy that reads each pod's completions at every decision, then lets *inner* decide: the
    simulator's side of the demo's per-pod rates."""

    def __init__(self, inner: pol.Policy) -> None:
        self.inner, self.name, self.period_s = inner, inner.name, inner.period_s
        self.counts: list[tuple[float, int, dict[str, int]]] = []

    def decide(self, now: float, lag: MetricsLag, sim: FleetSim) -> int:
        replicas = sim.counters().replicas
        self.counts.append((now, sim.replicas_ready, {r.name: r.requests for r in replicas if not r.draining}))
        return self.inner.decide(now, lag, sim)

    def rates(self, window_s: float = RATE_WINDOW_S) -> list[PodRates]:
        out: list[PodRates] = []
        first = 0  # the oldest reading within the window of the current one
        for t, ready, now in self.counts:
            while self.counts[first][0] < t - window_s:
                first += 1
            then_t, _, then = self.counts[first]
            if t > then_t:
                out.append((t, ready, {pod: (n - then.get(pod, 0)) / (t - then_t) for pod, n in now.items()}))
        return out


def replay(run: RecordedRun, draw: int, cold_start_s: float, routing: str = "connections",
           scheduler: str = "stepped") -> tuple[RunResult, list[PodRates]]:
    """The story in the simulator with the chart's settings, one draw, and each pod's rate over time.
    *routing* "connections": the Service as kube-proxy has it, with clients that keep their
    connections (the demo's load generator); "round-robin": a Service that spreads every request.
    *scheduler*: the simulator's model of Triton's batcher (sim.batcher.SCHEDULERS)."""
    s, target = run.settings, run.target
    spec = autoscaled_spec(s)
    scrape, sync = clock_offsets(draw)
    params = SimParams(spec.curve, batcher_of(spec, scheduler), cold_start_s, s.slo_latency_threshold_s, seed=draw,
                       hold_s=0.0, scrape_offset_s=scrape % run.scrape_interval_s, sync_offset_s=sync,
                       scrape_interval_s=run.scrape_interval_s, open_cap=open_cap(run), routing=routing)
    configured_cold_start = RecommenderSettings.model_fields["cold_start_s"].default
    policy = PodSampler(pol.TidescalePolicy(
        target.minReplicas, target.minReplicas, target.maxReplicas, target.capacityRps, configured_cold_start,
        s.slo_latency_threshold_s, publish_delay_s=PUBLISH_DELAY_S.get(run.mode, 0.0), sync_offset_s=sync,
        overrides=run.recommender_settings))
    # Until two scrapes hold the story's first requests the service holds, and says so every tick; the
    # cluster's recommender had scraped an idle fleet before the story began and held just the same.
    service_log = logging.getLogger("tidescale.autoscaler.service")
    level = service_log.level
    service_log.setLevel(logging.ERROR)
    try:
        result = run_policy(policy, replay_arrivals(run, draw), s.duration_s, target.minReplicas, params)
    finally:
        service_log.setLevel(level)
    return result, policy.rates()


# --- measures ---------------------------------------------------------------------------------------

def phase_bounds(settings: DemoSettings) -> list[tuple[str, float, float]]:
    return story_run.phase_spans(settings.duration_s)


def step_mean(times: Sequence[float], values: Sequence[float], start: float, end: float) -> float:
    """Time-weighted mean over [start, end) of a step function (each value holds until the next time)."""
    return step_integral(times, values, start, end) / (end - start) if end > start else math.nan


def first_rise(times: Sequence[float], values: Sequence[float], after_s: float) -> float | None:
    """Seconds from *after_s* to the first rise of the replicas at or after it."""
    for (_, a), (t, b) in itertools.pairwise(zip(times, values, strict=True)):
        if t >= after_s and b > a:
            return round(t - after_s, 1)
    return None


def simulated_figures(result: RunResult, settings: DemoSettings) -> dict[str, Any]:
    slo = settings.slo_latency_threshold_s
    out: dict[str, Any] = {}
    for name, start, end in phase_bounds(settings):
        inside = (result.arrivals >= start) & (result.arrivals < end)
        lat = result.latency[inside]
        served = lat[np.isfinite(lat)]
        out[name] = {"replicas": step_mean(result.times, result.replicas, start, end),
                     "ready": step_mean(result.times, result.ready, start, end),
                     "served_rps": len(served) / (end - start),
                     "requests_within_slo": float(np.mean(lat <= slo)) if len(lat) else None,
                     "latency_p99_s": sample_quantile(served, 0.99, "nearest") if len(served) else None}
    return out


def recorded_figures(run: RecordedRun) -> dict[str, Any]:
    times = [r.t for r in run.rows]
    out: dict[str, Any] = {}
    for name, start, end in phase_bounds(run.settings):
        figures = run.by_phase[name]
        out[name] = {"replicas": step_mean(times, [r.replicas_total for r in run.rows], start, end),
                     "ready": step_mean(times, [r.replicas_ready for r in run.rows], start, end),
                     "served_rps": max(0, figures.sent - figures.errors) / (end - start),
                     "requests_within_slo": figures.requests_within_slo, "latency_p99_s": figures.latency_p99_s}
    return out


def load_diagnostics(run: RecordedRun, simulated: Sequence[PodRates]) -> dict[str, dict[str, float | None]]:
    """Per phase, where the load went: the share of the autoscaled model's completions the busiest pod
    served while two or more were Ready, on the cluster and in draw 0 of the simulator, against the
    even split (1/Ready, the cluster's), and the share of the cluster machine's cores busy."""
    out: dict[str, dict[str, float | None]] = {}
    for name, start, end in phase_bounds(run.settings):
        inside = [r for r in run.rows if start <= r.t < end]
        busy = [r.host_cpu_busy for r in inside if r.host_cpu_busy is not None]
        sim = load_spread([(ready, rates) for t, ready, rates in simulated if start <= t < end])
        out[name] = {**load_spread([(r.replicas_ready, r.pod_rps) for r in inside]),
                     "simulator_busiest_pod_share": sim["busiest_pod_share"],
                     "host_cpu_busy": round(statistics.fmean(busy), 3) if busy else None}
    return out


def loaded_starts(settings: DemoSettings) -> dict[str, float]:
    """When each phase whose demand outruns the fleet at first begins (the surge, the overload)."""
    return {name: start for name, start, _ in phase_bounds(settings) if name in story_run.LOADED_PHASES}


def agreement(measure: str, real: float | None, simulated: Sequence[float | None]) -> dict[str, Any]:
    """The cluster's figure against the draws' range widened by the measure's tolerance."""
    sims = [v for v in simulated if v is not None]
    entry: dict[str, Any] = {"cluster": real, "simulator": simulated[0] if simulated else None,
                             "simulator_range": [min(sims), max(sims)] if sims else None}
    if real is None or not sims:
        entry["agrees"] = None  # nothing to compare (no request in the phase)
        return entry
    tol = TOLERANCE[measure]
    if measure in RELATIVE:
        lo, hi = min(sims) * (1 - tol), max(sims) * (1 + tol)
    else:
        lo, hi = min(sims) - tol, max(sims) + tol
    entry["agrees"] = bool(lo <= real <= hi)
    return entry


def compare(run: RecordedRun, draws: int, routing: str = "connections",
            scheduler: str = "stepped") -> tuple[dict[str, Any], list[RunResult]]:
    starts = pod_start_seconds(run.rows)
    if not starts:
        raise UsageError(f"{run.folder / 'timeline.json'}: no replica became Ready after the run added it; "
                         "the cold start cannot be measured")
    cold = float(statistics.median(starts))
    replays = [replay(run, k, cold, routing, scheduler) for k in range(draws)]
    results = [r for r, _ in replays]
    sims = [simulated_figures(r, run.settings) for r in results]
    real = recorded_figures(run)
    phases = {name: {m: agreement(m, real[name][m], [s[name][m] for s in sims]) for m in MEASURES}
              for name, _, _ in phase_bounds(run.settings)}
    totals = [r.replicas_total for r in run.rows]
    rises = {name: agreement("first_scale_up_s", first_rise([r.t for r in run.rows], totals, at),
                             [first_rise(r.times, r.replicas, at) for r in results])
             for name, at in loaded_starts(run.settings).items()}
    verdicts = [e["agrees"] for p in (*phases.values(), rises) for e in p.values()]
    judged = [v for v in verdicts if v is not None]
    doc = {
        "benchmark": "closed-loop",
        "run": {"folder": str(run.folder), "kubernetes": run.kubernetes, "autoscaling_mode": run.mode,
                "duration_s": run.settings.duration_s, "base_rps": run.settings.base_rps,
                "model_mix": run.settings.model_mix, "seed": run.settings.seed},
        "replay": {"draws": draws, "scheduler": scheduler,
                   "curve_scale": run.settings.curve_scale, "capacity_rps": run.target.capacityRps,
                   "replicas": [run.target.minReplicas, run.target.maxReplicas],
                   "scrape_interval_s": run.scrape_interval_s, "hpa_sync_s": pol.HPA_SYNC_S,
                   "publish_delay_s": PUBLISH_DELAY_S.get(run.mode, 0.0),
                   "recommender_settings": run.recommender_settings,
                   "service_routing": routing, "keepalive_connections": KEEPALIVE_CONNECTIONS,
                   "cold_start_s": round(cold, 1), "pod_starts_s": starts,
                   "max_open_requests": open_cap(run).max_open, "max_in_flight": run.max_in_flight,
                   "not_sent": [r.not_sent for r in results]},
        "tolerance": TOLERANCE,
        "phases": phases,
        "load_spread": load_diagnostics(run, replays[0][1]),
        "first_scale_up_s": rises,  # per phase whose demand outruns the fleet at first
        "agreeing": [sum(judged), len(judged)],
        "goal_met": all(judged),
    }
    return doc, results


# --- the page ---------------------------------------------------------------------------------------

def _fmt(measure: str, v: float | None) -> str:
    if v is None:
        return "–"
    if measure == "requests_within_slo":
        return f"{100 * v:.1f} %"
    if measure == "latency_p99_s":
        return f"{v:.2f} s"
    if measure == "served_rps":
        return f"{v:.1f}"
    return f"{v:.2f}"


def _share(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f} %"


def _tolerance(measure: str) -> str:
    tol = TOLERANCE[measure]
    if measure in RELATIVE:
        return f"±{100 * tol:.0f} %"
    return f"±{100 * tol:.0f} pt" if measure == "requests_within_slo" else f"±{tol:g}"


LABELS = {"replicas": "replicas (mean)", "ready": "Ready replicas (mean)", "served_rps": "served req/s",
          "requests_within_slo": "within the SLO",
          "latency_p99_s": "P99 (client)", "first_scale_up_s": "first scale-up after the phase starts (s)"}


def _band(measure: str, e: dict[str, Any]) -> str:
    lo_hi = e["simulator_range"]
    return "–" if lo_hi is None else f"{_fmt(measure, lo_hi[0])} – {_fmt(measure, lo_hi[1])}"


def _verdict(e: dict[str, Any]) -> str:
    return {True: "yes", False: "**no**", None: "–"}[e["agrees"]]


def _row(phase: str, measure: str, e: dict[str, Any]) -> list[str]:
    return [phase, LABELS[measure], _fmt(measure, e["cluster"]), _fmt(measure, e["simulator"]), _band(measure, e),
            _tolerance(measure), _verdict(e)]


SERVICE_TEXT = {
    "connections": "The Service balances connections, as kube-proxy does, and the clients keep theirs (up to "
                   "{keepalive} idle, as the load generator's httpx pool): a request rides a connection opened "
                   "to the pod that was Ready when it opened.",
    "round-robin": "The Service spreads every request over the Ready pods (an L7 balancer's view, not kube-proxy's).",
}
SERVICES = tuple(SERVICE_TEXT)


SCHEDULER_TEXT = {"stepped": "the fast batch-by-batch model `bench autoscale` runs",
                  "triton-2.51": "Triton's batcher thread replayed event by event, the model within 10 % of real "
                                 "Triton on [fidelity.md](fidelity.md)"}


def _other_schedulers(doc: dict[str, Any]) -> list[str]:
    """The measures whose verdict the scheduler model changes, and each model's count of agreements."""
    own = doc["replay"]["scheduler"]
    lines: list[str] = []
    for name, alt in doc.get("other_schedulers", {}).items():
        rows = []
        pairs = [(phase, m, e, alt["phases"][phase][m]) for phase, p in doc["phases"].items() for m, e in p.items()]
        pairs += [(phase, "first_scale_up_s", e, alt["first_scale_up_s"][phase])
                  for phase, e in doc["first_scale_up_s"].items()]
        for phase, m, e, a in pairs:
            if e["agrees"] != a["agrees"]:
                rows.append([phase, LABELS[m], _fmt(m, e["cluster"]), _band(m, e), _verdict(e), _band(m, a),
                             _verdict(a)])
        agree, total = alt["agreeing"]
        lines += [f"The same replay with the {name} scheduler ({SCHEDULER_TEXT[name]}): {agree} of {total} agree "
                  f"(the {own} one: {doc['agreeing'][0]}). The measures whose verdict changes:", ""]
        lines += [markdown_table(["phase", "measure", "cluster", f"{own}, {doc['replay']['draws']} draws", "agrees",
                                  f"{name}, {doc['replay']['draws']} draws", "agrees"], rows)
                  if rows else "None.", ""]
    return lines


def render(doc: dict[str, Any]) -> str:
    run, rp = doc["run"], doc["replay"]
    rows = [_row(phase, m, e) for phase, p in doc["phases"].items() for m, e in p.items()]
    rows += [_row(phase, "first_scale_up_s", e) for phase, e in doc["first_scale_up_s"].items()]
    agree, total = doc["agreeing"]
    lines = [
        "# bench closed-loop: the demo's story on the cluster vs the simulator",
        "",
        f"`tidescale bench closed-loop --demo-out {run['folder']}` replays a recorded `tidescale demo` run (Kubernetes "
        f"{run['kubernetes']}, {run['autoscaling_mode']} mode, {run['duration_s']:g} s, {run['base_rps']:g} req/s "
        "base, "
        f"models {run['model_mix']}) in the simulator `bench autoscale` runs ({rp['scheduler']} scheduler"
        f"{'' if rp['scheduler'] == 'stepped' else '; `bench autoscale` runs the stepped one'}), "
        f"{rp['draws']} draws. The replay takes from the run: the autoscaled model's curve (×{rp['curve_scale']:g}) "
        f"and batching, capacity {rp['capacity_rps']:g} req/s per replica, replicas "
        f"{rp['replicas'][0]}..{rp['replicas'][1]}, the recommender's settings {rp['recommender_settings']}, "
        f"scrapes every {rp['scrape_interval_s']:g} s, the HPA "
        f"every {rp['hpa_sync_s']:g} s, and the cold start the cluster gave: median {rp['cold_start_s']:g} s over "
        f"{len(rp['pod_starts_s'])} pod starts ({', '.join(f'{v:g}' for v in rp['pod_starts_s'])} s). "
        f"{SERVICE_TEXT[rp['service_routing']].format(keepalive=rp['keepalive_connections'])} Draw 0 offers the "
        "very requests the run sent; the other draws are other realisations of the story with other clock phases.",
        "",
        "A measure agrees where the cluster's figure lies within the simulator's draws widened by the tolerance. "
        "Latencies are the autoscaled model's, as its clients saw them (the cluster) or as the simulated server "
        "returned them (the simulator).",
        "",
        markdown_table(["phase", "measure", "cluster", "simulator, draw 0", f"simulator, {rp['draws']} draws",
                        "tolerance", "agrees"], rows),
        "",
        f"Goal (every measure within its tolerance): **{'met' if doc['goal_met'] else 'not met'}**, "
        f"{agree} of {total} agree.",
        "",
        "Where the load went: the share of the autoscaled model's completions that the busiest pod served "
        "while two or more were Ready (each pod's rate over 15 s), on the cluster and in draw 0, against the "
        "even split (1/Ready), and the share of the cluster machine's cores busy.",
        "",
        markdown_table(["phase", "busiest pod's share, cluster", "simulator, draw 0", "even split", "cores busy"],
                       [[name, _share(d["busiest_pod_share"]), _share(d["simulator_busiest_pod_share"]),
                         _share(d["even_share"]), _share(d["host_cpu_busy"])]
                        for name, d in doc["load_spread"].items()]),
        "",
        *_other_schedulers(doc),
        f"![replicas and P99 over the story]({PAGE}.png)",
        "",
        f"The simulated clients hold at most {rp['max_open_requests']} of the autoscaled model's requests open, its "
        f"share of the load generator's {rp['max_in_flight']}, and drop what is due beyond that, as the load "
        "generator does (its 30 s timeout is not modelled). `served req/s`: the phase's requests that got an "
        "answer, per second of the phase.",
        "",
        "What the simulator leaves out, and where it shows: the cluster runs on the same 2 shared cores as its "
        "load generator, Prometheus, KEDA and the control plane, so a surge slows every process at once; the "
        "simulated replicas serve at their configured curve whatever the load on the machine. The simulated P99 "
        "is server-side; the cluster's adds the client's and the Service's hops.",
    ]
    return "\n".join(lines)


def plot(doc: dict[str, Any], run: RecordedRun, results: Sequence[RunResult], path: Path = PNG) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    for k, r in enumerate(results[1:], start=1):
        top.step(r.times, r.replicas, where="post", color="tab:orange", alpha=0.25, lw=1,
                 label="simulator, other draws" if k == 1 else None)
    if results:
        top.step(results[0].times, results[0].replicas, where="post", color="tab:orange", lw=2,
                 label="simulator, draw 0 (the same requests)")
    times = [r.t for r in run.rows]
    top.step(times, [r.replicas_total for r in run.rows], where="post", color="tab:blue", lw=2,
             label="cluster: replicas")
    top.step(times, [r.replicas_ready for r in run.rows], where="post", color="tab:blue", lw=1, ls="--",
             label="cluster: Ready")
    top.set_ylabel("replicas")
    top.set_ylim(0, run.target.maxReplicas + 1)
    top.legend(loc="lower right", fontsize=8)
    slo = run.settings.slo_latency_threshold_s
    for r in results[:1]:
        edges = np.arange(0.0, run.settings.duration_s + WINDOW_S, WINDOW_S)
        served = np.isfinite(r.latency)  # as the cluster's figure: what got an answer
        p99 = [sample_quantile(r.latency[served & (r.arrivals >= a) & (r.arrivals < b)], 0.99, "nearest")
               if np.any(served & (r.arrivals >= a) & (r.arrivals < b)) else np.nan
               for a, b in itertools.pairwise(edges)]
        bottom.step(edges[:-1], p99, where="post", color="tab:orange", lw=2,
                    label="simulator, draw 0: P99 of each 10 s (served requests)")
    bottom.plot(times, [np.nan if r.p99_s is None else r.p99_s for r in run.rows], color="tab:blue", lw=1.5,
                label="cluster: P99 of the last 10 s (every model)")
    bottom.axhline(slo, color="grey", ls=":", label=f"SLO {slo:g} s")
    bottom.set_yscale("log")
    bottom.set_ylabel("P99 latency (s)")
    bottom.set_xlabel("seconds into the story")
    bottom.legend(loc="lower right", fontsize=8)
    for ax in (top, bottom):
        for name, start, _ in phase_bounds(run.settings):
            ax.axvline(start, color="lightgrey", lw=0.8)
            if ax is top:
                ax.text(start + 2, ax.get_ylim()[1] * 0.97, name, fontsize=8, va="top", color="dimgrey")
    agree, total = doc["agreeing"]
    fig.suptitle(f"The demo's story: cluster vs simulator ({agree} of {total} measures agree)")
    save_figure(fig, path)


def run_bench(folder: Path, draws: int, service: str = "connections", scheduler: str = "stepped"
              ) -> tuple[dict[str, Any], RecordedRun, list[RunResult]]:
    if not 1 <= draws <= MAX_DRAWS:
        raise UsageError(f"--draws {draws}: must be between 1 and {MAX_DRAWS}")
    if service not in SERVICES:
        raise UsageError(f"--service {service!r}: choose one of {', '.join(SERVICES)}")
    if scheduler not in SCHEDULERS:
        raise UsageError(f"--scheduler {scheduler!r}: choose one of {', '.join(SCHEDULERS)}")
    run = load_recorded_run(folder)
    doc, results = compare(run, draws, service, scheduler)
    # The same story on the other scheduler model(s): whether a miss is the batcher's or the loop's.
    doc["other_schedulers"] = {}
    for other in SCHEDULERS:
        if other != scheduler:
            alt, _ = compare(run, draws, service, other)
            doc["other_schedulers"][other] = {k: alt[k] for k in ("phases", "first_scale_up_s", "agreeing")}
    return doc, run, results


def record(doc: dict[str, Any], run: RecordedRun, results: Sequence[RunResult]) -> None:
    write_page(PAGE, render(doc), doc)
    plot(doc, run, results)
