"""`tidescale bench autoscale`: every policy, identical traffic and seeds, one run, scored the same way.

Scenarios run on the fast simulator (V100 service curve, Triton dynamic batcher max 32,
preferred 8/16, 2 ms queue delay) with the metric lags of production (15 s scrape, rate
windows, HPA 15 s sync, the recommender's answer one scrape late). The oracle knows the future
arrivals and pays the same cold start.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tidescale.autoscaler.budget import shares_from_capacities
from tidescale.benches.autoscale import optimum
from tidescale.benches.autoscale import policies as pol
from tidescale.benches.autoscale.closedloop import (
    RunResult,
    SimParams,
    per_second_arrivals,
    run_policy,
    saturated_seconds,
    saturation_scores,
    score,
)
from tidescale.benches.autoscale.goals import GOALS
from tidescale.benches.forked import fork_map
from tidescale.contracts.errors import UsageError
from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S
from tidescale.sim import BatcherConfig, FleetSim
from tidescale.sim.readiness import ReadinessFaults
from tidescale.sim.recommender_io import minute_rates
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.startup import PodStartup
from tidescale.sim.traffic import DAY_S, Scenario, flash_crowd, lulls, replay, scenario, surge, weekend, workday

DEFAULT_SLO_S = SLO_LATENCY_THRESHOLD_S
DEFAULT_BASE_RPS = 800.0
MIN_REPLICAS, MAX_REPLICAS = 1, 40
DEFAULT_COLD_START_S = 60.0
ORACLE_SLOT_S = 1.0
WARMUP_S = 120.0
TRACE_SHIFT_STREAM = 11  # a trace draw's time shift comes from its own stream of the seed's generator
# Azure's public LLM inference trace (conversation service, 2023; one hour, 19,366 requests), shipped as
# package data so that an installed `tidescale bench autoscale` replays it too.
AZURE_TRACE = Path(__file__).resolve().parent / "data" / "azure_llm_conv_2023.csv"


@dataclass(frozen=True)
class BenchScenario:
    """*cold_start_s* is what every new replica takes, and what tidescale is configured with; with a
    *startup* model it is only the configured (median) start, and replicas start as the model draws."""

    name: str
    traffic: Scenario
    cold_start_s: float
    surge_at_s: float | None = None
    startup: PodStartup | None = None
    faults: ReadinessFaults | None = None  # how its pods lose readiness once they serve
    # The days before, oldest first, as Prometheus holds them for the seasonal forecast (each ends where
    # the next begins, the last where the run's warm-up ends).
    history: tuple[Scenario, ...] = ()
    # The Deployment's maxReplicas as every policy is configured (the GPU budget); below MAX_REPLICAS
    # where the load outgrows it (the overload scenario).
    max_replicas: int = MAX_REPLICAS

    @property
    def fastest_start_s(self) -> float:
        """The quickest a new replica serves: what a no-foresight bound grants every policy."""
        return self.cold_start_s if self.startup is None else self.startup.fastest_s

    @property
    def oracle_ahead_s(self) -> float:
        """How far ahead the oracle asks: the cold start, or a slow (90th-percentile) start."""
        return self.cold_start_s if self.startup is None else self.startup.slow_s

    def describe(self) -> str:
        """The page's title for it: the traffic, how replicas start and how they lose readiness."""
        faults = "" if self.faults is None else "; " + self.faults.describe(self._crash_from_words())
        ceiling = "" if self.max_replicas == MAX_REPLICAS else f"; maxReplicas {self.max_replicas}"
        return self._describe_start() + faults + ceiling

    def _crash_from_words(self) -> str | None:
        """The faults' `crash_from_s` in the surge's terms, where there is one (it counts the warm-up)."""
        if self.surge_at_s is None or self.faults is None:
            return None
        into = self.faults.crash_from_s - WARMUP_S - self.surge_at_s
        return "the surge" if into == 0 else f"{into:g} s into the surge"

    def _describe_start(self) -> str:
        if self.startup is None:
            return f"{self.traffic.description}, cold start {self.cold_start_s:g} s"
        st = self.startup
        text = f"{self.traffic.description}, start-to-Ready {st.container_s:g} s median"
        if st.container_sigma:
            text += f" (lognormal σ {st.container_sigma:g})"
        if st.free_gpus is not None:
            text += (f", {st.free_gpus} GPU(s) free beyond the opening fleet, then a node each: "
                     f"{st.node_min_s:g} s + a Lomax({st.node_shape:g}) tail × {st.node_scale_s:g} s, at most "
                     f"{st.node_max_s:g} s")
        return text


def build_scenarios(duration_s: float, base_rps: float, trace: Path | None = None,
                    target_rps: float | None = None, trace_unit: str | None = None) -> dict[str, BenchScenario]:
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
    if trace or azure.is_file():  # a trace named (`--trace`) is read, so that a missing one is an error
        name = "trace" if trace else "azure-llm-trace"
        out[name] = BenchScenario(name, replay(azure, time_scale=duration_s / 3600.0,
                                               target_rps=target_rps or base_rps, unit=trace_unit),
                                  DEFAULT_COLD_START_S)
    out.update(startup_scenarios(duration_s, base_rps))
    out.update(readiness_scenarios(duration_s, base_rps))
    out.update(lull_scenarios(duration_s, base_rps))
    out.update(seasonal_scenarios(base_rps))
    out.update(overload_scenarios(duration_s, base_rps))
    return out


# Run only when named (`--scenario`); recorded on a page of their own (autoscale-startup.md).
STARTUP_SCENARIOS = ("cold-start-variance", "node-provisioning")


def startup_scenarios(duration_s: float, base_rps: float) -> dict[str, BenchScenario]:
    """The 3× surge again, with replicas that start as clusters start them (issue 45, items 10 and 11):
    start-to-Ready times that vary from pod to pod, and GPUs that run out, so that a pod waits for a node
    cluster-autoscaler provisions. tidescale is configured with the median start and learns the rest."""
    at = duration_s * 0.3
    traffic = surge(base_rps, duration_s, 3.0, at_s=at, ramp_s=60.0)
    varied = PodStartup(DEFAULT_COLD_START_S, container_sigma=0.5)
    return {"cold-start-variance": BenchScenario("cold-start-variance", traffic, DEFAULT_COLD_START_S, at, varied),
            "node-provisioning": BenchScenario("node-provisioning", traffic, DEFAULT_COLD_START_S, at,
                                               dataclasses.replace(varied, container_sigma=0.25, free_gpus=2))}


# Run only when named, too; recorded on autoscale-readiness.md.
READINESS_SCENARIOS = ("readiness-flap", "crash-loop", "crash-loop-serving")


def readiness_scenarios(duration_s: float, base_rps: float) -> dict[str, BenchScenario]:
    """The 3× surge again, with pods that lose readiness once they serve (issue 45, item 11): probes that
    flap under load, the first pods the surge adds crash-looping on a bad node, and the oldest pods
    crash-looping once the surge has been met, their GPU failed under them. Every policy loses
    the capacity; tidescale must also keep learning its cold start from kube-state-metrics, whose ready
    time moves with every loss."""
    at = duration_s * 0.3
    traffic = surge(base_rps, duration_s, 3.0, at_s=at, ramp_s=60.0)
    return {"readiness-flap": BenchScenario("readiness-flap", traffic, DEFAULT_COLD_START_S, at,
                                            faults=ReadinessFaults(flaps_per_hour=6.0, flap_s=30.0)),
            "crash-loop": BenchScenario("crash-loop", traffic, DEFAULT_COLD_START_S, at,
                                        faults=ReadinessFaults(crash_looping=2, crash_up_s=60.0,
                                                               crash_from_s=WARMUP_S + at)),
            "crash-loop-serving": BenchScenario(
                "crash-loop-serving", traffic, DEFAULT_COLD_START_S, at,
                faults=ReadinessFaults(crash_looping=3, crash_up_s=60.0, crash_from_s=WARMUP_S + at * 5 / 3,
                                       crash_serving=True))}


# Run only when named, too; recorded on autoscale-lulls.md.
LULL_SCENARIOS = ("lulls",)


def lull_scenarios(duration_s: float, base_rps: float) -> dict[str, BenchScenario]:
    """Lulls, each long enough for some policies to scale down, and the load back as they do (issue 45,
    item 11: no scale-down onto a load the smaller fleet cannot carry). The load never exceeds what the
    fleet before the lull served: a policy that keeps its replicas, or takes a scale-down back in
    time, keeps the SLO; one whose scale-down lands on the returning load misses it for a cold start."""
    return {"lulls": BenchScenario("lulls", lulls(base_rps, duration_s), DEFAULT_COLD_START_S)}


# Run only when named, too; recorded on autoscale-overload.md.
OVERLOAD_SCENARIOS = ("overload",)
# The fleet's ceiling there: 5 replicas complete 1,900 req/s flat out (V100), the surge asks 2,400.
OVERLOAD_MAX_REPLICAS = 5


def overload_scenarios(duration_s: float, base_rps: float) -> dict[str, BenchScenario]:
    """The 3× surge again, onto a Deployment whose maxReplicas (the GPUs it may have) carries a quarter
    less than the surge (issue 45, item 11). No policy can meet the SLO while it lasts; each can hold
    every replica it may have until the load falls back, or scale down onto a load the whole fleet
    already cannot carry, as the demo's recommender once did when completions fell under overload.
    Scored apart (`closedloop.saturation_scores`): scale-downs while saturated, and the share of that
    time at maxReplicas."""
    at = duration_s * 0.3
    return {"overload": BenchScenario("overload", surge(base_rps, duration_s, 3.0, at_s=at, ramp_s=60.0),
                                      DEFAULT_COLD_START_S, at, max_replicas=OVERLOAD_MAX_REPLICAS)}


# Run only when named, too; recorded on autoscale-seasonal.md.
SEASONAL_SCENARIOS = ("workday",)
SEASONAL_COLD_START_S = 120.0
# The day before: its peaks 90 s later than today's (within the forecast's 120 s margin), and a tenth
# quieter (the level correction scales its peaks up to today's).
YESTERDAY_SHIFT_S, YESTERDAY_LEVEL = 90.0, 0.9


# A week: the weekend at half the base rate, without the office-hours peaks.
WEEKEND_LEVEL = 0.5
WEEKLY_SCENARIOS = ("monday", "saturday")


def seasonal_scenarios(base_rps: float) -> dict[str, BenchScenario]:
    """A real 24 h day whose peaks come every day at the same hours and rise within 30 s, with GPU
    replicas that take 2 minutes to start (issue 45, item 8): detection cannot meet them, standing
    capacity can at a price, and a seasonal forecast can from the day before (a real day whatever
    `--quick` says: the forecast reads a season of 24 h). Then a week with a weekend: a Monday after
    a quiet Sunday (the day before says no peak, last Monday says one), and a Saturday after a Friday
    (the day before says a peak, last Saturday says none)."""
    day, rest = workday(base_rps), weekend(base_rps, WEEKEND_LEVEL)
    shifted = workday(base_rps * YESTERDAY_LEVEL, shift_s=YESTERDAY_SHIFT_S)  # a workday a little off today's
    monday = (shifted, day, day, day, day, rest, rest)
    saturday = (rest, rest, day, day, day, day, shifted)
    return {"workday": BenchScenario("workday", day, SEASONAL_COLD_START_S, history=(shifted,)),
            "monday": BenchScenario("monday", dataclasses.replace(day, description="a Monday after a weekend: "
                                                                  + day.description), SEASONAL_COLD_START_S,
                                    history=monday),
            "saturday": BenchScenario("saturday", rest, SEASONAL_COLD_START_S, history=saturday)}


def history_samples(sc: BenchScenario, seed: int) -> list[tuple[float, float]]:
    """The demand of the days before the run, a sample a minute, ending where the run's warm-up ends
    (the scenario's t=0): what Prometheus would hold, had the fleet served it. Each day is a draw of
    its own seed, numbered back from the run (`history_seed`), so that scenarios with histories of
    different lengths read different draws as the same season: the workday's day before is not
    Monday's last Monday again."""
    samples: list[tuple[float, float]] = []
    end = WARMUP_S - sum(day.duration_s for day in sc.history)
    for k, day in enumerate(sc.history):
        samples += minute_rates(day.arrivals(history_seed(seed, len(sc.history) - k)), end)
        end += day.duration_s
    return samples


HISTORY_SEED = 1_000_003  # the day before is a draw of its own, not today's arrivals again
# Each day further back starts a block of seeds of its own: numbered seed + days before, draw s's
# second day before was draw s + 1's day before, and one page's draws shared days.
HISTORY_DAY_STRIDE = 1_000_000
MAX_SEED = HISTORY_DAY_STRIDE - 1


def history_seed(seed: int, days_before: int) -> int:
    """The seed of the day *days_before* the run (1: the day before). Draws 0 to `MAX_SEED`
    share no history day, on one page or across pages; the day before keeps the seed it always had."""
    if not 0 <= seed <= MAX_SEED or days_before < 1:
        raise ValueError(f"history of draw {seed}, day {days_before} before: draws are 0-{MAX_SEED}, days 1 or more")
    return seed + HISTORY_SEED + (days_before - 1) * HISTORY_DAY_STRIDE


# Every scenario group that runs only when named, by the page it is recorded on (autoscale-<page>.md).
NAMED_ONLY = {"startup": STARTUP_SCENARIOS, "readiness": READINESS_SCENARIOS, "lulls": LULL_SCENARIOS,
              "seasonal": SEASONAL_SCENARIOS, "weekly": WEEKLY_SCENARIOS, "overload": OVERLOAD_SCENARIOS}


def measure_capacity(curve: ServiceCurve, cfg: BatcherConfig, slo_s: float, seed: int = 0,
                     run_s: float = 120.0, replicas: int = 1) -> float:
    """A load test (what perf_analyzer would give): the highest Poisson rate per replica whose P99 ≤ SLO,
    on one replica, or through the fleet's router on *replicas* of them. Round robin hands each
    replica of a fleet a smoother stream than Poisson (every k-th arrival), which a replica batches
    better: near a batch's execution time that is worth a fifth more per replica (docs/autoscaler.md,
    "Capacity"), while at the default SLO the two agree within a few per cent."""
    if replicas < 1:
        raise UsageError(f"a load test needs at least one replica, got {replicas}")
    lo, hi = 1.0, curve.max_throughput() * 1.2
    rng = np.random.default_rng(seed)
    for _ in range(14):
        mid = (lo + hi) / 2
        rate = mid * replicas
        gaps = rng.exponential(1.0 / rate, int(rate * run_s * 1.2) + 10)
        arr = np.cumsum(gaps)
        arr = arr[arr < run_s]
        sim = FleetSim(curve, cfg, replicas, 0.0, seed=seed)
        sim.offer(arr)
        sim.advance(run_s + 30.0)
        done = sim.completed()
        p99 = done.latency_quantile(0.99) if len(done) == len(arr) else math.inf
        lo, hi = (mid, hi) if p99 <= slo_s else (lo, mid)
    return lo


def measure_budget_shares(curve: ServiceCurve, cfg: BatcherConfig, slo_s: float, seed: int = 0,
                          replicas: int = 1) -> tuple[tuple[float, float], ...]:
    """The latency-vs-load curve queue sizing reads (budget.py), from a load test at each fraction
    of the SLO (`measure_capacity`), as `load_budget_shares` reads it from a perf_analyzer CSV."""
    def capacity_within(budget_s: float) -> float | None:
        found = measure_capacity(curve, cfg, budget_s, seed, replicas=replicas)
        return found if found > 1.0 else None  # the search's floor: no load met the budget

    return shares_from_capacities(capacity_within, slo_s)


def oracle_needed(arrivals: np.ndarray, duration_s: float, capacity_rps: float) -> list[int]:
    """Replicas each slot needs: its arrival rate over the capacity at the SLO."""
    slots = max(1, math.ceil(duration_s / ORACLE_SLOT_S))
    counts = np.bincount(np.minimum((arrivals // ORACLE_SLOT_S).astype(int), slots - 1), minlength=slots)
    return [max(1, math.ceil(c / ORACLE_SLOT_S / capacity_rps)) for c in counts]


def make_policy(name: str, initial: int, capacity_rps: float, cold_start_s: float, schedule: Sequence[int],
                slo_s: float, headroom: float = 1.0, setting: float | None = None, sync_offset_s: float = 0.0,
                oracle_ahead_s: float | None = None, client_retries: int = 0,
                history: Sequence[tuple[float, float]] = (), max_replicas: int = MAX_REPLICAS,
                sizing: str | None = None, tuning: Mapping[str, Any] | None = None,
                budget_shares: Sequence[tuple[float, float]] = ()) -> pol.Policy:
    """Policy *name*; a peer runs at *setting* of its knob (default: its fixed setting). The HPA-driven
    peers sync on the loop's ticks; tidescale's HPA needs *sync_offset_s* (its loop ticks every 2 s),
    and is told its clients retry *client_retries* times. The oracle follows *schedule* (a level per
    `optimum.SLOT_S`) *oracle_ahead_s* ahead (default: the cold start). tidescale's forecast reads
    *history* (`history_samples`) and sizes as *sizing* says (None: as shipped), queue sizing on
    *budget_shares*; *tuning* replaces those of its shipped `recommender.tuning` knobs it names.
    Every policy scales within MIN_REPLICAS and *max_replicas*."""
    lo, hi = MIN_REPLICAS, max_replicas
    if name in pol.KNOBS:
        return pol.peer_policy(name, pol.KNOBS[name].fixed if setting is None else setting, initial, lo, hi)
    if name in STEP_VARIANTS or name in FORECAST_VARIANTS:
        fast_path, delivery = STEP_VARIANTS.get(name, STEP_VARIANTS["tidescale"])
        return pol.TidescalePolicy(initial, lo, hi, capacity_rps, cold_start_s, slo_s, headroom=headroom,
                                   fast_path=fast_path, direct=delivery == "direct",
                                   publish_delay_s=PUBLISH_DELAY_S[delivery], sync_offset_s=sync_offset_s,
                                   client_retries=client_retries, forecast_periods=FORECAST_VARIANTS.get(name),
                                   history=history, sizing=sizing,
                                   overrides={"tuning": dict(tuning)} if tuning else None,
                                   budget_shares=budget_shares)
    return pol.Oracle(list(schedule), optimum.SLOT_S, cold_start_s if oracle_ahead_s is None else oracle_ahead_s,
                      lo, hi)


def optimal_schedule(sc: BenchScenario, arrivals: np.ndarray, end: float, initial: int, needed: Sequence[int],
                     params: SimParams, max_evaluations: int = optimum.MAX_EVALUATIONS) -> optimum.Schedule:
    """`optimum.cheapest_schedule` for this draw of *sc* (*params* as the policies run), meeting the SLO
    goals, searched from each slot's busiest second sized at the capacity at the SLO (*needed*)."""
    per_slot = round(optimum.SLOT_S / ORACLE_SLOT_S)
    start = [max(needed[k:k + per_slot]) for k in range(0, len(needed), per_slot)]
    slo = params.slo_latency_threshold_s

    def evaluate(levels: Sequence[int]) -> optimum.Evaluation:
        policy = pol.Oracle(list(levels), optimum.SLOT_S, sc.oracle_ahead_s, MIN_REPLICAS, sc.max_replicas)
        return optimum.evaluation_of(run_policy(policy, arrivals, end, initial, params), slo, WARMUP_S, end)

    target = optimum.Target(GOALS["requests_within_slo"], GOALS["windows_within_slo"])
    return optimum.cheapest_schedule(evaluate, start, target, MIN_REPLICAS, sc.max_replicas,
                                     pol.lookahead_slots(sc.oracle_ahead_s, optimum.SLOT_S),
                                     first_free=int(WARMUP_S // optimum.SLOT_S), max_evaluations=max_evaluations)


def drawn_arrivals(sc: BenchScenario, seed: int) -> np.ndarray:
    """The scenario's arrivals on draw *seed*. A rate's draws are Poisson realisations; a replayed trace
    has one realisation, so its draws other than 0 (the trace as recorded) replay it shifted in time
    by an offset drawn from the seed, circularly: every burst is kept, but it falls elsewhere against
    the opening fleet, the warm-up's rate, the scrape and the HPA's sync."""
    arrivals = sc.traffic.arrivals(seed)
    if sc.traffic.timestamps is None or seed == 0 or not len(arrivals):
        return arrivals
    return circular_shift(arrivals, sc.traffic.duration_s, trace_offset_s(seed, sc.traffic.duration_s))


def trace_offset_s(seed: int, duration_s: float) -> float:
    """How far a trace's draw *seed* shifts it: uniform over its duration, drawn from the seed alone."""
    return float(np.random.default_rng([seed, TRACE_SHIFT_STREAM]).uniform(0.0, duration_s))


def circular_shift(arrivals: np.ndarray, duration_s: float, offset_s: float) -> np.ndarray:
    """*arrivals* in [0, duration_s) played from *offset_s* on, the part before it appended after."""
    return np.sort((arrivals - offset_s) % duration_s)


def warmup_arrivals(sc: BenchScenario, seed: int) -> np.ndarray:
    """WARMUP_S of steady traffic at the scenario's opening rate, so rate windows are full at t=0."""
    first = drawn_arrivals(sc, seed)
    rate = float(np.sum(first < 60.0)) / 60.0
    rng = np.random.default_rng([seed, 7])
    gaps = rng.exponential(1.0 / max(rate, 1e-3), int(rate * WARMUP_S * 1.5) + 10)
    warm = np.cumsum(gaps)
    return warm[warm < WARMUP_S]


def scenario_arrivals(sc: BenchScenario, seed: int) -> tuple[np.ndarray, float]:
    """The warm-up then the scenario's arrivals (absolute times), and the end of the run."""
    arrivals = np.concatenate([warmup_arrivals(sc, seed), drawn_arrivals(sc, seed) + WARMUP_S])
    return arrivals, sc.traffic.duration_s + WARMUP_S


# What each step of detection buys: tidescale as shipped (None: the shipped fast-path setting; the
# chart's default mode, the HPA through prometheus-adapter), without its fast path (Prometheus
# alone), through KEDA asking the recommender itself, and writing the scale subresource itself.
STEP_VARIANTS: dict[str, tuple[bool | None, str]] = {
    "tidescale": (None, "adapter"), "tidescale+no-fast-path": (False, "adapter"), "tidescale+keda": (None, "keda"),
    "tidescale+direct": (None, "direct")}
# How long the recommender's answer takes to reach whatever applies it: prometheus-adapter (and KEDA's
# prometheus trigger) reads it from Prometheus, one scrape of the recommender (the chart's
# `monitoring.recommender.interval`, 2 s; a unit test holds the two equal) after it changed, charged
# in full; KEDA's metrics-api trigger asks the recommender at the HPA's sync; direct mode writes it.
PUBLISH_DELAY_S = {"adapter": 2.0, "keda": 0.0, "direct": 0.0}
# tidescale as shipped but with its seasonal forecast off, or reading only the day before (the periods
# it reads): rows on scenarios with days before.
NO_FORECAST = "tidescale+no-forecast"
FORECAST_VARIANTS: dict[str, tuple[float, ...]] = {NO_FORECAST: (), "tidescale+forecast-1d": (DAY_S,)}


def headroom_variant(factor: float) -> str:
    """The name of tidescale run with a standing headroom of *factor* (a row of its own, not a peer)."""
    return f"tidescale+headroom{factor:g}x"


def retries_variant(told: int) -> str:
    """The name of tidescale told its clients retry *told* times, when they retry otherwise (a row)."""
    return f"tidescale+client-retries{told}"


def capacity_variant(factor: float) -> str:
    """The name of tidescale run with a capacity profile *factor* × the true one (a row, not a peer)."""
    return f"tidescale+capacity{factor:g}x"


def sweep_row(peer: str, setting: float) -> str:
    """The name of a peer's run at one setting of its knob."""
    return f"{peer}@{setting:g}"


def run_scenario(sc: BenchScenario, policy_names: list[str], params: SimParams, capacity_rps: float,
                 progress: Callable[[str], None] = lambda _: None, headroom: float = 1.0,
                 headroom_sweep: tuple[float, ...] = (), settings: Mapping[str, Sequence[float]] | None = None,
                 capacity_errors: tuple[float, ...] = (), oracle_search: int = optimum.MAX_EVALUATIONS,
                 sizing: str | None = None, jobs: int = 1) -> tuple[dict[str, dict[str, Any]], dict[str, RunResult]]:
    """Every policy on the same arrivals (after a warm-up), each peer at each of its *settings*
    (default: its fixed setting; rows `sweep_row(peer, setting)`), then tidescale at each swept
    headroom and with its capacity profile off by each of *capacity_errors*; scores exclude the
    warm-up. The oracle follows the cheapest schedule a search of at most *oracle_search* simulations
    finds (`optimal_schedule`). tidescale sizes as *sizing* says (None: as shipped). The runs keep
    their replica timelines, not per-request latencies (a sweep would hold hundreds of MB of them).
    *jobs* runs at once (`forked.fork_map`): one scenario's sweep is most of a page's time, and its
    runs differ tenfold in length, so they are shared run by run, not scenario by scenario."""
    arrivals, end, needed, initial, p = draw_setup(sc, params, capacity_rps)
    replica_rps = max(capacity_rps, params.curve.max_throughput())  # what a replica completes flat out
    surge_at = None if sc.surge_at_s is None else sc.surge_at_s
    scores: dict[str, dict[str, Any]] = {}
    runs: dict[str, RunResult] = {}
    # tidescale is told how often the clients retry, as docs/autoscaler.md asks users to set it
    retries = 0 if params.retries is None else params.retries.max_retries
    # (row, policy, headroom, the peer's setting, the capacity and client retries tidescale is configured with)
    runs_to_do: list[tuple[str, str, float, float | None, float, int]] = []
    for name in policy_names:
        if name in pol.KNOBS:
            chosen = (settings or {}).get(name) or (pol.KNOBS[name].fixed,)
            runs_to_do += [(sweep_row(name, v), name, headroom, v, capacity_rps, retries) for v in chosen]
        else:
            runs_to_do.append((name, name, headroom, None, capacity_rps, retries))
    if "tidescale" in policy_names:
        runs_to_do += [(v, v, headroom, None, capacity_rps, retries) for v in STEP_VARIANTS if v != "tidescale"]
        if retries:  # what the setting buys: tidescale left at its default, counting every attempt
            runs_to_do.append((retries_variant(0), "tidescale", headroom, None, capacity_rps, 0))
        if sc.history:  # what the forecast buys; and the week, over the day alone, where a week is held
            held = sum(day.duration_s for day in sc.history)
            runs_to_do += [(v, v, headroom, None, capacity_rps, retries) for v, periods in FORECAST_VARIANTS.items()
                           if periods == () or held > max(periods)]
    runs_to_do += [(headroom_variant(h), "tidescale", h, None, capacity_rps, retries) for h in headroom_sweep]
    runs_to_do += [(capacity_variant(f), "tidescale", headroom, None, f * capacity_rps, retries)
                   for f in capacity_errors]
    schedule = None
    if "oracle" in policy_names:
        progress(f"{sc.name}: searching the oracle's schedule")
        schedule = optimal_schedule(sc, arrivals, end, initial, needed, p, oracle_search)
    levels = list(schedule.levels) if schedule else []
    history = history_samples(sc, params.seed)
    saturated = (saturated_seconds(arrivals, WARMUP_S, end, sc.max_replicas * replica_rps)
                 if sc.max_replicas < MAX_REPLICAS else None)
    def one_run(item: tuple[str, str, float, float | None, float, int]) -> tuple[dict[str, Any], RunResult]:
        _name, kind, factor, setting, configured, told = item
        policy = make_policy(kind, initial, configured, sc.cold_start_s, levels, params.slo_latency_threshold_s,
                             factor, setting, p.sync_offset_s, oracle_ahead_s=sc.oracle_ahead_s, client_retries=told,
                             history=history, max_replicas=sc.max_replicas, sizing=sizing,
                             budget_shares=p.budget_shares)
        run = run_policy(policy, arrivals, end, initial, p)
        scored = score(run, params.slo_latency_threshold_s, WARMUP_S, end, surge_at)
        if saturated is not None:
            scored.update(saturation_scores(run, saturated, WARMUP_S, sc.max_replicas))
        if surge_at is not None:
            fleet = fleet_at(run, WARMUP_S + surge_at)
            before = run.replicas[: bisect.bisect_right(run.times, WARMUP_S + surge_at)]
            own = surge_bound(arrivals, WARMUP_S, end, surge_at, sc.fastest_start_s, replica_rps, fleet,
                              GOALS["requests_within_slo"], sc.max_replicas, node_limit(sc, initial, before))
            scored.update(fleet_at_surge=float(fleet), surge_bound=own.requests_within_slo)
        return scored, dataclasses.replace(run, latency=np.empty(0))

    finished = iter(range(1, len(runs_to_do) + 1))
    results = fork_map(one_run, runs_to_do, jobs,
                       lambda item: progress(f"{sc.name}: {item[0]} done ({next(finished)}/{len(runs_to_do)})"))
    for (name, *_), (scored, run) in zip(runs_to_do, results, strict=True):
        scores[name], runs[name] = scored, run
    if schedule is not None:
        scores["oracle"].update(search_evaluations=float(schedule.evaluations), meets_goals=float(schedule.met),
                                start_replica_hours=schedule.start.replica_hours,
                                start_requests_within_slo=schedule.start.requests_within_slo,
                                start_windows_within_slo=schedule.start.windows_within_slo)
    oracle_hours = scores.get("oracle", {}).get("replica_hours")
    fluid = fluid_bound_hours(arrivals, WARMUP_S, end, replica_rps, MIN_REPLICAS, GOALS["requests_within_slo"],
                              sc.max_replicas)
    for s in scores.values():
        s["cost_vs_oracle"] = s["replica_hours"] / oracle_hours if oracle_hours else None
        s["cost_vs_fluid"] = s["replica_hours"] / fluid
    return scores, runs


def draw_setup(sc: BenchScenario, params: SimParams, capacity_rps: float
               ) -> tuple[np.ndarray, float, list[int], int, SimParams]:
    """One draw of *sc* as every policy meets it: its arrivals (warm-up included) and their end, the
    replicas each second needs at the capacity at the SLO, the opening fleet, and *params* with the
    scenario's cold start, start-up and faults."""
    arrivals, end = scenario_arrivals(sc, params.seed)
    needed = oracle_needed(arrivals, end, capacity_rps)
    initial = min(opening_fleet(needed), sc.max_replicas)
    return arrivals, end, needed, initial, dataclasses.replace(params, cold_start_s=sc.cold_start_s,
                                                               startup=sc.startup, faults=sc.faults)


def tidescale_scores(sc: BenchScenario, params: SimParams, capacity_rps: float,
                     tuning: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """tidescale alone, as shipped but for the `recommender.tuning` knobs *tuning* names, on one draw
    of *sc* (adapter mode, no oracle): its scores, replica-hours rather than a cost against the oracle."""
    arrivals, end, _, initial, p = draw_setup(sc, params, capacity_rps)
    policy = make_policy("tidescale", initial, capacity_rps, sc.cold_start_s, [], params.slo_latency_threshold_s,
                         sync_offset_s=p.sync_offset_s, history=history_samples(sc, params.seed),
                         max_replicas=sc.max_replicas, tuning=tuning, budget_shares=p.budget_shares)
    return score(run_policy(policy, arrivals, end, initial, p), params.slo_latency_threshold_s, WARMUP_S, end,
                 sc.surge_at_s)


def opening_fleet(needed: Sequence[int]) -> int:
    """Every policy's fleet at t=0, a fair start: what the warm-up and the first minute need."""
    return max(needed[: int((WARMUP_S + 60.0) / ORACLE_SLOT_S)])


def fleet_at(run: RunResult, t: float) -> int:
    """The replicas *run* had asked for at *t*, starting ones included: all it could have had Ready then
    (counting them Ready keeps a policy's own surge bound a bound)."""
    k = bisect.bisect_right(run.times, t) - 1
    return run.replicas[max(k, 0)]


def fluid_bound_hours(arrivals: np.ndarray, start_s: float, end_s: float, replica_rps: float, min_replicas: int,
                      goal: float, max_replicas: int = MAX_REPLICAS) -> float:
    """Replica-hours no schedule can undercut while serving *goal* of the scored requests: each served
    request takes 1/*replica_rps* of a replica-second (a replica at full throughput, batching at its
    best, no cold start, no queueing), and the fleet never has fewer than *min_replicas*. A true lower
    bound, unlike the oracle, which is a good schedule, not the best one. Where the load outgrows
    *max_replicas*, *goal* of what they could serve at most."""
    per_second = per_second_arrivals(arrivals, start_s, end_s)
    served = goal * (float(per_second.sum()) - excess_arrivals(per_second, max_replicas * replica_rps))
    return max(min_replicas * (end_s - start_s), served / replica_rps) / 3600.0


def check_scenarios(names: list[str], known: list[str]) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(known)}")


# --- what any policy without foresight can reach ---------------------------------------------------

@dataclass(frozen=True)
class SurgeBound:
    """The most a policy that does not know the future can do on one surge scenario.

    Whatever it measures, a replica it asks for at the surge's first instant serves only one cold
    start later; until then the fleet that stood before the surge serves alone, and each second's
    arrivals beyond what that fleet completes (at full throughput) cannot all be served within the
    SLO. The bound grants the policy zero detection lag and no leftover backlog, so real policies
    (scrape, rate window, HPA sync, per-pod queues) stay below it.
    """

    fleet_at_surge: int  # the replicas the pre-surge minute needs (no standing headroom)
    requests_within_slo: float  # the most a policy with that fleet can serve within the SLO
    replicas_for_goal: int | None  # the standing fleet the goal needs (None: not even the maximum)

    @property
    def headroom_for_goal(self) -> float | None:
        """The standing fleet the goal needs, as a multiple of the pre-surge need."""
        return None if self.replicas_for_goal is None else self.replicas_for_goal / self.fleet_at_surge


@dataclass(frozen=True)
class NodeLimit:
    """GPUs a fleet could run on at a surge without a new node (*count*), and a node's least wait."""

    count: int
    wait_s: float


def node_limit(sc: BenchScenario, initial: int, asked: Sequence[int] = ()) -> NodeLimit | None:
    """The GPUs of *sc* at its surge (None: never short of them): the opening fleet's and the free ones,
    or the most replicas asked for before (their nodes stay; counting those still joining keeps the
    bound a bound)."""
    if sc.startup is None or sc.startup.free_gpus is None:
        return None
    return NodeLimit(max(initial + sc.startup.free_gpus, *asked, 0), sc.startup.node_min_s)


def excess_arrivals(per_second: np.ndarray, fleet_rps: float) -> float:
    """Arrivals beyond what a fleet completing *fleet_rps* can take, second by second."""
    return float(np.maximum(per_second - fleet_rps, 0.0).sum())


def surge_bound(arrivals: np.ndarray, start_s: float, end_s: float, surge_at_s: float, cold_start_s: float,
                replica_rps: float, fleet: int, goal: float, max_replicas: int, gpus: NodeLimit | None = None
                ) -> SurgeBound:
    """`SurgeBound` of the scored arrivals in [start_s, end_s) for a surge at *surge_at_s* (scored time).
    With *gpus*, replicas beyond the GPUs there are serve only after a node's least wait too."""
    per_second = per_second_arrivals(arrivals, start_s, end_s)
    total = float(per_second.sum())
    if not total:
        return SurgeBound(fleet, 1.0, fleet)
    blind_end = math.ceil(surge_at_s + cold_start_s)
    short_end = blind_end + (math.ceil(gpus.wait_s) if gpus is not None else 0)
    blind, short = per_second[int(surge_at_s): blind_end], per_second[blind_end: short_end]
    # Before the surge and once every replica could serve, the most any fleet serves: *max_replicas*
    # (nothing is lost there unless the load outgrows the maximum, as in the overload scenario).
    ceiling = excess_arrivals(np.concatenate([per_second[: int(surge_at_s)], per_second[short_end:]]),
                              max_replicas * replica_rps)

    def reachable(n: int) -> float:
        # until the cold start, the standing fleet alone; then until a node could join, the GPUs there
        capped = (excess_arrivals(short, min(max(n, gpus.count), max_replicas) * replica_rps)
                  if gpus is not None else 0.0)
        return 1.0 - (excess_arrivals(blind, n * replica_rps) + capped + ceiling) / total

    needed = next((n for n in range(fleet, max_replicas + 1) if reachable(n) >= goal), None)
    return SurgeBound(fleet, reachable(fleet), needed)


def scenario_bound(sc: BenchScenario, seed: int, capacity_rps: float, replica_rps: float, goal: float
                   ) -> SurgeBound | None:
    """`SurgeBound` of a surge scenario (None without a surge): the pre-surge fleet is what the
    minute before the surge needs at the capacity at the SLO; replicas complete *replica_rps*."""
    if sc.surge_at_s is None:
        return None
    arrivals, end = scenario_arrivals(sc, seed)
    needed = oracle_needed(arrivals, end, capacity_rps)
    k = int((WARMUP_S + sc.surge_at_s) / ORACLE_SLOT_S)
    fleet = max(needed[max(0, k - int(60.0 / ORACLE_SLOT_S)): k] or [MIN_REPLICAS])
    initial = opening_fleet(needed)
    return surge_bound(arrivals, WARMUP_S, end, sc.surge_at_s, sc.fastest_start_s, replica_rps, fleet, goal,
                       sc.max_replicas, node_limit(sc, initial, [fleet]))
