"""What the recommender service reads and writes, answered by the simulator: the benchmark runs the
service itself (`RecommenderService.tick`), not a copy of its decision path.

- `SimPrometheus` answers each of a target's queries (`TargetQueries`) from the scraped series of a
  `MetricsLag`, as Prometheus would one scrape late: the completion and rejection rates over the
  long and short windows, the summed and the worst pod's queue, the P99 over the recording rule's
  window, the Deployment's replicas, and the pods that expose a pending gauge (what the fast path
  reads); kube-state-metrics' pod start and Ready times (the cold start the service learns), its
  unschedulable pods and those that waited in CrashLoopBackOff lately, as the fleet has them now.
  Queries for series a simulated fleet has no model of (HPA status, the model load time) answer
  nothing, as a Prometheus without them would.
- `SimPods` reads those pods' own counters as their `/metrics` shows them now (the fast path); a
  pod that is gone does not answer.
- `SimScale` is the Deployment's scale subresource (direct mode), read and written.
- `DemandHistory` is what Prometheus remembers of the demand for the seasonal forecast: one sample a
  minute, the days before the run handed in, the run's own as it goes.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from tidescale.autoscaler.fastpath import PodCounters
from tidescale.autoscaler.queries import CRASH_LOOP_WINDOW_S, HISTORY_STEP_S, SeasonQuery, TargetQueries
from tidescale.autoscaler.recommend import RecommenderConfig
from tidescale.contracts.errors import UsageError
from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S
from tidescale.sim.fleet import FleetSim
from tidescale.sim.lag import MetricsLag

POD_PORT = 8002  # Triton's metrics port: the `instance` the fast path reads


class DemandHistory:
    """The demand (completions + rejections a second, over the rate window) one sample a minute, as the
    forecast's subqueries read it: *before* (time, rate) samples ending where the run starts, then
    what the run's scrapes show, recorded as the simulated Prometheus is asked."""

    def __init__(self, before: Sequence[tuple[float, float]] = ()) -> None:
        self.times = [t for t, _ in before]
        self.rates = [r for _, r in before]
        if any(b <= a for a, b in zip(self.times, self.times[1:], strict=False)):
            raise UsageError("the demand history's samples must be in time order")

    def due(self, now: float) -> bool:
        """Whether a minute has passed since the newest sample."""
        return not self.times or now >= self.times[-1] + HISTORY_STEP_S

    def record(self, now: float, rps: float) -> None:
        if self.due(now):
            self.times.append(now)
            self.rates.append(rps)

    def _within(self, start: float, end: float) -> list[float]:
        """The samples in (start, end], as a range selector takes them."""
        return self.rates[bisect.bisect_right(self.times, start):bisect.bisect_right(self.times, end)]

    def peak(self, start: float, end: float) -> float | None:
        got = self._within(start, end)
        return max(got) if got else None

    def median(self, start: float, end: float) -> float | None:
        got = self._within(start, end)
        return statistics.median(got) if got else None


def minute_rates(arrivals: np.ndarray, offset_s: float) -> list[tuple[float, float]]:
    """The demand samples of *arrivals* as the recording rule would have stored them: the requests of
    each minute a second, stamped at the minute's end, shifted by *offset_s*."""
    if len(arrivals) == 0:
        return []
    minutes = int(np.ceil(float(arrivals[-1]) / HISTORY_STEP_S)) or 1
    counts = np.bincount((arrivals // HISTORY_STEP_S).astype(int), minlength=minutes)
    return [(offset_s + (k + 1) * HISTORY_STEP_S, float(c) / HISTORY_STEP_S) for k, c in enumerate(counts)]


class SimPrometheus:
    """One target's queries answered from the simulator (`bind` sets the instant they are asked at)."""

    def __init__(self, queries: TargetQueries, config: RecommenderConfig,
                 slo_s: float = SLO_LATENCY_THRESHOLD_S, history: DemandHistory | None = None) -> None:
        self.queries = queries
        self._at: tuple[float, MetricsLag, FleetSim] | None = None
        self.history = history or DemandHistory()
        slow, fast = config.rate_window_s, config.fast_window_s
        self._rate_window_s = slow
        self._values: dict[str, Callable[[MetricsLag, FleetSim, float], float | None]] = {
            queries.completions: lambda lag, sim, now: lag.rate("requests", slow),
            queries.fast_completions: lambda lag, sim, now: lag.rate("requests", fast),
            queries.rejections: lambda lag, sim, now: lag.rate("failures", slow),
            queries.fast_rejections: lambda lag, sim, now: lag.rate("failures", fast),
            queries.queue: lambda lag, sim, now: lag.gauge("pending"),
            queries.max_pod_queue: lambda lag, sim, now: (lag.gauge("pending_max") if "pending_max" in lag.series
                                                          else None),
            queries.queue_age: lambda lag, sim, now: 0.0 if lag.gauge("pending") is not None else None,
            queries.p99: lambda lag, sim, now: _p99(sim, now - config.p99_window_s),
            queries.slow_share: lambda lag, sim, now: _slow_share(sim, now - slow, slo_s),
            queries.spec_replicas: lambda lag, sim, now: lag.gauge("replicas_total"),
            queries.ready_replicas: lambda lag, sim, now: lag.gauge("replicas_ready"),
            # count(...) of no pods is no series
            queries.unschedulable: lambda lag, sim, now: float(sim.unschedulable) or None,
            queries.crash_looping: lambda lag, sim, now: float(sim.crash_looping(CRASH_LOOP_WINDOW_S)) or None,
        }
        self._values.update(self._forecast_values())
        self._pod_times: dict[str, Callable[[tuple[str, float, float | None]], float | None]] = {
            queries.pod_started: lambda pod: pod[1], queries.pod_ready_at: lambda pod: pod[2]}
        self._silent = {queries.model_load, queries.hpa_current, queries.hpa_desired}
        self._discovery = f"group by (pod, instance) ({queries.pending})"

    def follow(self, queries: TargetQueries) -> None:
        """Answer *queries* from now on, as Prometheus answers any: the service rebuilds its forecast's
        reads when it learns another cold start (the other expressions stay as they were)."""
        if queries is not self.queries:
            self.queries = queries
            self._values.update(self._forecast_values())

    def _forecast_values(self) -> dict[str, Callable[[MetricsLag, FleetSim, float], float | None]]:
        """The forecast's reads (`SeasonQuery`), from the demand history."""
        q, history = self.queries, self.history
        out: dict[str, Callable[[MetricsLag, FleetSim, float], float | None]] = {}
        if q.demand_level is None:
            return out
        level_s = q.seasons[0].level_window_s
        out[q.demand_level] = lambda lag, sim, now: history.median(now - level_s, now)
        for season in q.seasons:
            def peak(lag: MetricsLag, sim: FleetSim, now: float, s: SeasonQuery = season) -> float | None:
                return history.peak(now - s.peak_offset_s - s.peak_window_s, now - s.peak_offset_s)

            def level(lag: MetricsLag, sim: FleetSim, now: float, s: SeasonQuery = season) -> float | None:
                return history.median(now - s.period_s - s.level_window_s, now - s.period_s)

            out[season.peak], out[season.level] = peak, level
        return out

    def bind(self, now: float, lag: MetricsLag, sim: FleetSim) -> None:
        self._at = (now, lag, sim)
        if self.queries.demand_level is not None and self.history.due(now):
            completed = lag.rate("requests", self._rate_window_s)
            if completed is not None:
                self.history.record(now, completed + (lag.rate("failures", self._rate_window_s) or 0.0))

    def _bound(self) -> tuple[float, MetricsLag, FleetSim]:
        if self._at is None:
            raise UsageError("SimPrometheus is asked before bind()")
        return self._at

    def instant(self, expr: str) -> list[tuple[float, float]]:
        now, lag, sim = self._bound()
        if expr in self._silent:
            return []
        if expr in self._pod_times:
            return [(now, float(row["value"][1])) for row in self.query(expr)]
        if expr not in self._values:
            raise UsageError(f"the simulated Prometheus has no model of the query {expr!r}")
        got = self._values[expr](lag, sim, now)
        return [] if got is None else [(now, got)]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        now, _lag, sim = self._bound()
        if expr in self._silent:
            return []
        if expr in self._pod_times:
            of = self._pod_times[expr]
            return [{"metric": {"pod": pod[0]}, "value": [now, str(of(pod))]} for pod in sim.pod_times()
                    if of(pod) is not None]
        if expr != self._discovery:
            return [{"metric": {}, "value": [now, str(v)]} for _, v in self.instant(expr)]
        # Every pod whose pending gauge is scraped: Ready ones, draining ones until they are gone.
        return [{"metric": {"pod": r.name, "instance": f"{r.name}:{POD_PORT}"}, "value": [now, "1"]}
                for r in sim.counters().replicas if r.ready]

    def close(self) -> None:
        self._at = None


def _slow_share(sim: FleetSim, since_t: float, slo_s: float) -> float | None:
    """The share of the requests completed since *since_t* slower than *slo_s* (None: none completed),
    as the traces' histogram gives it with the SLO as a bucket boundary."""
    recent = sim.completed(since_t=since_t)
    return float((recent.latency > slo_s).mean()) if len(recent) else None


def _p99(sim: FleetSim, since_t: float) -> float | None:
    recent = sim.completed(since_t=since_t)
    return recent.latency_quantile(0.99) if len(recent) else None


class SimPods:
    """The fast path's read of each pod's own counters, at the instant the simulator is at."""

    def __init__(self) -> None:
        self.sim: FleetSim | None = None

    def read(self, pods: Mapping[str, str], model: str) -> dict[str, PodCounters | None]:
        if self.sim is None:
            raise UsageError("SimPods is read before a simulator is bound")
        alive = {r.name: r for r in self.sim.counters().replicas}
        return {pod: (PodCounters(float(alive[pod].requests), float(alive[pod].failures), float(alive[pod].pending))
                      if pod in alive else None) for pod in pods}

    def close(self) -> None:
        self.sim = None


class SimHpa:
    """The HPA that applies the answer, as the recommender reads it for its `status.lastScaleTime`
    (`hpaclock`): the time of its last scale, truncated to the second as the API serializes it, on
    the run's clock (Unix time from 0)."""

    def __init__(self) -> None:
        self.scaled_at: float | None = None

    def read_namespaced_horizontal_pod_autoscaler(self, name: str, namespace: str) -> dict[str, Any]:
        stamp = None if self.scaled_at is None else datetime.fromtimestamp(math.floor(self.scaled_at), UTC)
        return {"status": {"lastScaleTime": None if stamp is None else stamp.strftime("%Y-%m-%dT%H:%M:%SZ")}}


class SimScale:
    """The Deployment's scale subresource (direct mode): the count it starts at, then the count last
    written. The benchmark hands the service this count as the spec replicas too (it has no
    kube-state-metrics lag to model), as the shipped service reads it from the subresource."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    def read_namespaced_deployment_scale(self, name: str, namespace: str) -> dict[str, Any]:
        return {"spec": {"replicas": self.replicas}}

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: Any) -> None:
        self.replicas = int(body["spec"]["replicas"])
