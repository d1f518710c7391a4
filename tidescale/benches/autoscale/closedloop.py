"""One policy against one traffic realisation on the fast simulator, and the scores of the run.

The loop: advance the fleet (scraping every 15 s) to the policy's next decision, hand the
decision to `sim.set_replicas`, collect the requests completed meanwhile. Requests that never
complete (no Ready replica, or still queued after a drain period) count as SLO misses.

Prometheus' scrapes and the HPA's syncs run on clocks of their own: where a surge falls within
either 15 s cycle decides how long it goes unseen, so a run draws both phases from its seed
(`with_seed`) instead of starting every clock with the surge.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tidescale.benches.autoscale.policies import HPA_SYNC_S, Policy, tick_after
from tidescale.sim import BatcherConfig, CompletedRequests, FleetSim, MetricsLag
from tidescale.sim.clients import CappedSender, ClientRetries, OpenRequestCap
from tidescale.sim.lag import DEFAULT_EXTRACTORS
from tidescale.sim.readiness import ReadinessFaults
from tidescale.sim.results import FleetCounters
from tidescale.sim.samples import sample_quantile
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.startup import PodStartup

SCRAPE_INTERVAL_S = 15.0
DRAIN_S = 60.0
WINDOW_S = 60.0
RECOVERY_WINDOW_S = 10.0
RECOVERY_STREAK_S = 60.0
HISTORY_S = 150.0  # completions the simulator keeps (the P99 of the last minute reads them)
COLLECT_EVERY_S = 60.0  # well inside HISTORY_S
ROUTING_QUANTUM_S = 0.01  # a least-loaded router's loads are read every this long (a policy's `routing`)
# The load is beyond the largest fleet where its mean over this long exceeds what maxReplicas complete:
# long enough that a Poisson second over the line is not an overload, short against any scale-down.
SATURATION_WINDOW_S = 30


@dataclass(frozen=True)
class SimParams:
    curve: ServiceCurve
    batcher: BatcherConfig
    cold_start_s: float
    slo_latency_threshold_s: float
    seed: int = 0
    hold_s: float = 60.0  # no decisions until the rate windows hold real data
    scrape_offset_s: float = 0.0  # Prometheus scrapes at this offset + k x SCRAPE_INTERVAL_S
    sync_offset_s: float = 0.0  # the policy decides (the HPA syncs) at this offset + k x its period
    startup: PodStartup | None = None  # how new replicas start, where not all in cold_start_s
    retries: ClientRetries | None = None  # clients that retry refused requests (None: they do not)
    faults: ReadinessFaults | None = None  # how replicas lose readiness once they serve (None: never)
    scrape_interval_s: float = SCRAPE_INTERVAL_S  # Prometheus' scrape interval (the demo's chart: 5 s)
    open_cap: OpenRequestCap | None = None  # clients that hold at most this many requests open (None: no cap)
    routing: str | None = None  # how the Service routes, where not the policy's (`FleetSim` routing)
    # The replica's latency-vs-load curve from its load test, as tidescale's queue sizing is given it
    # (`scenarios.measure_budget_shares`; the profile's, in a deployment). (): none given.
    budget_shares: tuple[tuple[float, float], ...] = ()


def clock_offsets(seed: int) -> tuple[float, float]:
    """The scrape's and the HPA sync's phases of one draw, uniform over their 15 s cycles."""
    rng = np.random.default_rng([seed, 15])
    return float(rng.uniform(0.0, SCRAPE_INTERVAL_S)), float(rng.uniform(0.0, HPA_SYNC_S))


def recorded_offsets(params: SimParams) -> dict[str, float]:
    """The draw's clock phases as the JSON records them."""
    return {"scrape": round(params.scrape_offset_s, 2), "hpa_sync": round(params.sync_offset_s, 2)}


def with_seed(params: SimParams, seed: int) -> SimParams:
    """*params* for the draw *seed*: its arrivals' seed and its clocks' phases."""
    scrape, sync = clock_offsets(seed)
    return dataclasses.replace(params, seed=seed, scrape_offset_s=scrape, sync_offset_s=sync)


@dataclass
class RunResult:
    """Per-request latencies by arrival (inf = never served) and the replica timeline."""

    policy: str
    arrivals: np.ndarray
    latency: np.ndarray
    times: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)  # replicas (incl. starting) after each decision
    ready: list[int] = field(default_factory=list)
    scale_events: int = 0
    not_sent: int = 0  # requests capped clients never sent (`SimParams.open_cap`)


def _pending_max(sim: FleetSim, c: FleetCounters) -> float:
    """`max(nv_inference_pending_request_count)` by pod: the worst queue (Triton's queues are per pod)."""
    return float(max((r.pending for r in c.replicas if not r.draining), default=0))


def run_policy(policy: Policy, arrivals: np.ndarray, duration_s: float, initial: int, params: SimParams
               ) -> RunResult:
    sim = FleetSim(params.curve, params.batcher, initial, params.cold_start_s, seed=params.seed,
                   keep_history_s=HISTORY_S, routing=str(params.routing or getattr(policy, "routing", "round-robin")),
                   routing_quantum_s=ROUTING_QUANTUM_S, startup=params.startup, retries=params.retries,
                   faults=params.faults)
    lag = MetricsLag(sim, params.scrape_interval_s, extractors={**DEFAULT_EXTRACTORS, "pending_max": _pending_max},
                     offset_s=params.scrape_offset_s)
    sender = None if params.open_cap is None else CappedSender(params.open_cap, arrivals)
    if sender is None:
        sim.offer(arrivals)

    def advance(to_t: float) -> None:
        if sender is None:
            lag.advance(to_t)
        else:
            sender.offer_until(sim, to_t, lag.advance)

    result = RunResult(policy.name, arrivals, np.full(len(arrivals), np.inf))
    done_arrival: list[np.ndarray] = []
    done_latency: list[np.ndarray] = []
    # Decisions at sync_offset_s + k x period_s, from the first such tick after 0.
    t = tick_after(0.0, policy.period_s, params.sync_offset_s) - policy.period_s
    last, collected_to = initial, -math.inf
    result.times.append(0.0)
    result.replicas.append(initial)
    result.ready.append(initial)
    while t < duration_s:
        t = min(duration_s, t + policy.period_s)
        advance(t)
        if t < params.hold_s:
            continue
        desired = policy.decide(t, lag, sim)
        if desired != last:
            result.scale_events += 1
            sim.set_replicas(desired)
            last = desired
        result.times.append(t)
        result.replicas.append(sim.replicas_total)
        result.ready.append(sim.replicas_ready)
        if t - collected_to >= COLLECT_EVERY_S:
            _collect(sim, sim.completed(since_t=collected_to), done_arrival, done_latency)
            collected_to = t
    advance(duration_s + DRAIN_S)
    result.not_sent = 0 if sender is None else sender.not_sent
    _collect(sim, sim.completed(since_t=collected_to), done_arrival, done_latency)
    _fill_latencies(result, np.concatenate(done_arrival), np.concatenate(done_latency))
    return result


def _collect(sim: FleetSim, done: CompletedRequests, arrivals: list[np.ndarray], latencies: list[np.ndarray]) -> None:
    """*done* as its clients saw it: a retried request arrived at its first attempt."""
    first = sim.first_attempts(done)
    arrivals.append(first)
    latencies.append(done.latency if first is done.arrival else done.completion - first)


def _fill_latencies(result: RunResult, arrival: np.ndarray, latency: np.ndarray) -> None:
    """Match completions back to arrivals (both sorted by arrival); unmatched stay inf."""
    order = np.argsort(arrival, kind="stable")
    arrival, latency = arrival[order], latency[order]
    idx = np.searchsorted(result.arrivals, arrival)
    idx = np.clip(idx, 0, max(len(result.arrivals) - 1, 0))
    ok = (len(result.arrivals) > 0) & (result.arrivals[idx] == arrival) if len(arrival) else np.zeros(0, bool)
    result.latency[idx[ok]] = latency[ok]


# --- scores ------------------------------------------------------------------------------------------

def window_p99(arrivals: np.ndarray, latency: np.ndarray, window_s: float, duration_s: float) -> np.ndarray:
    """P99 latency of the requests arriving in each window (nan for an empty window)."""
    n = max(1, math.ceil(duration_s / window_s))
    bins = np.minimum((arrivals // window_s).astype(int), n - 1)
    out = np.full(n, np.nan)
    order = np.argsort(bins, kind="stable")
    sorted_bins = bins[order]
    bounds = np.searchsorted(sorted_bins, np.arange(n + 1))
    for k in range(n):
        chunk = latency[order[bounds[k]:bounds[k + 1]]]
        if len(chunk):
            out[k] = sample_quantile(chunk, 0.99, "higher")
    return out


def step_integral(times: Sequence[float], values: Sequence[float], start_s: float, end_s: float) -> float:
    """Integral over [start_s, end_s] of a step function (each value holds until the next time)."""
    total = 0.0
    for k in range(len(times)):
        nxt = times[k + 1] if k + 1 < len(times) else end_s
        total += values[k] * max(0.0, min(nxt, end_s) - max(times[k], start_s))
    return total


def replica_hours(times: list[float], replicas: list[int], start_s: float, end_s: float) -> float:
    """Integral of the replica count over [start_s, end_s] (each decision holds until the next one)."""
    return step_integral(times, replicas, start_s, end_s) / 3600.0


def recovery_seconds(arrivals: np.ndarray, latency: np.ndarray, slo_s: float, surge_at_s: float | None,
                     duration_s: float) -> float | None:
    """Seconds from the surge start until P99 stays within SLO for a minute (0 if it never left)."""
    if surge_at_s is None:
        return None
    p99 = window_p99(arrivals, latency, RECOVERY_WINDOW_S, duration_s)
    first = int(surge_at_s // RECOVERY_WINDOW_S)
    bad = [k for k in range(first, len(p99)) if not np.isnan(p99[k]) and p99[k] > slo_s]
    if not bad:
        return 0.0
    streak = int(RECOVERY_STREAK_S // RECOVERY_WINDOW_S)
    for k in range(bad[0], len(p99)):
        good = [v for v in p99[k:k + streak] if not np.isnan(v)]
        if len(p99[k:k + streak]) == streak and all(v <= slo_s for v in good):
            return k * RECOVERY_WINDOW_S - surge_at_s
    return duration_s - surge_at_s


def per_second_arrivals(arrivals: np.ndarray, start_s: float, end_s: float) -> np.ndarray:
    """Arrivals in each second of [start_s, end_s) (scored time: second 0 starts at *start_s*)."""
    scored = arrivals[(arrivals >= start_s) & (arrivals < end_s)] - start_s
    seconds = max(1, math.ceil(end_s - start_s))
    return np.bincount(np.minimum(scored.astype(int), seconds - 1), minlength=seconds).astype(float)


def saturated_seconds(arrivals: np.ndarray, start_s: float, end_s: float, fleet_rps: float,
                      window_s: int = SATURATION_WINDOW_S) -> np.ndarray:
    """Per scored second, whether the load around it outgrew a fleet completing *fleet_rps* (maxReplicas
    flat out): the seconds in which no policy should scale down, whatever its metric says."""
    per_second = per_second_arrivals(arrivals, start_s, end_s)
    return np.convolve(per_second, np.ones(window_s) / window_s, mode="same") > fleet_rps


def saturation_scores(result: RunResult, saturated: np.ndarray, start_s: float, max_replicas: int
                      ) -> dict[str, float | None]:
    """How a run behaved while the load outgrew maxReplicas (*saturated*, per scored second): its
    scale-downs then (each one a defect: the fleet serves less of a load it already cannot carry),
    and the share of that time it had asked for every replica it may have (None: never saturated)."""
    if not saturated.any():
        return {"saturated_s": 0.0, "scale_downs_saturated": 0.0, "saturated_at_max": None}
    last = len(saturated) - 1
    downs = sum(1 for (_, a), (t, b) in itertools.pairwise(zip(result.times, result.replicas, strict=True))
                if b < a and t >= start_s and saturated[min(int(t - start_s), last)])
    mid_seconds = np.flatnonzero(saturated) + start_s + 0.5
    asked = np.asarray(result.replicas)[np.maximum(np.searchsorted(result.times, mid_seconds, side="right") - 1, 0)]
    return {"saturated_s": float(saturated.sum()), "scale_downs_saturated": float(downs),
            "saturated_at_max": float(np.mean(asked >= max_replicas))}


def score(result: RunResult, slo_s: float, start_s: float, end_s: float, surge_at_s: float | None
          ) -> dict[str, float | None]:
    """The benchmark's measures over [start_s, end_s) (the warm-up before start_s is not scored)."""
    keep = result.arrivals >= start_s
    arrivals, lat = result.arrivals[keep] - start_s, result.latency[keep]
    duration = end_s - start_s
    p99 = window_p99(arrivals, lat, WINDOW_S, duration)
    windows = p99[~np.isnan(p99)]
    scored = [n for t, n in zip(result.times, result.replicas, strict=True) if t >= start_s]
    return {
        "requests_within_slo": float(np.mean(lat <= slo_s)) if len(lat) else 1.0,
        "windows_within_slo": float(np.mean(windows <= slo_s)) if len(windows) else 1.0,
        "replica_hours": replica_hours(result.times, result.replicas, start_s, end_s),
        "scale_events": float(sum(1 for a, b in itertools.pairwise(scored) if a != b)),
        "max_replicas": float(max(scored, default=0)),
        "unserved_requests": float(np.sum(~np.isfinite(lat))),
        "recovery_s": recovery_seconds(arrivals, lat, slo_s, surge_at_s, duration),
    }
