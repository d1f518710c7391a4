"""Running `bench autoscale` end to end: progress on stderr, JSON, the Markdown table and the PNG."""

from __future__ import annotations

import json
import math
import platform
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tidescale.autoscaler.queue_policy import recommended_queue_policy
from tidescale.autoscaler.recommend import SIZINGS, check_headroom
from tidescale.benches.autoscale import optimum, peer_draws
from tidescale.benches.autoscale import policies as pol
from tidescale.benches.autoscale import scenarios as bench
from tidescale.benches.autoscale.closedloop import (
    SATURATION_WINDOW_S,
    RunResult,
    SimParams,
    recorded_offsets,
    with_seed,
)
from tidescale.benches.autoscale.frontier import Point, best_point, dominated_by, pareto_frontier
from tidescale.benches.autoscale.goals import (
    DEFAULT_SURGE_GAP_PT,
    GOALS,
    JUDGED_ROWS,
    STEADY_COST,
    SURGE_COST,
    SURGE_GAP_PT,
    verdict,
)
from tidescale.benches.autoscale.seeds import seed_lines, seed_spread
from tidescale.benches.report import BENCH_DIR, recorded
from tidescale.contracts.errors import UsageError
from tidescale.contracts.slo import check_slo_threshold
from tidescale.sim import BatcherConfig
from tidescale.sim.batcher import SCHEDULERS
from tidescale.sim.clients import ClientRetries
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.traffic import TRACE_UNITS, check_positive, check_trace_unit

DOC = BENCH_DIR / "autoscale.md"
PNG = BENCH_DIR / "autoscale.png"
# A run with a Triton queue timeout is a different server configuration: recorded beside the default.
SHED_DOC = BENCH_DIR / "autoscale-queue-timeout.md"
SHED_PNG = BENCH_DIR / "autoscale-queue-timeout.png"
FRONTIER_PNG = BENCH_DIR / "autoscale-frontiers.png"
SHED_FRONTIER_PNG = BENCH_DIR / "autoscale-queue-timeout-frontiers.png"
# The same benchmark on servers without a queue policy (requests wait until served): beside the default.
NO_POLICY_DOC = BENCH_DIR / "autoscale-no-queue-policy.md"
NO_POLICY_PNG = BENCH_DIR / "autoscale-no-queue-policy.png"
NO_POLICY_FRONTIER_PNG = BENCH_DIR / "autoscale-no-queue-policy-frontiers.png"

# The flag that sets the SLO every bench judges at, as error messages and page commands name it.
SLO_FLAG = "--slo-latency-threshold"
QUEUE_POLICIES = ("recommended", "none")
FULL_S, QUICK_S = 3600.0, 1200.0
MAX_JOBS = 256
MAX_SIMULATED_PROFILE_REPLICAS = 64  # a load test through the router on this many replicas at most


def named_page(page: str) -> tuple[Path, Path, Path]:
    """The Markdown, replica plot and frontier plot of a scenario group run only when named
    (`scenarios.NAMED_ONLY`): autoscale-<page>.md, .png and -frontiers.png."""
    return (BENCH_DIR / f"autoscale-{page}.md", BENCH_DIR / f"autoscale-{page}.png",
            BENCH_DIR / f"autoscale-{page}-frontiers.png")


def check_profile_replicas(replicas: int) -> None:
    """The replicas a simulated load test runs through round robin on (`--profile-replicas`)."""
    if not 1 <= replicas <= MAX_SIMULATED_PROFILE_REPLICAS:
        raise UsageError(f"--profile-replicas must be in [1, {MAX_SIMULATED_PROFILE_REPLICAS}], got {replicas}")


@dataclass(frozen=True)
class BenchOptions:
    """What one `bench autoscale` run measures (the CLI's flags)."""

    scenarios: list[str] | None = None  # None: all (or the trace alone with --trace)
    policies: tuple[str, ...] = pol.ALL_POLICIES
    quick: bool = False
    seed: int = 0
    slo_s: float = bench.DEFAULT_SLO_S
    trace: Path | None = None
    target_rps: float | None = None
    base_rps: float = bench.DEFAULT_BASE_RPS
    # Triton's queue policy (REJECT) on every replica, for every policy: "recommended" is what
    # `autoscale render --max-batch-exec-ms` prints for the bench's curve (SLO minus the largest
    # batch); "none" lets requests wait until served; an explicit queue_timeout_s overrides both.
    queue_policy: str = "recommended"
    queue_timeout_s: float | None = None
    headroom: float = 1.0  # tidescale's standing headroom
    headroom_sweep: tuple[float, ...] = ()  # extra tidescale rows at these headrooms (surge scenarios)
    sweep: bool = True  # every peer over its knob's sweep (False: its fixed setting alone)
    peer_settings: tuple[str, ...] = ()  # PEER=VALUE: run PEER at these settings instead of its sweep
    extra_seeds: tuple[int, ...] = ()  # tidescale's modes, the oracle and the peers' chosen points on these draws
    capacity_errors: tuple[float, ...] = ()  # extra tidescale rows with its capacity profile off by these factors
    client_retries: int = 0  # every policy's clients retry a refused request this often (Envoy's back-off)
    oracle_search: int = optimum.MAX_EVALUATIONS  # simulations the oracle's schedule search may run per draw
    jobs: int = 1  # runs of a scenario (then extra draws) at once, in forked workers: only the wall time changes
    sizing: str | None = None  # tidescale's `tuning.sizing` instead of the shipped one (None: as shipped)
    # the simulator's model of Triton's batcher on every replica: "stepped" (fast), or "triton-2.51"
    # (Triton's batcher thread event by event: the model within 10 % of a real replica, ~3.5x the cost)
    scheduler: str = "stepped"
    # replicas the capacity's load test runs through the Service's router (1: one replica, what
    # perf_analyzer against one pod gives); the capacity every policy is configured and swept with
    profile_replicas: int = 1
    trace_unit: str | None = None  # the trace's numeric timestamps' unit (`--trace-unit`; None: header or size)

    def __post_init__(self) -> None:
        check_slo_threshold(self.slo_s, SLO_FLAG)
        check_trace_flags(self.trace, self.target_rps, self.trace_unit)
        for h in (self.headroom, *self.headroom_sweep):
            check_headroom(h, "--headroom")
        for f in self.capacity_errors:
            if not (math.isfinite(f) and 0.1 <= f <= 10.0):
                raise UsageError(f"--capacity-error must be a factor in [0.1, 10], got {f}")
        if self.queue_timeout_s is not None and not (math.isfinite(self.queue_timeout_s) and self.queue_timeout_s > 0):
            raise UsageError(f"--queue-timeout must be > 0 seconds, got {self.queue_timeout_s}")
        if self.queue_policy not in QUEUE_POLICIES:
            raise UsageError(f"--queue-policy must be one of {', '.join(QUEUE_POLICIES)}, got {self.queue_policy!r}")
        ClientRetries(max_retries=self.client_retries)  # a UsageError naming the bad count
        if self.sizing is not None and self.sizing not in SIZINGS:
            raise UsageError(f"--sizing must be one of {', '.join(SIZINGS)}, got {self.sizing!r}")
        if self.scheduler not in SCHEDULERS:
            raise UsageError(f"--scheduler must be one of {', '.join(SCHEDULERS)}, got {self.scheduler!r}")
        check_profile_replicas(self.profile_replicas)
        if not 1 <= self.jobs <= MAX_JOBS:
            raise UsageError(f"--jobs must be in [1, {MAX_JOBS}], got {self.jobs}")
        if not 1 <= self.oracle_search <= optimum.MAX_EVALUATIONS_LIMIT:
            raise UsageError(f"--oracle-search must be in [1, {optimum.MAX_EVALUATIONS_LIMIT}] simulations, "
                             f"got {self.oracle_search}")
        pol.check_policies(list(self.policies))
        parse_peer_settings(self.peer_settings, self.policies)
        if self.extra_seeds:
            if "tidescale" not in self.policies or "oracle" not in self.policies:
                raise UsageError("--extra-seed reruns tidescale against the oracle: keep both in --policy")
            if len(set(self.extra_seeds)) != len(self.extra_seeds) or self.seed in self.extra_seeds:
                raise UsageError(f"--extra-seed values must differ from each other and from --seed {self.seed}")
        for flag, seed in (("--seed", self.seed), *(("--extra-seed", s) for s in self.extra_seeds)):
            if not 0 <= seed <= bench.MAX_SEED:  # a history's days are seeded in blocks of draws
                raise UsageError(f"{flag} must be in [0, {bench.MAX_SEED}], got {seed}")

    @property
    def paths(self) -> tuple[Path, Path, Path]:
        """Where the Markdown, the replica plot and the frontier plot are recorded."""
        kind = "explicit" if self.queue_timeout_s is not None else self.queue_policy
        return page_paths(kind, self.scenarios or (), self.slo_s, self.client_retries, self.sizing, self.scheduler,
                          self.profile_replicas, self.trace.name if self.trace else None)

    def traced(self, available: Mapping[str, bench.BenchScenario] | None = None) -> dict[str, Any]:
        """What a page's setup records of the trace replayed (`--trace`: its file's name), the mean
        rate it was rescaled to, and how its file was read (from *available*, the built scenarios);
        nothing without one."""
        if not self.trace:
            return {}
        reading = available["trace"].traffic.reading if available and "trace" in available else ""
        return {"trace": self.trace.name, "target_rps": self.target_rps,
                **({"trace_unit": self.trace_unit} if self.trace_unit else {}),
                **({"trace_reading": reading} if reading else {})}

    def queue_policy_of(self, curve: ServiceCurve) -> dict[str, Any]:
        """The queue policy every replica runs: what tidescale recommends, none, or the given timeout."""
        if self.queue_timeout_s is not None:
            return {"kind": "explicit", "timeout_s": self.queue_timeout_s}
        if self.queue_policy == "none":
            return {"kind": "none", "timeout_s": None}
        # The largest batch's P99 execution time, what perf_analyzer's P99 at that batch reads; its mean
        # left too little margin: requests that queued nearly the timeout ended past the SLO on slow runs.
        largest = curve.exec_p99_seconds(curve.max_batch)
        policy = recommended_queue_policy("bench", self.slo_s, largest)
        return {"kind": "recommended", "timeout_s": policy.timeout_us / 1e6, "max_batch_exec_s": round(largest, 6),
                "max_batch_exec_mean_s": round(curve.exec_seconds(curve.max_batch), 6), "pbtxt": policy.pbtxt()}

    def peer_sweeps(self, capacity_rps: float) -> dict[str, tuple[float, ...]]:
        """The settings each peer runs at: those given, else its sweep (or its fixed setting)."""
        given = parse_peer_settings(self.peer_settings, self.policies)
        out: dict[str, tuple[float, ...]] = {}
        for peer in self.policies:
            knob = pol.KNOBS.get(peer)
            if knob is not None:
                default = knob.settings(capacity_rps) if self.sweep else (knob.fixed,)
                out[peer] = given.get(peer) or default
        return out


def parse_peer_settings(raw: Sequence[str], policies: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """`--peer-setting PEER=VALUE` values by peer, ascending, each checked against the peer's knob."""
    out: dict[str, set[float]] = {}
    for item in raw:
        peer, sep, text = item.partition("=")
        peer = peer.strip()
        if not sep:
            raise UsageError(f"--peer-setting {item!r}: expected PEER=VALUE, e.g. hpa-cpu=50")
        knob = pol.KNOBS.get(peer)
        if knob is None:
            raise UsageError(f"--peer-setting {item!r}: unknown peer {peer!r}; choose from {', '.join(pol.PEERS)}")
        if peer not in policies:
            raise UsageError(f"--peer-setting {item!r}: {peer} is not among the policies run (--policy)")
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"--peer-setting {item!r}: {text.strip()!r} is not a number") from None
        if not knob.valid(value):
            raise UsageError(f"--peer-setting {item!r}: {peer}'s {knob.knob} must be {knob.describe_range()}")
        out.setdefault(peer, set()).add(value)
    return {peer: tuple(sorted(values)) for peer, values in out.items()}


@dataclass
class Judged:
    """One scenario's rows (each peer at its best setting), its peers' sweeps and frontiers, and
    which run each row is."""

    rows: dict[str, dict[str, Any]]
    frontiers: dict[str, list[dict[str, Any]]]
    sweeps: dict[str, list[dict[str, Any]]]
    run_of: dict[str, str]


def _point(setting: float, s: Mapping[str, Any]) -> Point:
    """A run's measures as recorded (rounded), so the page and the dominance agree."""
    return Point(setting, recorded(s["requests_within_slo"]), recorded(s["windows_within_slo"]),
                 recorded(s["replica_hours"]))


def _entry(p: Point, s: Mapping[str, Any]) -> dict[str, Any]:
    """A swept setting's measures; where the load outgrew maxReplicas, its scale-downs then too."""
    downs = {"scale_downs_saturated": s["scale_downs_saturated"]} if s.get("saturated_s") else {}
    return {"setting": p.setting, "requests_within_slo": p.requests_within_slo,
            "windows_within_slo": p.windows_within_slo, "cost_vs_oracle": recorded(s["cost_vs_oracle"]), **downs}


def judge(scores: Mapping[str, dict[str, Any]], sweeps: Mapping[str, Sequence[float]]) -> Judged:
    """Each peer's frontier over its sweep and its best point (`best_point`, against GOALS); every
    row's `dominated_by`: the frontier points of the other peers (and plain tidescale) that cost no
    more, serve no less on both SLO measures, and are strictly better on one."""
    owner = {bench.sweep_row(peer, v): peer for peer, values in sweeps.items() for v in values}
    judged = Judged({}, {}, {}, {})
    candidates: dict[str, tuple[str, Point]] = {}
    for name in scores:
        peer = owner.get(name)
        if peer is None:
            judged.rows[name], judged.run_of[name] = dict(scores[name]), name
            continue
        if peer in judged.rows:
            continue
        by_setting = {v: scores[bench.sweep_row(peer, v)] for v in sweeps[peer]}
        points = [_point(v, s) for v, s in by_setting.items()]
        front = pareto_frontier(points)
        best = best_point(front, GOALS["requests_within_slo"], GOALS["windows_within_slo"])
        judged.rows[peer] = {**by_setting[best.setting], "setting": best.setting}
        judged.run_of[peer] = bench.sweep_row(peer, best.setting)
        judged.frontiers[peer] = [_entry(p, by_setting[p.setting]) for p in front]
        judged.sweeps[peer] = [{**_entry(p, by_setting[p.setting]),
                                "on_frontier": any(p.measures == q.measures for q in front)} for p in points]
        candidates.update({bench.sweep_row(peer, p.setting): (peer, p) for p in front})
    if "tidescale" in scores:
        candidates["tidescale"] = ("tidescale", _point(0.0, scores["tidescale"]))
    for name, row in judged.rows.items():
        others = {n: p for n, (who, p) in candidates.items() if who != name}
        row["dominated_by"] = dominated_by(_point(0.0, row), others)
    return judged


def default_scenarios(available: Mapping[str, bench.BenchScenario], trace: Path | None) -> list[str]:
    """What a run without `--scenario` runs: the trace alone, or every scenario but the start-up and
    readiness ones (other clusters'), the lulls: each named group has its page (`scenarios.NAMED_ONLY`)."""
    named_only = {n for group in bench.NAMED_ONLY.values() for n in group}
    return ["trace"] if trace else [n for n in available if n not in named_only]


def replica_setup(opts: BenchOptions) -> tuple[ServiceCurve, dict[str, Any], BatcherConfig, float]:
    """The replica every policy scales: its service curve, its queue policy, its batcher, and its
    capacity at the SLO (a simulated load test, on `profile_replicas` of them behind round robin)."""
    curve = ServiceCurve.v100()
    queue_policy = opts.queue_policy_of(curve)
    cfg = BatcherConfig(max_batch_size=32, preferred_batch_sizes=(8, 16), max_queue_delay_s=0.002, instance_count=1,
                        queue_timeout_s=queue_policy["timeout_s"], scheduler=opts.scheduler)
    return curve, queue_policy, cfg, bench.measure_capacity(curve, cfg, opts.slo_s, opts.seed,
                                                            replicas=opts.profile_replicas)


def run(opts: BenchOptions, progress: Callable[[str], None] = lambda _m: None
        ) -> tuple[dict[str, Any], dict[str, dict[str, RunResult]]]:
    """All scenarios × policies; returns the JSON document and the runs (for the plot)."""
    duration = QUICK_S if opts.quick else FULL_S
    available = bench.build_scenarios(duration, opts.base_rps, opts.trace, opts.target_rps, opts.trace_unit)
    names = opts.scenarios or default_scenarios(available, opts.trace)
    bench.check_scenarios(names, list(available))
    if reading := (traced := opts.traced(available)).get("trace_reading"):
        progress(f"trace: {reading}")
    curve, queue_policy, cfg, capacity = replica_setup(opts)
    replica_rps = max(capacity, curve.max_throughput())
    sweeps = opts.peer_sweeps(capacity)
    retries = ClientRetries(max_retries=opts.client_retries) if opts.client_retries else None
    shares = bench.measure_budget_shares(curve, cfg, opts.slo_s, opts.seed, opts.profile_replicas) \
        if opts.sizing == "queue" else ()
    params = with_seed(SimParams(curve, cfg, bench.DEFAULT_COLD_START_S, opts.slo_s, retries=retries,
                                 budget_shares=shares), opts.seed)
    doc: dict[str, Any] = {
        "benchmark": "autoscale",
        "setup": {"duration_s": duration, "base_rps": opts.base_rps, "slo_latency_threshold_s": opts.slo_s,
                  "seed": opts.seed,
                  "capacity_rps_per_replica": round(capacity, 1), "quick": opts.quick,
                  **({"budget_shares": [[f, round(share, 4)] for f, share in shares]} if shares else {}),
                  # the load test ran through the router on this many replicas (and on one, it read this)
                  **({"profile_replicas": opts.profile_replicas, "capacity_rps_one_replica": round(
                      bench.measure_capacity(curve, cfg, opts.slo_s, opts.seed), 1)}
                     if opts.profile_replicas != 1 else {}),
                  "curve": "V100 (ServiceCurve.v100)", "batcher": "max 32, preferred 8/16, 2 ms delay",
                  **({"scheduler": opts.scheduler} if opts.scheduler != "stepped" else {}),
                  "min_replicas": bench.MIN_REPLICAS, "max_replicas": bench.MAX_REPLICAS,
                  "scrape_interval_s": 15, "hpa_sync_s": 15, "queue_timeout_s": queue_policy["timeout_s"],
                  # this draw's clocks: Prometheus scrapes and the HPA syncs at these offsets in their cycles
                  "clock_offsets_s": recorded_offsets(params),
                  # the recommender's answer reaches the HPA this much later, per delivery mode
                  "publish_delay_s": dict(bench.PUBLISH_DELAY_S),
                  "queue_policy": queue_policy["kind"],
                  "tidescale_headroom": opts.headroom, "headroom_sweep": list(opts.headroom_sweep),
                  "capacity_errors": list(opts.capacity_errors), "scenarios_named": list(opts.scenarios or []),
                  **traced,
                  # which policies ran and at which settings, where not all of them over their sweeps
                  **({"policies_named": list(opts.policies)} if opts.policies != pol.ALL_POLICIES else {}),
                  **({"peer_settings": list(opts.peer_settings)} if opts.peer_settings else {}),
                  **({} if opts.sweep else {"sweep": False}),
                  # clients retry a refused request this often, with Envoy's back-off (sim/clients.py)
                  "client_retries": opts.client_retries,
                  # tidescale's sizing when not the shipped one (`--sizing`)
                  **({"sizing": opts.sizing} if opts.sizing else {}),
                  # simulations the oracle's schedule search could run per scenario and draw
                  "oracle_search": opts.oracle_search,
                  # what tidescale ran: the service's defaults (`autoscale recommend --print-config`)
                  "tidescale_tuning": tuning_of(opts.sizing), "sweep": opts.sweep},
        # the recommender configuration that ran (`autoscale recommend --print-config` at this headroom)
        "config": pol.shipped_settings(opts.sizing, headroom=opts.headroom, slo_latency_threshold_s=opts.slo_s
                                   ).effective_config(),
        # the queue policy every replica ran (the one `autoscale render --max-batch-exec-ms` prints)
        "queue_policy": queue_policy,
        "knobs": {peer: {"knob": pol.KNOBS[peer].knob, "unit": pol.KNOBS[peer].unit, "fixed": pol.KNOBS[peer].fixed,
                         "documented": pol.KNOBS[peer].documented, "settings": list(values)}
                  for peer, values in sweeps.items()},
        "scenarios": {},
        "frontiers": {},
        "sweeps": {},
        "scenario_info": {},
        "bounds": {},
        "yardsticks": {},
    }
    all_runs: dict[str, dict[str, RunResult]] = {}
    started = time.monotonic()

    def one_scenario(name: str) -> tuple[dict[str, dict[str, Any]], Judged, dict[str, RunResult], Any]:
        sc = available[name]
        sweep = opts.headroom_sweep if sc.surge_at_s is not None and "tidescale" in opts.policies else ()
        errors = opts.capacity_errors if "tidescale" in opts.policies else ()
        scores, runs = bench.run_scenario(sc, list(opts.policies), params, capacity, progress, opts.headroom, sweep,
                                          sweeps, errors, opts.oracle_search, opts.sizing, opts.jobs)
        judged = judge(scores, sweeps)
        bound = bench.scenario_bound(sc, opts.seed, capacity, replica_rps, GOALS["requests_within_slo"])
        return scores, judged, {row: runs[run] for row, run in judged.run_of.items()}, bound

    results = [one_scenario(name) for name in names]  # each shares its runs among the jobs
    for name, (scores, judged, runs, bound) in zip(names, results, strict=True):
        sc = available[name]
        doc["yardsticks"][name] = yardsticks(scores)
        doc["scenarios"][name] = {p: {k: recorded(v) for k, v in s.items()} for p, s in judged.rows.items()}
        doc["frontiers"][name], doc["sweeps"][name] = judged.frontiers, judged.sweeps
        doc["scenario_info"][name] = {"cold_start_s": sc.cold_start_s, "surge_at_s": sc.surge_at_s,
                                      "description": sc.traffic.description, "title": sc.describe(),
                                      "duration_s": sc.traffic.duration_s, "days_before": len(sc.history)}
        if bound is not None:
            doc["bounds"][name] = {"fleet_at_surge": bound.fleet_at_surge,
                                   "requests_within_slo_max": recorded(bound.requests_within_slo),
                                   "replicas_for_goal": bound.replicas_for_goal,
                                   "headroom_for_goal": recorded(bound.headroom_for_goal)}
        all_runs[name] = runs
    if opts.extra_seeds:
        rerun = {name: peer_draws.settings_to_rerun(doc["scenarios"][name], doc["frontiers"][name]) for name in names}
        doc["seeds"] = seed_spread(available, names, opts.extra_seeds, params, capacity, replica_rps, opts.headroom,
                                   progress, opts.oracle_search, opts.jobs, opts.sizing, rerun)
        doc["seeds"]["across_draws"] = peer_draws.across_draws(doc)
    doc["setup"]["extra_seeds"] = list(opts.extra_seeds)
    doc["setup"]["wall_s"] = round(time.monotonic() - started, 1)
    doc["setup"]["jobs"] = opts.jobs
    doc["setup"]["host"] = platform.machine()
    return doc, all_runs


def _own_durations(doc: Mapping[str, Any]) -> str:
    """The scenarios whose length is their own (a real day), not the run's."""
    run = doc["setup"]["duration_s"]
    own = {n: i["duration_s"] for n, i in doc["scenario_info"].items() if i.get("duration_s", run) != run}
    return "".join(f", {n} {d:g} s" for n, d in own.items())


def _history_lines(doc: Mapping[str, Any]) -> list[str]:
    """What the seasonal forecast reads, where a scenario has days before it."""
    days = {n: i["days_before"] for n, i in doc["scenario_info"].items() if i.get("days_before")}
    if not days:
        return []
    held = ", ".join(f"{n} {d}" for n, d in days.items())
    return [f"- history (days before the run: {held}): tidescale's seasonal forecast reads them as Prometheus "
            "would hold them, a demand sample a minute (each day a draw of its own seed, as if the fleet had "
            "served it); `tidescale+no-forecast` is the same service with `forecast.enabled: false`, "
            "`tidescale+forecast-1d` reads the day before alone"]


def _flags(setup: dict[str, Any]) -> str:
    kind = setup.get("queue_policy", "explicit" if setup.get("queue_timeout_s") is not None else "none")
    explicit = f" --queue-timeout {setup.get('queue_timeout_s') or 0:g}"
    out = {"recommended": "", "none": " --queue-policy none"}.get(kind, explicit)
    out += "" if setup.get("tidescale_headroom", 1.0) == 1.0 else f" --headroom {setup['tidescale_headroom']:g}"
    out += "".join(f" --headroom-sweep {h:g}" for h in setup.get("headroom_sweep", []))
    out += "".join(f" --capacity-error {f:g}" for f in setup.get("capacity_errors", []))
    slo = setup.get("slo_latency_threshold_s", bench.DEFAULT_SLO_S)
    out += "" if slo == bench.DEFAULT_SLO_S else f" {SLO_FLAG} {slo:g}"
    out += f" --client-retries {setup['client_retries']}" if setup.get("client_retries") else ""
    out += f" --sizing {setup['sizing']}" if setup.get("sizing") else ""
    out += f" --scheduler {setup['scheduler']}" if setup.get("scheduler", "stepped") != "stepped" else ""
    out += f" --profile-replicas {setup['profile_replicas']}" if setup.get("profile_replicas", 1) != 1 else ""
    search = setup.get("oracle_search", optimum.MAX_EVALUATIONS)
    out += "" if search == optimum.MAX_EVALUATIONS else f" --oracle-search {search}"
    out += f" --jobs {setup['jobs']}" if setup.get("jobs", 1) != 1 else ""
    chosen = "".join(f" --policy {p}" for p in setup.get("policies_named", []))
    chosen += "".join(f" --peer-setting {v}" for v in setup.get("peer_settings", []))
    chosen += "" if setup.get("sweep", True) else " --no-sweep"
    out = "".join(f" --scenario {n}" for n in setup.get("scenarios_named", [])) + chosen + out
    out = trace_flags(setup) + out
    return out + "".join(f" --extra-seed {s}" for s in setup.get("extra_seeds", []))


def beaten_oracles(doc: Mapping[str, Any]) -> list[str]:
    """One line per scenario where a run met the oracle's SLO shares for fewer replica-hours."""
    return [f"{name}: {', '.join(m['oracle_beaten_by'])} met the oracle's shares of requests and windows within "
            "the SLO for fewer replica-hours; its schedule search missed a cheaper schedule (raise --oracle-search)"
            for name, m in doc.get("yardsticks", {}).items() if m["oracle_beaten_by"]]


def yardsticks(scores: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The scenario's true lower bound (fluid), how the oracle's schedule search went, and the runs, any
    setting of any policy, that meet the oracle's shares of requests and windows within the SLO for
    fewer replica-hours than it: each one shows a cheaper schedule the search missed."""
    oracle = scores.get("oracle")
    if oracle is None:
        return {"fluid_replica_hours": None, "oracle_vs_fluid": None, "oracle_beaten_by": [], "oracle_search": None}
    fluid = oracle["replica_hours"] / oracle["cost_vs_fluid"]
    mark = _point(0.0, oracle)
    beaten = sorted(name for name, s in scores.items() if name != "oracle"
                    and (p := _point(0.0, s)).requests_within_slo >= mark.requests_within_slo
                    and p.windows_within_slo >= mark.windows_within_slo and p.cost < mark.cost)
    search = None if "search_evaluations" not in oracle else {
        "simulations": int(oracle["search_evaluations"]), "meets_goals": bool(oracle["meets_goals"]),
        # the schedule it started from: each second's arrivals at the capacity at the SLO, one start ahead
        "start_replica_hours": recorded(oracle["start_replica_hours"]),
        "start_vs_oracle": recorded(oracle["start_replica_hours"] / oracle["replica_hours"]),
        "start_requests_within_slo": recorded(oracle["start_requests_within_slo"])}
    return {"fluid_replica_hours": recorded(fluid), "oracle_vs_fluid": recorded(oracle["cost_vs_fluid"]),
            "oracle_beaten_by": beaten, "oracle_search": search}


def markdown(doc: dict[str, Any]) -> str:
    s = doc["setup"]
    replica_png, frontier_png = (p.name for p in (_pngs(s)))
    lines = [
        "# Benchmark: autoscale",
        "",
        "Generated by `tidescale bench autoscale" + (" --quick" if s["quick"] else "") + _flags(s) + "` "
        "(closed loop on the fast simulator; every policy sees the same arrivals and seed).",
        "",
        f"- traffic: base {s['base_rps']:g} req/s, {s['duration_s']:g} s per scenario{_own_durations(doc)} (plus a "
        f"120 s unscored warm-up); SLO: P99 ≤ {s['slo_latency_threshold_s']:g} s",
        *([f"- trace: {s['trace_reading']}"] if s.get("trace_reading") else []),
        *_history_lines(doc),
        f"- replica: {s['curve']}, batcher {s['batcher']} ({s.get('scheduler', 'stepped')} scheduler model, "
        "docs/sim.md); capacity at the SLO (simulated load test) "
        f"{s['capacity_rps_per_replica']:g} req/s" + (
            f" per replica through round robin on {s['profile_replicas']} replicas (on one replica alone: "
            f"{s['capacity_rps_one_replica']:g} req/s)" if s.get("profile_replicas", 1) != 1 else ""),
        f"- lags: scrape {s['scrape_interval_s']} s, HPA sync {s['hpa_sync_s']} s, rate windows 1 m (30 s for "
        "the Triton queue-time rule); replicas {min}–{max}".format(min=s["min_replicas"], max=s["max_replicas"])
        + _publish_delays(s.get("publish_delay_s")) + _clock_offsets(s.get("clock_offsets_s")),
        "- cost = replica-hours (starting replicas included) / the oracle's; recovery = seconds from the surge "
        "start until P99 holds within the SLO for a minute",
        "- queue policy: " + ("none (requests wait until served)" if s.get("queue_timeout_s") is None else
                              f"REJECT after {s['queue_timeout_s']:g} s in the queue (rejected = not within SLO)")
        + (", what tidescale recommends (`autoscale render --max-batch-exec-ms`: the SLO minus the largest "
           "batch's P99 execution time)" if s.get("queue_policy") == "recommended" else ""),
        *([f"- clients retry a refused request (Triton's 503, or no Ready endpoint) up to {s['client_retries']} "
           "times with Envoy's back-off (fully jittered, 25 ms base, 250 ms cap), as Istio's default route does; "
           "a request's latency runs from its first attempt, and every attempt reaches Triton's counters"]
          if s.get("client_retries") else []),
        f"- tidescale headroom: {s.get('tidescale_headroom', 1.0):g}× the 10-minute floor of the load "
        "(`tidescale+headroomNx` rows: the same policy at N×, not a peer)"
        + ("; `tidescale+capacityFx` rows: tidescale configured with F × the measured capacity per replica, "
           "its profile off by that much" if s.get("capacity_errors") else ""),
        "- tidescale tuning, the service's shipped defaults (`tidescale autoscale recommend --print-config`)"
        + (f", with `sizing: {s['sizing']}`" if s.get("sizing") else "") + ": "
        f"`{json.dumps(s['tidescale_tuning'], sort_keys=True)}`",
        "- tidescale is the recommender service itself (`RecommenderService`, run by its own `tick`), its "
        "Prometheus queries and pod reads answered by the simulator (`tidescale/sim/recommender_io.py`)",
        *SWEEP_RULES,
        "",
    ]
    for name, res in doc["scenarios"].items():
        info = doc["scenario_info"][name]
        title = info.get("title") or f"{info['description']}, cold start {info['cold_start_s']:g} s"
        lines += [f"## {name}: {title}", "",
                  "| policy | setting | requests within SLO | 1-min windows within SLO | replica-hours "
                  "| cost vs oracle | scale events | max replicas | recovery s | dominated by (frontier points) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for p, r in res.items():
            rec = "–" if r["recovery_s"] is None else f"{r['recovery_s']:g}"
            setting = "–" if "setting" not in r else _setting(doc, p, r["setting"])
            lines.append(f"| {p} | {setting} | {100 * r['requests_within_slo']:.2f} % "
                         f"| {100 * r['windows_within_slo']:.1f} % | {r['replica_hours']:.2f} "
                         f"| {_cost(r['cost_vs_oracle'])} | {r['scale_events']:g} | {r['max_replicas']:g} "
                         f"| {rec} | {', '.join(r['dominated_by']) or '–'} |")
        lines += ["", *frontier_lines(doc, name)]
    lines += dominance_lines(doc)
    lines += [f"![each peer's frontier per scenario, tidescale a star]({frontier_png})", ""]
    lines += fixed_vs_best_lines(doc)
    lines += goal_lines(doc)
    lines += seed_lines(doc)
    lines += peer_draws.lines(doc, peer_draws.draws_png(Path(frontier_png)).name)
    lines += UNREACHABLE
    lines += bound_lines(doc)
    lines += own_bound_lines(doc)
    lines += saturation_lines(doc)
    lines += yardstick_lines(doc)
    lines += step_lines(doc)
    lines += [f"![replicas vs load per policy (each peer at its best setting)]({replica_png})", "",
              f"Wall time {s['wall_s']:g} s on {s['host']}.", ""]
    return "\n".join(lines)


SWEEP_RULES = [
    "- peers: each runs over a sweep of its main knob (the documented setting and the seed deployment's "
    "fixed one included; `--no-sweep`: the fixed one alone). A peer's row is its **best** point: the "
    "cheapest frontier point with ≥ 99.9 % of requests and ≥ 99 % of windows within the SLO, or, where "
    "no setting meets that, the point with the most requests within the SLO (then windows, then cost)",
    "- frontier: the swept settings no other setting of the same peer beats, i.e. costs no more, serves "
    "no less (requests and windows within the SLO) and is strictly better on one (settings that ran "
    "identically count once, as the first)",
    "- dominated by: the frontier points of other peers (`peer@setting`, and plain tidescale) that are "
    "no more expensive and no worse on requests and on windows within the SLO, strictly better on one",
]


def tuning_of(sizing: str | None) -> dict[str, Any]:
    """The tuning tidescale runs with (`autoscale recommend --print-config`'s, *sizing* replaced)."""
    return pol.shipped_settings(sizing).tuning.as_json()


def page_paths(queue_policy: str, scenarios: Sequence[str], slo_s: float = bench.DEFAULT_SLO_S,
               client_retries: int = 0, sizing: str | None = None, scheduler: str = "stepped",
               profile_replicas: int = 1, trace: str | None = None) -> tuple[Path, Path, Path]:
    """The Markdown, replica plot and frontier plot of a run: a queue timeout ("explicit") or none is
    another server setup; a replayed trace (`--trace`, named by its file) or a named-only group alone
    (start-up, readiness, lulls) has its page (and on other servers, that page's name with theirs);
    another SLO, or clients that retry, are other users; another sizing (`--sizing`) is another
    tidescale; another scheduler model (`--scheduler`) is another simulator; a capacity load-tested on
    several replicas (`--profile-replicas`) is another profile. Each such run is recorded beside the
    default, never over it."""
    page = f"trace-{trace_slug(trace)}" if trace is not None else next(
        (p for p, group in bench.NAMED_ONLY.items() if scenarios and set(scenarios) <= set(group)), None)
    servers = ""
    if page is not None:  # a named group's page, beside it for other servers
        doc, png, frontier = named_page(page)
        servers = {"recommended": "", "explicit": "-queue-timeout"}.get(queue_policy, "-no-queue-policy")
    elif queue_policy == "explicit":
        doc, png, frontier = SHED_DOC, SHED_PNG, SHED_FRONTIER_PNG
    elif queue_policy != "recommended":
        doc, png, frontier = NO_POLICY_DOC, NO_POLICY_PNG, NO_POLICY_FRONTIER_PNG
    else:
        doc, png, frontier = DOC, PNG, FRONTIER_PNG
    suffix = servers + (f"-slo-{slo_s:g}s" if slo_s != bench.DEFAULT_SLO_S else "") + (
        f"-retries-{client_retries}" if client_retries else "") + (f"-{sizing}-sizing" if sizing else "") + (
        f"-{scheduler}-scheduler" if scheduler != "stepped" else "") + (
        f"-profile-{profile_replicas}-replicas" if profile_replicas != 1 else "")
    if not suffix:
        return doc, png, frontier
    stem = doc.stem + suffix
    return doc.with_name(f"{stem}.md"), png.with_name(f"{stem}.png"), frontier.with_name(f"{stem}-frontiers.png")


def _pngs(setup: dict[str, Any]) -> tuple[Path, Path]:
    kind = setup.get("queue_policy", "explicit" if setup.get("queue_timeout_s") is not None else "none")
    _doc, png, frontier = page_paths(kind, setup.get("scenarios_named", []),
                                     setup.get("slo_latency_threshold_s", bench.DEFAULT_SLO_S),
                                     setup.get("client_retries", 0), setup.get("sizing"),
                                     setup.get("scheduler", "stepped"), setup.get("profile_replicas", 1),
                                     setup.get("trace"))
    return png, frontier


def trace_slug(name: str) -> str:
    """A trace file's name as a page name may hold it: lower-case letters, digits and single dashes,
    at most 40 characters (a path, spaces or markup in the name reach neither the path nor the page)."""
    slug = re.sub(r"[^a-z0-9]+", "-", Path(name).stem.lower()).strip("-")[:40].strip("-")
    return slug or "unnamed"


def trace_flags(setup: Mapping[str, Any]) -> str:
    """The `--trace`/`--target-rps`/`--trace-unit` a page's command was run with, from its JSON's setup."""
    if not setup.get("trace"):
        return ""
    rate, unit = setup.get("target_rps"), setup.get("trace_unit")
    name = shlex.quote(re.sub(r"[`\x00-\x1f]", "?", str(setup["trace"])))  # one shell word, no code span's end
    return f" --trace {name}" + ("" if rate is None else f" --target-rps {rate:g}") + (
        f" --trace-unit {unit}" if unit in TRACE_UNITS else "")


def check_trace_flags(trace: Path | None, target_rps: float | None, unit: str | None = None) -> None:
    """`--trace`, `--target-rps` and `--trace-unit` as every trace-replaying bench takes them: the rate
    and the unit are a trace's, so they need one, and are a finite rate and a unit; the file's own
    errors are the replay's (`traffic.replay`)."""
    for flag, given in (("--target-rps", target_rps), ("--trace-unit", unit)):
        if given is not None and trace is None:
            raise UsageError(f"{flag} needs --trace")
    if target_rps is not None:
        check_positive(target_rps, "--target-rps")
    check_trace_unit(unit, "--trace-unit")


def _setting(doc: dict[str, Any], peer: str, value: float) -> str:
    unit = doc.get("knobs", {}).get(peer, {}).get("unit", "")
    return f"{value:g} {unit}".strip()


def _cost(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _measures(e: Mapping[str, Any]) -> str:
    return (f"{100 * e['requests_within_slo']:.2f} % / {100 * e['windows_within_slo']:.0f} % / "
            f"{_cost(e['cost_vs_oracle'])}")


def frontier_lines(doc: dict[str, Any], name: str) -> list[str]:
    """One row per peer: its frontier, cheapest first, and what was swept."""
    frontiers = doc.get("frontiers", {}).get(name, {})
    if not frontiers:
        return []
    out = ["Frontiers (setting: requests / windows within SLO / cost vs oracle, cheapest first):", "",
           "| peer | knob | frontier | swept |", "|---|---|---|---|"]
    for peer, front in frontiers.items():
        knob = doc["knobs"][peer]
        points = " · ".join(f"{_setting(doc, peer, e['setting'])}: {_measures(e)}" for e in front)
        swept = ", ".join(f"{v:g}" for v in knob["settings"])
        out.append(f"| {peer} | {knob['knob']} | {points} | {swept} |")
    return [*out, ""]


def dominance_lines(doc: dict[str, Any]) -> list[str]:
    """Whether any frontier point dominates tidescale, scenario by scenario, said plainly."""
    rows = {n: r["tidescale"] for n, r in doc["scenarios"].items() if "tidescale" in r}
    if not rows or not doc.get("frontiers"):
        return []
    hit = [n for n, r in rows.items() if r["dominated_by"]]
    verdict = (f"tidescale is dominated in {len(hit)} of {len(rows)} scenarios ({', '.join(hit)}): there a "
               "peer, tuned to that point, costs no more and serves no fewer requests and windows within the "
               "SLO, and is strictly better on one." if hit else
               f"No frontier point of any peer dominates tidescale in any of the {len(rows)} scenarios.")
    out = ["## Is tidescale dominated by a tuned peer?", "", verdict, "",
           "Each peer's frontier is tuned in hindsight, per scenario; a deployment runs one setting for all "
           "its traffic, where tidescale runs its one shipped configuration everywhere. Undominated is not "
           "better: the last column is the cheapest peer point that meets the goals (≥ 99.9 % of requests, "
           "≥ 99 % of windows), where tidescale may not.", "",
           "| scenario | tidescale: requests / windows / cost | dominated by | cheapest peer point meeting the goals |",
           "|---|---|---|---|"]
    for name, r in rows.items():
        by = ", ".join(r["dominated_by"]) or "no"
        out.append(f"| {name} | {_measures(r)} | {by} | {_cheapest_meeting(doc, name)} |")
    return [*out, ""]


def _cheapest_meeting(doc: dict[str, Any], name: str) -> str:
    """The cheapest frontier point of any peer meeting both SLO goals, as `peer@setting: measures`."""
    meeting = [(e["cost_vs_oracle"], peer, e) for peer, front in doc["frontiers"][name].items() for e in front
               if e["cost_vs_oracle"] is not None and e["requests_within_slo"] >= GOALS["requests_within_slo"]
               and e["windows_within_slo"] >= GOALS["windows_within_slo"]]
    if not meeting:
        return "none"
    _cost_value, peer, e = min(meeting, key=lambda m: m[0])
    return f"{bench.sweep_row(peer, e['setting'])}: {_measures(e)}"


def _fixed_point(doc: dict[str, Any], name: str, peer: str) -> dict[str, Any] | None:
    fixed = doc["knobs"][peer]["fixed"]
    return next((e for e in doc["sweeps"][name][peer] if e["setting"] == fixed), None)


def fixed_vs_best_lines(doc: dict[str, Any]) -> list[str]:
    """Each peer at the setting earlier runs fixed, against its best swept point."""
    if not doc.get("sweeps"):
        return []
    out = ["## Peers: fixed setting vs best swept setting", "",
           "Requests / windows within SLO / cost vs oracle.", "",
           "| scenario | peer | fixed setting | at the fixed setting | best setting | at the best setting |",
           "|---|---|---:|---|---:|---|"]
    for name, by_peer in doc["sweeps"].items():
        for peer in by_peer:
            fixed, best = _fixed_point(doc, name, peer), doc["scenarios"][name][peer]
            at_fixed = "not run" if fixed is None else _measures(fixed)
            out.append(f"| {name} | {peer} | {_setting(doc, peer, doc['knobs'][peer]['fixed'])} | {at_fixed} "
                       f"| {_setting(doc, peer, best['setting'])} | {_measures(best)} |")
    return [*out, ""]


# Why the surge goals are out of reach for any policy that does not know the future; the figures
# that go with it are computed per run (`bound_lines`).
UNREACHABLE = [
    "## Why the surge goals are out of reach",
    "",
    "What a controller can know of a surge that starts at t0: the fast path's next read shows it "
    "(2 s, over a 6 s window; through Prometheus, the first scrape after t0, ≤ 15 s), the "
    "recommender's answer reaches the HPA at the next sync (≤ 15 s; at once in direct mode), and the "
    "replica it asks for serves after the cold start. Until then the fleet that stood at t0 serves "
    "alone. The table below grants a policy more than any can have, zero detection lag and no "
    "leftover backlog, and counts the arrivals of the first cold start after t0 beyond what the "
    "pre-surge fleet completes at full throughput: those cannot all be served within the SLO. Where "
    "that bound is under 99.9 %, no policy without foresight reaches the goal without standing "
    "headroom, and the last columns say how much: the replicas that must stand all day.",
    "",
    "Real policies stay well below the bound. Without a queue timeout the backlog outlives the "
    "surge's start: Triton's queues are per pod, so replicas added later cannot take over requests "
    "already queued; they only divert new arrivals (round robin gives each of N pods 1/N), and a "
    "backlogged pod drains at its capacity minus rate/N. A Triton queue policy "
    "(`default_queue_policy { timeout_action: REJECT }`) rejects what waited too long instead, so "
    "the backlog ends with the overload; `--queue-timeout` measures every policy on such servers "
    "(docs/benchmarks/autoscale-queue-timeout.md). The ways to the goal are replicas that exist "
    "before the surge is visible (the `headroom` setting, or scheduled pre-scaling for known "
    "peaks), at the price the table shows; the oracle's cost is out of reach for the same reason: "
    "it never has a backlog to drain, and it sizes at full capacity with no margin (tidescale keeps "
    "0.9 up / 0.8 down, which the diurnal and trace scenarios need to hold every window). The bound "
    "starts from the fewest replicas the pre-surge minute needs; a policy that happens to hold more "
    "at t0 (those margins, a pending scale-down) can beat it.",
    "",
]


def bound_lines(doc: dict[str, Any]) -> list[str]:
    """The no-foresight bound per surge scenario (computed by `bench.scenario_bound`)."""
    if not doc.get("bounds"):
        return []
    out = ["| scenario | pre-surge fleet | bound: requests within SLO | tidescale | standing replicas for 99.9 % "
           "| × pre-surge fleet |", "|---|---:|---:|---:|---:|---:|"]
    for name, b in doc["bounds"].items():
        mine = doc["scenarios"][name].get("tidescale")
        ours = "–" if mine is None else f"{100 * mine['requests_within_slo']:.2f} %"
        need = "> maximum" if b["replicas_for_goal"] is None else f"{b['replicas_for_goal']}"
        factor = "–" if b["headroom_for_goal"] is None else f"{b['headroom_for_goal']:.1f}×"
        out.append(f"| {name} | {b['fleet_at_surge']} | {100 * b['requests_within_slo_max']:.2f} % | {ours} "
                   f"| {need} | {factor} |")
    return [*out, ""]


def own_bound_lines(doc: dict[str, Any]) -> list[str]:
    """Each row's no-foresight bound from its own fleet at the surge (starting replicas counted Ready):
    a policy that stood with more replicas is held to more than the scenario's bound."""
    rows = [(name, row, r) for name, res in doc["scenarios"].items() for row, r in res.items()
            if "surge_bound" in r and row != "oracle"]
    if not rows:
        return []
    out = ["### Each policy against its own no-foresight bound", "",
           "The bound above assumes the fleet the pre-surge minute needs. Here each row's bound starts from the "
           "replicas that row had asked for at the surge's first instant (starting ones counted Ready), so "
           "standing margin is not mistaken for detection: the gap is what the policy lost after the surge began.",
           "", "| scenario | row | fleet at the surge | its bound | measured | gap (pt) |",
           "|---|---|---:|---:|---:|---:|"]
    for name, row, r in rows:
        gap = 100 * (r["requests_within_slo"] - r["surge_bound"])
        out.append(f"| {name} | {row} | {r['fleet_at_surge']:g} | {100 * r['surge_bound']:.2f} % "
                   f"| {100 * r['requests_within_slo']:.2f} % | {gap:+.2f} |")
    return [*out, ""]


def saturation_lines(doc: dict[str, Any]) -> list[str]:
    """Each row while the load outgrew maxReplicas (`closedloop.saturation_scores`), where a scenario caps
    the fleet below it."""
    rows = [(name, row, r) for name, res in doc["scenarios"].items() for row, r in res.items()
            if r.get("saturated_s")]
    if not rows:
        return []
    out = ["### While the load outgrew maxReplicas", "",
           f"Seconds in which the load of the {SATURATION_WINDOW_S} s around them exceeded what maxReplicas "
           "complete flat out: no policy can hold the SLO then, and none should scale down (the fleet would serve "
           "less of a load it already cannot carry). Each row: its scale-downs in those seconds, and the share of "
           "them in which it had asked for every replica it may have (the rest is mostly the climb at the start). "
           "A peer's row is its best setting; the last column looks at every setting it was swept over. "
           "The surge bound above already counts what maxReplicas cannot serve.", "",
           "| scenario | row | saturated s | scale-downs while saturated | at maxReplicas | requests within SLO "
           "| swept settings that scaled down while saturated |",
           "|---|---|---:|---:|---:|---:|---|"]
    for name, row, r in rows:
        downs = f"{r['scale_downs_saturated']:g}"
        downs = downs if not r["scale_downs_saturated"] else f"**{downs}**"  # each one a defect
        swept = doc.get("sweeps", {}).get(name, {}).get(row)
        out.append(f"| {name} | {row} | {r['saturated_s']:g} | {downs} | {100 * r['saturated_at_max']:.1f} % "
                   f"| {100 * r['requests_within_slo']:.2f} % | {_downs_over_sweep(doc, row, swept)} |")
    return [*out, "", *_saturated_draws(doc)]


def _saturated_draws(doc: dict[str, Any]) -> list[str]:
    """The same for tidescale's rows on the extra draws (`--extra-seed`)."""
    out = []
    for name, by_seed in doc.get("seeds", {}).get("scenarios", {}).items():
        by_row: dict[str, list[Mapping[str, Any]]] = {}
        for draw in by_seed.values():
            for row, r in draw["rows"].items():
                if r.get("saturated_s"):
                    by_row.setdefault(row, []).append(r)
        for row, mine in by_row.items():
            at_max = sum(r["saturated_at_max"] for r in mine) / len(mine)
            out.append(f"- {name}, {row} on the {len(mine)} extra draws: "
                       f"{sum(r['scale_downs_saturated'] for r in mine):g} scale-downs while saturated in all, "
                       f"at maxReplicas {100 * at_max:.1f} % of that time on average")
    return [*out, ""] if out else []


def _downs_over_sweep(doc: dict[str, Any], peer: str, swept: Sequence[Mapping[str, Any]] | None) -> str:
    if not swept:
        return "–"
    bad = [f"{_setting(doc, peer, e['setting'])} ({e['scale_downs_saturated']:g})" for e in swept
           if e.get("scale_downs_saturated")]
    return ", ".join(bad) if bad else f"none of {len(swept)}"


def yardstick_lines(doc: dict[str, Any]) -> list[str]:
    """The oracle against the fluid lower bound, and every run that beat the oracle at its own SLO shares."""
    marks = doc.get("yardsticks") or {}
    if not any(m["fluid_replica_hours"] for m in marks.values()):
        return []
    out = ["## Yardsticks: the oracle and the fluid bound", "",
           "The oracle is the cheapest replica schedule a search found that meets the goals (99.9 % of requests "
           "and 99 % of one-minute windows within the SLO) on this very draw: a level per 15 s HPA sync, asked "
           "one start ahead, judged by the simulator the policies run on (`benches/autoscale/optimum.py`). It "
           "starts from each second's arrivals sized at the capacity at the SLO (the oracle of earlier pages, "
           "\"start\" below), repairs every slot that missed, then lowers slots together and one by one while "
           "the goals hold. It is a local optimum, not a proven one. The fluid lower bound is proven: the "
           "replica-hours no schedule can undercut while serving 99.9 % of the scored requests (each at a "
           "replica's full throughput, no cold start, no queueing, never under the minimum replicas). Runs in "
           "the last column (any setting of any policy) met the oracle's shares of requests and of windows "
           "within the SLO for fewer replica-hours: a cheaper schedule the search missed, warned on stderr.", "",
           "| scenario | fluid bound (replica-h) | oracle × fluid | start × oracle | simulations | tidescale × fluid "
           "| beat the oracle |",
           "|---|---:|---:|---:|---:|---:|---|"]
    for name, m in marks.items():
        if not m["fluid_replica_hours"]:
            continue
        mine = doc["scenarios"][name].get("tidescale", {}).get("cost_vs_fluid")
        beaten = ", ".join(m["oracle_beaten_by"]) or "none"
        search = m.get("oracle_search")
        start = "–" if not search else f"{search['start_vs_oracle']:.2f}×"
        runs = "–" if not search else f"{search['simulations']}" + ("" if search["meets_goals"] else " (goals not met)")
        out.append(f"| {name} | {m['fluid_replica_hours']:.2f} | {m['oracle_vs_fluid']:.2f}× | {start} | {runs} "
                   f"| {'–' if mine is None else f'{mine:.2f}×'} | {beaten} |")
    return [*out, ""]


def _clock_offsets(offsets: Mapping[str, float] | None) -> str:
    """Where this draw's scrape and HPA sync fall in their cycles (older recorded runs started both at 0 s,
    with the surges)."""
    if not offsets:
        return ""
    return (f"; clocks drawn from the seed: Prometheus scrapes at {offsets['scrape']:g} s and the HPA syncs at "
            f"{offsets['hpa_sync']:g} s into each 15 s cycle (the scenarios' surges start at 0 s of one)")


def _publish_delays(delays: Mapping[str, float] | None) -> str:
    """How late the recommender's answer reaches what applies it (older recorded runs lack it)."""
    if not delays:
        return ""
    return "; tidescale's answer is applied " + ", ".join(
        f"{delay:g} s later in {mode} mode" for mode, delay in delays.items()) + \
        " (adapter: one scrape of the recommender, `monitoring.recommender.interval`; then the HPA's sync)"


STEP_TEXT = [
    "## What each step of detection buys", "",
    "The same recommender four ways (requests / windows within the SLO / cost vs oracle): on "
    "Prometheus alone (a 15 s scrape, the 30 s and 1 m rate windows); as shipped, with the fast path "
    "(every Ready pod's counters read every 2 s, a panic on an overload over a 6 s window), through "
    f"prometheus-adapter (the chart's default mode: one {bench.PUBLISH_DELAY_S['adapter']:g} s recommender scrape "
    "and up to one 15 s HPA sync later); through KEDA asking the recommender itself (`autoscaling.mode: keda`, "
    "`keda.source: recommender`: no scrape in between, up to one HPA sync); and writing the "
    "Deployment's scale subresource itself (`autoscaling.mode: direct`, no HPA: the panic lands at once). "
    "Where a surge scenario has a no-foresight bound, the last column is the shipped row's distance to it.",
    "",
]


def step_lines(doc: dict[str, Any]) -> list[str]:
    """The step variants side by side per scenario (rows `scenarios.STEP_VARIANTS`)."""
    steps = [v for v in bench.STEP_VARIANTS if v != "tidescale"]
    out = [*STEP_TEXT, "| scenario | Prometheus only | shipped (fast path, adapter) | KEDA asks the recommender | "
           "direct scale | bound | shipped − bound |", "|---|---|---|---|---|---:|---:|"]
    rows = 0
    for name, res in doc["scenarios"].items():
        if not all(v in res for v in ("tidescale", *steps)):
            continue
        b = doc.get("bounds", {}).get(name)
        bound = "–" if b is None else f"{100 * b['requests_within_slo_max']:.2f} %"
        gap = "–" if b is None else (
            f"{100 * (res['tidescale']['requests_within_slo'] - b['requests_within_slo_max']):+.2f} pt")
        cells = [_measures(res[v]) for v in ("tidescale+no-fast-path", "tidescale", "tidescale+keda",
                                             "tidescale+direct")]
        out.append(f"| {name} | {' | '.join(cells)} | {bound} | {gap} |")
        rows += 1
    return [*out, ""] if rows else []


def goal_lines(doc: dict[str, Any]) -> list[str]:
    """tidescale (as shipped, through KEDA asking the recommender, and in direct mode) against the
    issue's goals, scenario by scenario (computed, not written by hand)."""
    across = doc.get("seeds", {}).get("across_draws")
    out = ["## tidescale against the goals", "",
           f"Steady scenarios: ≥ 99.9 % of requests and ≥ 99 % of windows within the SLO at ≤ {STEADY_COST:g}× the "
           f"oracle's replica-hours. Surge scenarios: requests within the SLO within {DEFAULT_SURGE_GAP_PT:g} point "
           f"of the no-foresight bound ({SURGE_GAP_PT['flash-crowd-10x']:g} for the flash crowd) at ≤ {SURGE_COST:g}×. "
           "Every scenario: no frontier point of any peer dominating it."
           + (" The last column: no rerun peer point dominating it significantly across the held-out draws "
              "(all the draws where fewer than two are held out; Peers on every draw, below)." if across else ""), "",
           "| scenario | row | SLO | cost | undominated | all met |"
           + (" undominated across the draws |" if across else ""),
           "|---|---|---|---|---|---|" + ("---|" if across else "")]
    for name, res in doc["scenarios"].items():
        bound = doc.get("bounds", {}).get(name)
        for row in JUDGED_ROWS:
            r = res.get(row)
            if r is None:
                continue
            v = verdict(name, r, None if bound is None else bound["requests_within_slo_max"])
            free = not r.get("dominated_by", [])
            line = (f"| {name} | {row} | {v.slo_text}: {'yes' if v.slo else 'no'} | {_cost(r['cost_vs_oracle'])}: "
                    f"{'yes' if v.cost else 'no'} | {'yes' if free else 'no'} | "
                    f"{'yes' if all((v.slo, v.cost, free)) else 'no'} |")
            if across:
                line += f" {_undominated_across(doc, name, row)} |"
            out.append(line)
    return [*out, ""]


def _undominated_across(doc: Mapping[str, Any], scenario: str, row: str) -> str:
    """yes, or no with the points dominating the row significantly across the draws (– : not rerun)."""
    found = peer_draws.judged_dominators(doc, scenario, row)
    if found is None:
        return "–"
    return f"no ({', '.join(found)})" if found else "yes"


def policy_colours(policies: Sequence[str], cmap: Callable[[int], Any]) -> dict[str, Any]:
    """One colour per policy on every panel, as the frontier plot draws them: tidescale black, the oracle
    red, the rest in order of first appearance from a 20-colour map (the default cycle repeats after 10,
    and two policies in one colour cannot be told apart)."""
    out: dict[str, Any] = {"tidescale": "black", "oracle": "red"}
    for p in policies:
        if p not in out:
            out[p] = cmap((len(out) - 2) % 20)
    return out


def legend_top(fig: Any, rows: int, row_in: float) -> float:
    """Where the panels may reach (a fraction of the figure's height) under a legend of *rows* rows of
    *row_in* inches each: a fixed fraction overlapped the titles of figures with few panels."""
    return max(0.5, 1.0 - (rows * row_in + 0.15) / float(fig.get_size_inches()[1]))


def plot(runs: dict[str, dict[str, RunResult]], path: Path, warmup_s: float = bench.WARMUP_S) -> None:
    """One panel per scenario: the load (in replicas' worth of capacity) and each policy's replicas."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(runs)
    fig, axes = plt.subplots(n, 1, figsize=(11, 2.6 * n), squeeze=False)
    colours = policy_colours([p for by_policy in runs.values() for p in by_policy], plt.get_cmap("tab20"))
    for ax, (name, by_policy) in zip(axes[:, 0], runs.items(), strict=True):
        any_run = next(iter(by_policy.values()))
        arr = any_run.arrivals[any_run.arrivals >= warmup_s] - warmup_s
        if len(arr):
            bins = np.arange(0, float(arr.max()) + 15, 15)
            counts, _ = np.histogram(arr, bins)
            ax.fill_between(bins[:-1], counts / 15.0, step="post", alpha=0.2, color="grey", label="req/s")
        ax2 = ax.twinx()
        for p, r in by_policy.items():
            t = np.asarray(r.times) - warmup_s
            keep = t >= 0
            ax2.step(t[keep], np.asarray(r.replicas)[keep], where="post", label=p, color=colours[p],
                     linewidth=2.2 if p in ("tidescale", "oracle") else 1.0,
                     linestyle="--" if p.startswith("tidescale+") else "-")
        ax.set_title(name)
        ax.set_ylabel("req/s")
        ax2.set_ylabel("replicas")
        ax.set_xlabel("s")
    handles, labels = axes[0, 0].get_figure().axes[-1].get_legend_handles_labels()
    ncol = min(len(labels), 6)  # more in one row run off the page
    fig.legend(handles, labels, loc="upper center", ncol=ncol, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, legend_top(fig, math.ceil(len(labels) / ncol), 0.17)))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_markdown(doc: dict[str, Any], doc_path: Path = DOC) -> None:
    doc_path.parent.mkdir(parents=True, exist_ok=True)
    raw = {key: doc.get(key, {}) for key in ("scenarios", "bounds", "frontiers", "sweeps", "knobs",
                                                 "config", "seeds")}
    doc_path.write_text(markdown(doc) + "\n<!-- raw -->\n```json\n" + json.dumps(raw, indent=1) + "\n```\n")


def write(doc: dict[str, Any], runs: dict[str, dict[str, RunResult]], doc_path: Path = DOC,
          png_path: Path = PNG, frontier_png: Path = FRONTIER_PNG) -> None:
    """Record the Markdown (with the raw JSON), the replica plot and the frontier plot."""
    write_markdown(doc, doc_path)
    plot(runs, png_path)
    plot_frontiers(doc, frontier_png)
    if doc.get("seeds", {}).get("across_draws"):
        peer_draws.plot(doc, peer_draws.draws_png(frontier_png))


NINES_FLOOR = 1e-4  # 100 % sits four nines up: the scale spreads 90–100 %, where the peers differ


def nines(pct: Any) -> Any:
    """Requests within SLO (%) to "nines": 0 % → 0, 90 % → 1, 99 % → 2, 99.9 % → 3, 100 % → 4."""
    return -np.log10(np.maximum(1.0 + NINES_FLOOR - np.asarray(pct, dtype=float) / 100.0, 1e-9))


def from_nines(z: Any) -> Any:
    return 100.0 * (1.0 + NINES_FLOOR - np.power(10.0, -np.asarray(z, dtype=float)))


# The nines scale's ticks, the roundest first: a panel keeps those a tenth of its height apart.
NINES_TICKS = (100.0, 99.9, 99.0, 90.0, 50.0, 0.0, 99.99, 99.5, 95.0, 75.0, 25.0, 99.95, 99.8, 98.0)


def nines_window(pcts: list[float]) -> tuple[float, float, list[float]]:
    """The y-range (in %) and ticks of a frontier panel holding *pcts*: from just under the lowest to
    just over the highest on the nines scale. A fixed 0-100 % range crowded the overload's panel,
    where every point sits between 80 and 92 %, into a tenth of its height."""
    zs = nines(pcts) if pcts else nines([0.0, 100.0])
    lo, hi = max(-0.12, float(np.min(zs)) - 0.15), min(4.3, float(np.max(zs)) + 0.3)
    lo = max(-0.12, min(lo, hi - 1.0))  # a nine at least: two ticks however close the points
    kept: list[float] = []
    for tick in NINES_TICKS:
        z = float(nines(tick))
        if lo <= z <= hi and all(abs(z - float(nines(k))) >= (hi - lo) / 10 for k in kept):
            kept.append(tick)
    return float(from_nines(lo)), float(from_nines(hi)), sorted(kept)


def _cost_ticks(ax: Any) -> None:
    """Plain multiples of the oracle's cost on the log axis (matplotlib's 4×10⁻¹ labels collide)."""
    from matplotlib.ticker import FixedLocator, NullLocator

    lo, hi = ax.get_xlim()
    ticks = [t for t in (0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 16) if lo <= t <= hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{t:g}×" for t in ticks])


LEGEND_COLUMN_IN = 2.4  # a legend column at 9 pt: a peer's name, its marker and the gap to the next


def plot_frontiers(doc: dict[str, Any], path: Path) -> None:
    """`frontier_figure` of *doc*, saved to *path*."""
    import matplotlib.pyplot as plt

    fig = frontier_figure(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def frontier_figure(doc: dict[str, Any]) -> Any:
    """A panel per scenario: cost vs oracle (log) against requests within SLO (nines scale), each
    peer's frontier as a line with markers labelled by setting, tidescale a star, the oracle a cross."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(doc["scenarios"])
    cols = min(3, max(1, len(names)))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 5.0 * rows), squeeze=False)
    colours = {peer: plt.get_cmap("tab20")(k) for k, peer in enumerate(pol.PEERS)}
    for ax, name in zip(axes.flat, names, strict=False):
        shown: list[float] = []  # every point's requests within the SLO (%), for the panel's y-range
        for peer, front in doc.get("frontiers", {}).get(name, {}).items():
            pts = [e for e in front if e["cost_vs_oracle"] is not None]
            xs = [e["cost_vs_oracle"] for e in pts]
            ys = [100 * e["requests_within_slo"] for e in pts]
            shown += ys
            ax.plot(xs, ys, marker="o", markersize=5, linewidth=1.2, color=colours.get(peer), label=peer)
            for e, x, y in zip(pts, xs, ys, strict=True):
                ax.annotate(f"{e['setting']:g}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7,
                            color=colours.get(peer))
        res = doc["scenarios"][name]
        shown += [100 * r["requests_within_slo"] for v, r in res.items()
                  if v == "oracle" or (v.startswith("tidescale") and r["cost_vs_oracle"] is not None)]
        for variant, r in res.items():
            if variant == "tidescale+direct" and r["cost_vs_oracle"] is not None:
                ax.plot(r["cost_vs_oracle"], 100 * r["requests_within_slo"], marker="*", markersize=14,
                        markerfacecolor="none", color="black", linestyle="none", label="tidescale, direct scale")
            elif variant.startswith("tidescale+") and r["cost_vs_oracle"] is not None:
                ax.plot(r["cost_vs_oracle"], 100 * r["requests_within_slo"], marker="*", markersize=9,
                        color="black", alpha=0.35, linestyle="none")
        if "tidescale" in res and res["tidescale"]["cost_vs_oracle"] is not None:
            t = res["tidescale"]
            ax.plot(t["cost_vs_oracle"], 100 * t["requests_within_slo"], marker="*", markersize=18, color="black",
                    linestyle="none", label="tidescale (grey: +headroom, +no-fast-path, +keda)")
        if "oracle" in res:
            ax.plot(1.0, 100 * res["oracle"]["requests_within_slo"], marker="x", markersize=10, color="red",
                    linestyle="none", label="oracle")
        ax.set_xscale("log")
        _cost_ticks(ax)
        ax.set_yscale("function", functions=(nines, from_nines))
        low, high, ticks = nines_window(shown)
        ax.set_yticks(ticks)
        ax.set_yticklabels([f"{t:g} %" for t in ticks])
        ax.set_ylim(low, high)
        ax.set_title(name)
        ax.set_xlabel("cost vs oracle (log)")
        ax.set_ylabel("requests within SLO (nines scale)")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    # A column of the legend takes about 2.4 in (eight in a row ran off a two-panel figure, three off one
    # panel); the figure grows by the rows the legend needs rather than squeezing its panels.
    width = 6.4 * cols
    ncol = max(1, min(len(labels), 6, int(width // LEGEND_COLUMN_IN)))
    legend_rows = math.ceil(len(labels) / ncol)
    fig.set_size_inches(width, 5.0 * rows + 0.2 * legend_rows)
    if labels:  # none where tidescale ran without the oracle and no peer
        fig.legend(handles, labels, loc="upper center", ncol=ncol, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, legend_top(fig, legend_rows, 0.2)))
    return fig
