"""`tidescale bench autoscale`: every policy, identical traffic and seeds, one run, scored the same way.

Scenarios run on the fast simulator (V100 service curve, Triton dynamic batcher max 32,
preferred 8/16, 2 ms queue delay) with the metric lags of production (15 s scrape, rate
windows, HPA 15 s sync, the recommender's answer one scrape late). The oracle knows the future
arrivals and pays the same cold start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler import policies as pol
from autoscaler.closedloop import RunResult, SimParams, run_policy, score
from tidescale.errors import UsageError
from tidescale.fastsim import BatcherConfig, FleetSim
from tidescale.servicecurve import ServiceCurve
from tidescale.traffic import Scenario, flash_crowd, replay, scenario, surge

DEFAULT_SLO_S = 0.5
DEFAULT_BASE_RPS = 800.0
MIN_REPLICAS, MAX_REPLICAS = 1, 40
DEFAULT_COLD_START_S = 60.0
ORACLE_SLOT_S = 1.0
WARMUP_S = 120.0
AZURE_TRACE = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "traffic" / \
    "azure_llm_conv_2023.csv"


@dataclass(frozen=True)
class BenchScenario:
    name: str
    traffic: Scenario
    cold_start_s: float
    surge_at_s: float | None = None


def build_scenarios(duration_s: float, base_rps: float, trace: Path | None = None,
                    target_rps: float | None = None) -> dict[str, BenchScenario]:
    """The named scenarios (durations scaled to *duration_s*)."""
    at = duration_s * 0.3
    azure = trace or AZURE_TRACE
    out = {
        "diurnal": BenchScenario("diurnal", scenario("diurnal", base_rps, duration_s), DEFAULT_COLD_START_S),
        "surge-3x": BenchScenario("surge-3x", surge(base_rps, duration_s, 3.0, at_s=at, ramp_s=60.0),
                                  DEFAULT_COLD_START_S, at),
        "flash-crowd-10x": BenchScenario("flash-crowd-10x", flash_crowd(base_rps, duration_s, 10.0, at_s=at),
                                         DEFAULT_COLD_START_S, at),
        "cold-start-30s": BenchScenario("cold-start-30s", scenario("diurnal-surge", base_rps, duration_s), 30.0,
                                        duration_s * 0.4),
        "cold-start-120s": BenchScenario("cold-start-120s", scenario("diurnal-surge", base_rps, duration_s), 120.0,
                                         duration_s * 0.4),
    }
    if azure.is_file():
        name = "trace" if trace else "azure-llm-trace"
        out[name] = BenchScenario(name, replay(azure, time_scale=duration_s / 3600.0,
                                               target_rps=target_rps or base_rps), DEFAULT_COLD_START_S)
    return out


def measure_capacity(curve: ServiceCurve, cfg: BatcherConfig, slo_s: float, seed: int = 0,
                     run_s: float = 120.0) -> float:
    """A load test on one replica (what perf_analyzer would give): the highest Poisson rate whose P99 ≤ SLO."""
    lo, hi = 1.0, curve.max_throughput() * 1.2
    rng = np.random.default_rng(seed)
    for _ in range(14):
        mid = (lo + hi) / 2
        gaps = rng.exponential(1.0 / mid, int(mid * run_s * 1.2) + 10)
        arr = np.cumsum(gaps)
        arr = arr[arr < run_s]
        sim = FleetSim(curve, cfg, 1, 0.0, seed=seed)
        sim.offer(arr)
        sim.advance(run_s + 30.0)
        done = sim.completed()
        p99 = done.latency_quantile(0.99) if len(done) == len(arr) else math.inf
        lo, hi = (mid, hi) if p99 <= slo_s else (lo, mid)
    return lo


def oracle_needed(arrivals: np.ndarray, duration_s: float, capacity_rps: float) -> list[int]:
    """Replicas each slot needs: its arrival rate over the capacity at the SLO."""
    slots = max(1, math.ceil(duration_s / ORACLE_SLOT_S))
    counts = np.bincount(np.minimum((arrivals // ORACLE_SLOT_S).astype(int), slots - 1), minlength=slots)
    return [max(1, math.ceil(c / ORACLE_SLOT_S / capacity_rps)) for c in counts]


def make_policy(name: str, initial: int, capacity_rps: float, cold_start_s: float, needed: list[int],
                slo_s: float) -> pol.Policy:
    lo, hi = MIN_REPLICAS, MAX_REPLICAS
    factories: dict[str, Callable[[], pol.Policy]] = {
        "hpa-cpu": lambda: pol.hpa_cpu(initial, lo, hi),
        "hpa-gpu-util": lambda: pol.hpa_gpu_util(initial, lo, hi),
        "triton-queue-time": lambda: pol.triton_queue_time(initial, lo, hi),
        "keda-rps": lambda: pol.keda_rps(initial, lo, hi),
        "knative-kpa": lambda: pol.KnativeKpa(initial, lo, hi),
        "ray-serve": lambda: pol.RayServe(initial, lo, hi),
        "tidescale": lambda: pol.TidescalePolicy(initial, lo, hi, capacity_rps, cold_start_s, slo_s),
        "oracle": lambda: pol.Oracle(needed, ORACLE_SLOT_S, cold_start_s, lo, hi),
    }
    return factories[name]()


def warmup_arrivals(sc: BenchScenario, seed: int) -> np.ndarray:
    """WARMUP_S of steady traffic at the scenario's opening rate, so rate windows are full at t=0."""
    first = sc.traffic.arrivals(seed)
    rate = float(np.sum(first < 60.0)) / 60.0
    rng = np.random.default_rng([seed, 7])
    gaps = rng.exponential(1.0 / max(rate, 1e-3), int(rate * WARMUP_S * 1.5) + 10)
    warm = np.cumsum(gaps)
    return warm[warm < WARMUP_S]


def run_scenario(sc: BenchScenario, policy_names: list[str], params: SimParams, capacity_rps: float,
                 progress: Callable[[str], None] = lambda _: None) -> tuple[dict[str, dict[str, Any]],
                                                                              dict[str, RunResult]]:
    """Every policy on the same arrivals (after a warm-up); scores exclude the warm-up."""
    arrivals = np.concatenate([warmup_arrivals(sc, params.seed), sc.traffic.arrivals(params.seed) + WARMUP_S])
    end = sc.traffic.duration_s + WARMUP_S
    needed = oracle_needed(arrivals, end, capacity_rps)
    initial = max(needed[: int((WARMUP_S + 60.0) / ORACLE_SLOT_S)])  # a fair start: the first minute covered
    p = SimParams(params.curve, params.batcher, sc.cold_start_s, params.slo_p99_s, params.seed, params.hold_s)
    surge_at = None if sc.surge_at_s is None else sc.surge_at_s
    scores: dict[str, dict[str, Any]] = {}
    runs: dict[str, RunResult] = {}
    for name in policy_names:
        progress(f"{sc.name}: {name}")
        policy = make_policy(name, initial, capacity_rps, sc.cold_start_s, needed, params.slo_p99_s)
        runs[name] = run_policy(policy, arrivals, end, initial, p)
        scores[name] = score(runs[name], params.slo_p99_s, WARMUP_S, end, surge_at)
    oracle_hours = scores.get("oracle", {}).get("replica_hours")
    for s in scores.values():
        s["cost_vs_oracle"] = s["replica_hours"] / oracle_hours if oracle_hours else None
    return scores, runs


def dominated_by(scores: dict[str, dict[str, Any]], policy: str) -> list[str]:
    """Peers that are cheaper and at least as good on both SLO measures (oracle excluded)."""
    me = scores[policy]
    return [n for n, s in scores.items() if n not in (policy, "oracle")
            and s["replica_hours"] < me["replica_hours"]
            and s["requests_within_slo"] >= me["requests_within_slo"]
            and s["windows_within_slo"] >= me["windows_within_slo"]]


def check_scenarios(names: list[str], known: list[str]) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(known)}")
