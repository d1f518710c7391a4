"""The closed loop, the scores and the benchmark's plumbing (short runs on the real fast simulator)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidescale import cli
from tidescale.autoscaler.settings import RecommenderSettings
from tidescale.benches.autoscale import policies as pol
from tidescale.benches.autoscale import scenarios as bench
from tidescale.benches.autoscale.closedloop import (
    RunResult,
    SimParams,
    clock_offsets,
    recovery_seconds,
    replica_hours,
    run_policy,
    saturated_seconds,
    saturation_scores,
    score,
    window_p99,
    with_seed,
)
from tidescale.contracts.errors import UsageError
from tidescale.devstack.live_autoscaler import LiveAutoscaler
from tidescale.sim import BatcherConfig, traffic
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.traffic import scenario
from tidescale.sim.traffic import surge as surge_scenario

CURVE, CFG = ServiceCurve.v100(), BatcherConfig()
# The oracle's schedule search is tested in test_autoscale_optimum.py; these tests need a schedule only.
QUICK_ORACLE = 2


def test_replica_hours_and_windows() -> None:
    assert replica_hours([0, 1800], [2, 4], 0, 3600) == pytest.approx(3.0)
    assert replica_hours([0, 1800], [2, 4], 1800, 3600) == pytest.approx(2.0)
    arr = np.array([1.0, 2.0, 61.0, 62.0])
    p99 = window_p99(arr, np.array([0.1, 0.2, 5.0, np.inf]), 60, 120)
    assert p99[0] == pytest.approx(0.2) and np.isinf(p99[1])


def test_recovery_seconds() -> None:
    arr = np.arange(0, 300, 0.5)
    lat = np.where((arr >= 100) & (arr < 150), 2.0, 0.1)
    assert recovery_seconds(arr, lat, 0.5, 90.0, 300) == pytest.approx(60.0)  # bad 100..150 -> good from 150
    assert recovery_seconds(arr, np.full(len(arr), 0.1), 0.5, 90.0, 300) == 0.0
    assert recovery_seconds(arr, lat, 0.5, None, 300) is None


def test_score_counts_unserved_requests_as_misses() -> None:
    r = RunResult("x", np.array([130.0, 140.0, 150.0, 10.0]), np.array([0.1, np.inf, 0.2, 9.0]),
                  [0.0, 120.0], [1, 2], [1, 2])
    s = score(r, 0.5, 120.0, 180.0, None)
    assert s["requests_within_slo"] == pytest.approx(2 / 3)  # the warm-up request at t=10 is not scored
    assert s["unserved_requests"] == 1


def test_surge_bound_counts_what_the_pre_surge_fleet_cannot_take() -> None:
    """1000 s at 100 req/s with a surge to 300 req/s over [500, 560): a 2-replica fleet of
    100 req/s each is short by 100 req/s for the cold start (10 s here) = 1000 requests of 112 000."""
    rates = np.full(1000, 100.0)
    rates[500:560] = 300.0
    arrivals = np.concatenate([k + (np.arange(int(r)) + 0.5) / r for k, r in enumerate(rates)])
    b = bench.surge_bound(arrivals, 0.0, 1000.0, 500.0, 10.0, 100.0, 2, 0.999, 40)
    assert b.requests_within_slo == pytest.approx(1 - 1000 / 112_000)
    assert b.replicas_for_goal == 3 and b.headroom_for_goal == 1.5  # 3 replicas take the surge whole
    unreachable = bench.surge_bound(arrivals, 0.0, 1000.0, 500.0, 10.0, 100.0, 1, 1.0, 2)
    assert unreachable.replicas_for_goal is None and unreachable.headroom_for_goal is None
    assert bench.excess_arrivals(np.array([50.0, 150.0, 250.0]), 100.0) == 200.0


def test_bench_scenarios_report_their_bound() -> None:
    scenarios = bench.build_scenarios(1200.0, 800.0)
    assert bench.scenario_bound(scenarios["diurnal"], 0, 376.0, 380.0, 0.999) is None  # no surge
    flash = bench.scenario_bound(scenarios["flash-crowd-10x"], 0, 376.0, 380.0, 0.999)
    surge = bench.scenario_bound(scenarios["surge-3x"], 0, 376.0, 380.0, 0.999)
    assert flash is not None and surge is not None
    assert flash.fleet_at_surge == surge.fleet_at_surge == 3  # 800 req/s before either
    assert flash.requests_within_slo < surge.requests_within_slo < 0.999  # the goal needs foresight or headroom
    assert surge.replicas_for_goal is not None and surge.replicas_for_goal > 3


def test_oracle_needed_follows_the_rate() -> None:
    arr = np.sort(np.random.default_rng(0).uniform(0, 10, 3000))  # 300 req/s
    assert set(bench.oracle_needed(arr, 10, 100.0)) <= {3, 4, 5}


def test_closed_loop_tidescale_meets_slo_on_steady_traffic_near_oracle_cost() -> None:
    sc = bench.BenchScenario("steady", scenario("steady", 800.0, 300.0), 30.0)
    params = SimParams(CURVE, CFG, 30.0, 0.5)
    scores, runs = bench.run_scenario(sc, ["tidescale", "oracle", "hpa-cpu"], params, 370.0,
                                      oracle_search=QUICK_ORACLE)
    assert scores["tidescale"]["requests_within_slo"] >= 0.999
    assert scores["tidescale"]["cost_vs_oracle"] <= 1.5
    assert scores["oracle"]["requests_within_slo"] >= 0.999
    # CPU is irrelevant on GPU pods: the CPU HPA scales in and the fleet saturates
    assert scores["hpa-cpu@70"]["requests_within_slo"] < 0.5  # at the seed deployment's fixed 70 %
    assert len(runs["tidescale"].arrivals) == len(runs["oracle"].arrivals)  # identical traffic


def test_a_scenario_s_runs_shared_among_forked_jobs_give_the_same_scores_and_timelines() -> None:
    sc = bench.BenchScenario("steady", scenario("steady", 800.0, 120.0), 30.0)
    params = SimParams(CURVE, CFG, 30.0, 0.5)
    told: list[str] = []
    one = bench.run_scenario(sc, ["tidescale", "hpa-cpu"], params, 370.0, settings={"hpa-cpu": (50.0, 70.0)})
    two = bench.run_scenario(sc, ["tidescale", "hpa-cpu"], params, 370.0, told.append,
                             settings={"hpa-cpu": (50.0, 70.0)}, jobs=2)
    assert one[0] == two[0] and set(one[0]) == {"tidescale", "hpa-cpu@50", "hpa-cpu@70", *bench.STEP_VARIANTS}
    assert all(one[1][row].replicas == two[1][row].replicas for row in one[1])
    assert len(told) == len(one[0]) and told[-1].endswith(f"({len(one[0])}/{len(one[0])})")  # each run, once done


def test_queue_timeout_and_headroom_reach_the_closed_loop() -> None:
    """With a queue timeout the surge's overflow is rejected (fast failures, no lasting backlog) and
    tidescale counts it as demand; a standing headroom buys replicas before the surge is visible."""
    sc = bench.BenchScenario("surge", surge_scenario(800.0, 400.0, 3.0, at_s=150.0, ramp_s=10.0), 30.0, 150.0)
    shed = SimParams(CURVE, dataclasses.replace(CFG, queue_timeout_s=0.4), 30.0, 0.5)
    scores, runs = bench.run_scenario(sc, ["tidescale"], shed, 370.0, headroom_sweep=(3.0,))
    plain = scores["tidescale"]
    assert plain["unserved_requests"] > 0  # rejected while the new replicas start
    roomy = scores[bench.headroom_variant(3.0)]
    assert roomy["requests_within_slo"] > plain["requests_within_slo"]
    assert roomy["replica_hours"] > plain["replica_hours"]
    # rejections counted as demand: the first step already covers 2400 req/s (8 replicas at 90 %),
    # where completions plus a bounded queue alone read as about 1100 req/s
    assert next(n for n in runs["tidescale"].replicas if n > 3) >= 8


def test_measure_capacity_is_below_peak_throughput() -> None:
    cap = bench.measure_capacity(CURVE, CFG, 0.5, run_s=60.0)
    assert 0.5 * CURVE.max_throughput() < cap <= CURVE.max_throughput() * 1.01


def test_a_load_test_through_round_robin_reads_more_per_replica_near_a_batchs_time() -> None:
    """Round robin hands each of 4 replicas every 4th arrival, a smoother stream than Poisson, which
    batches better: at a P99 of 0.15 s, near the largest batch's time, a replica serves far more in
    the fleet than alone; with the SLO far from the batch times the two agree."""
    from tidescale.benches.autoscale import report as benchreport

    tight = benchreport.replica_setup(benchreport.BenchOptions(slo_s=0.15))
    alone = bench.measure_capacity(tight[0], tight[2], 0.15, run_s=60.0)
    fleet = bench.measure_capacity(tight[0], tight[2], 0.15, run_s=60.0, replicas=4)
    assert fleet > 1.1 * alone
    loose = benchreport.replica_setup(benchreport.BenchOptions())
    alone = bench.measure_capacity(loose[0], loose[2], 0.5, run_s=60.0)
    assert bench.measure_capacity(loose[0], loose[2], 0.5, run_s=60.0, replicas=4) == pytest.approx(alone, rel=0.06)
    with pytest.raises(UsageError, match="at least one replica"):
        bench.measure_capacity(CURVE, CFG, 0.5, replicas=0)
    # `--profile-replicas 4`: every policy is configured with the fleet's figure, and the page says both
    opts = benchreport.BenchOptions(["diurnal"], ("oracle",), quick=True, slo_s=0.15, profile_replicas=4,
                                    oracle_search=QUICK_ORACLE)
    doc, _runs = benchreport.run(opts)
    setup = doc["setup"]
    assert setup["profile_replicas"] == 4
    assert setup["capacity_rps_per_replica"] > 1.1 * setup["capacity_rps_one_replica"]
    text = benchreport.markdown(doc)
    assert "--profile-replicas 4" in text and "through round robin on 4 replicas (on one replica alone" in text


@pytest.mark.parametrize(("argv", "message"), [
    (["--scenario", "nope"], "unknown scenario nope"),
    (["--policy", "magic"], "unknown policy magic"),
    (["--target-rps", "5"], "--target-rps needs --trace"),
    (["--trace", "/nonexistent.csv"], "trace file /nonexistent.csv does not exist"),
    (["--trace", "/nonexistent.csv", "--target-rps", "nan"], "--target-rps must be a finite number > 0, got nan"),
    (["--trace", "/nonexistent.csv", "--target-rps", "-1"], "--target-rps must be a finite number > 0, got -1"),
    (["--trace-unit", "ms"], "--trace-unit needs --trace"),
    (["--trace", "/nonexistent.csv", "--trace-unit", "min"], "--trace-unit must be one of s, ms, us, ns, got 'min'"),
    (["--slo-p99", "0"], "--slo-latency-threshold must be a finite number > 0"),
    (["--slo-p99", "nan"], "--slo-latency-threshold must be a finite number > 0"),
    (["--headroom", "0.5"], "--headroom must be a finite factor >= 1"),
    (["--headroom-sweep", "nan"], "--headroom must be a finite factor >= 1"),
    (["--queue-timeout", "0"], "--queue-timeout must be > 0"),
])
def test_bench_bad_input_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "autoscale", "--no-write", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_policy_names() -> None:
    assert pol.check_policies(["tidescale"]) == ["tidescale"]
    assert len(pol.ALL_POLICIES) == 13  # 7 peers, 4 HPA-driven ones again with the tuned behavior, 2 more


def test_an_hpa_peer_runs_again_with_the_behavior_an_expert_ships() -> None:
    """Each HPA-driven peer is swept twice: at the HPA's default behavior and at `FAST_BEHAVIOR`, over
    the same grid of its knob; everything but the behavior is the same HPA."""
    for peer in pol.HPA_PEERS:
        plain, fast = pol.peer_policy(peer, 1.0, 3, 1, 40), pol.peer_policy(peer + "+fast", 1.0, 3, 1, 40)
        assert isinstance(plain, pol.HpaPolicy) and isinstance(fast, pol.HpaPolicy)
        assert fast.name == peer + "+fast" and pol.KNOBS[fast.name] == pol.KNOBS[peer]
        assert plain.spec.behavior is None and fast.spec.behavior == pol.FAST_BEHAVIOR
        assert dataclasses.replace(fast.spec, behavior=None) == plain.spec
    rules = pol.FAST_BEHAVIOR.scaleDown
    assert rules is not None and rules.stabilizationWindowSeconds == 60 and rules.tolerance == 0.0


def test_keda_rps_counts_what_the_queue_policy_turned_away() -> None:
    """The KEDA peer's arrivals are completions plus rejections: a saturated fleet completes less than
    it is offered, and a query on completions alone would ask for too few replicas."""
    class Lag:
        rates: ClassVar[dict[str, float]] = {"requests": 300.0, "failures": 120.0}

        def rate(self, name: str, window_s: float) -> float | None:
            return self.rates.get(name)

    policy = pol.keda_rps(1, 1, 40, 100.0)
    assert policy.metrics(Lag(), []) == {"s0-prometheus": 420.0}  # type: ignore[arg-type]
    Lag.rates = {"requests": 300.0}  # a Triton before 24.08: no rejection series
    assert policy.metrics(Lag(), []) == {"s0-prometheus": 300.0}  # type: ignore[arg-type]
    Lag.rates = {}
    assert policy.metrics(Lag(), []) == {"s0-prometheus": None}  # type: ignore[arg-type]


def test_a_static_fleet_holds_its_size_within_the_bounds_whatever_the_load() -> None:
    """The `static` peer: its size from the first decision to the last, clamped to min and max."""
    arrivals = np.sort(np.random.default_rng(0).uniform(0.0, 300.0, 30_000))  # 100 req/s: far beyond 3 replicas
    params = SimParams(CURVE, CFG, 10.0, 0.5)
    run = run_policy(pol.peer_policy("static", 3, 1, 1, 40), arrivals, 300.0, 1, params)
    assert set(run.replicas[1:]) == {3}
    assert pol.peer_policy("static", 99, 1, 1, 40).decide(0.0, None, None) == 40  # type: ignore[arg-type]
    assert pol.peer_policy("static", 0.4, 1, 2, 40).decide(0.0, None, None) == 2  # type: ignore[arg-type]


class _Prom:
    def query(self, expr: str) -> list[dict[str, object]]:
        return []  # the fast path's pod discovery: no pods (the fast path stays idle)

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def instant(self, expr: str) -> list[tuple[float, float]]:
        if "nv_inference_request_failure" in expr:
            return []  # a server without the reason label (Triton < 24.08): no rejection series
        if "duration_seconds" in expr:
            return []  # no traces: no P99
        if "rate(" in expr:
            return [(0.0, self.rate)]
        if "time()" in expr:
            return [(0.0, 1.0)]
        if "pending" in expr:
            return [(0.0, 0.0)]
        return []

    def close(self) -> None:
        pass


def test_live_autoscaler_scales_the_fleet_and_reports_status() -> None:
    fleet = {"spec": 1, "ready": 1}
    calls: list[int] = []

    def scale(n: int) -> None:
        calls.append(n)
        fleet["spec"] = fleet["ready"] = n

    live = LiveAutoscaler("http://unused:9090", scale, lambda: fleet["spec"], lambda: fleet["ready"],
                          capacity_rps=10.0, max_replicas=8)
    live.service.client = _Prom(45.0)  # type: ignore[assignment]
    live.step(0.0)
    assert calls == [5] and live.status().desired_replicas == 5
    live.service.client = _Prom(1000.0)  # type: ignore[assignment]
    live.step(15.0)
    assert fleet["spec"] == 8 and live.status().max_replicas == 8
    with pytest.raises(Exception, match="unknown live policy"):
        LiveAutoscaler("http://x", scale, lambda: 1, lambda: 1, policy="magic")


def test_report_records_the_bound_and_where_a_queue_timeout_run_goes() -> None:
    from tidescale.benches.autoscale import report as benchreport

    opts = benchreport.BenchOptions(["surge-3x"], ("oracle",), quick=True, oracle_search=QUICK_ORACLE)
    doc, _runs = benchreport.run(opts)
    bound = doc["bounds"]["surge-3x"]
    assert bound["fleet_at_surge"] == 3 and bound["requests_within_slo_max"] < 0.999
    text = benchreport.markdown(doc)
    assert "| surge-3x | 3 |" in text and "standing replicas for 99.9 %" in text
    assert opts.paths == (benchreport.DOC, benchreport.PNG, benchreport.FRONTIER_PNG)
    shed = benchreport.BenchOptions(["surge-3x"], ("oracle",), quick=True, queue_timeout_s=0.4)
    assert shed.paths == (benchreport.SHED_DOC, benchreport.SHED_PNG, benchreport.SHED_FRONTIER_PNG)
    # The default runs the queue policy tidescale recommends for the bench's curve: the SLO minus the
    # largest batch's P99 execution time (not its mean), the numbers `autoscale render --max-batch-exec-ms` prints.
    policy = doc["queue_policy"]
    assert policy["kind"] == "recommended" and doc["setup"]["queue_timeout_s"] == policy["timeout_s"]
    assert policy["timeout_s"] == pytest.approx(0.5 - policy["max_batch_exec_s"], abs=1e-6)
    curve = benchreport.ServiceCurve.v100()
    assert policy["max_batch_exec_s"] == pytest.approx(curve.exec_p99_seconds(curve.max_batch), abs=1e-6)
    assert policy["max_batch_exec_s"] > policy["max_batch_exec_mean_s"] == pytest.approx(
        curve.exec_seconds(curve.max_batch), abs=1e-6)
    assert "default_timeout_microseconds" in policy["pbtxt"] and "what tidescale recommends" in text
    none = benchreport.BenchOptions(["surge-3x"], ("oracle",), quick=True, queue_policy="none")
    assert none.paths == (benchreport.NO_POLICY_DOC, benchreport.NO_POLICY_PNG, benchreport.NO_POLICY_FRONTIER_PNG)
    assert none.queue_policy_of(benchreport.ServiceCurve.v100()) == {"kind": "none", "timeout_s": None}
    with pytest.raises(UsageError, match="--queue-policy must be one of recommended, none"):
        benchreport.BenchOptions(["surge-3x"], ("oracle",), quick=True, queue_policy="fifo")


def test_a_replayed_trace_is_recorded_beside_the_default_under_a_name_that_is_only_a_name() -> None:
    """Until 2026-12-06 `bench autoscale --trace FILE` wrote its trace-only page over autoscale.md."""
    from tidescale.benches.autoscale import report as benchreport

    assert benchreport.page_paths("recommended", [], trace="mine.csv")[0].name == "autoscale-trace-mine.md"
    assert benchreport.page_paths("none", ["trace"], 0.3, trace="mine.csv")[0].name == (
        "autoscale-trace-mine-no-queue-policy-slo-0.3s.md")
    for hostile, slug in (("../../etc/passwd", "passwd"), ("Azure LLM (2023).CSV", "azure-llm-2023"),
                          ("`rm -rf ~`.csv", "rm-rf"), ("ééé.csv", "unnamed"), ("a" * 90 + ".csv", "a" * 40)):
        assert benchreport.trace_slug(hostile) == slug
        assert benchreport.page_paths("recommended", [], trace=hostile)[0].parent == benchreport.BENCH_DIR
    # the page's command names the file as one shell word, and no backtick ends its code span
    assert benchreport.trace_flags({"trace": "my trace`.csv", "target_rps": 50.0}) == (
        " --trace 'my trace?.csv' --target-rps 50")
    assert benchreport.trace_flags({}) == ""
    assert benchreport.trace_flags({"trace": "t.csv", "target_rps": None, "trace_unit": "ms"}) == (
        " --trace t.csv --trace-unit ms")
    assert benchreport.trace_flags({"trace": "t.csv", "trace_unit": "`rm`"}) == " --trace t.csv"  # no unit


def test_a_replayed_trace_s_page_says_how_its_timestamps_were_read(tmp_path: Path) -> None:
    from tidescale.benches.autoscale import report as benchreport

    trace = tmp_path / "t.csv"
    trace.write_text("t_ms\n0\n1500\n3000\n")
    opts = benchreport.BenchOptions(None, ("oracle",), quick=True, trace=trace)
    setup = opts.traced(bench.build_scenarios(1200.0, 800.0, trace))
    assert setup == {"trace": "t.csv", "target_rps": None, "trace_reading": "3 requests over 3 s (0.000833 h); "
                     "timestamps read as numbers in milliseconds (the header's 'ms')"}
    assert opts.traced() == {"trace": "t.csv", "target_rps": None}  # before the scenarios are built
    assert benchreport.BenchOptions(None, ("oracle",), quick=True).traced() == {}
    trace.write_text("offset\n0\n1500\n3000\n")  # relative milliseconds, no unit in the header: told
    told = benchreport.BenchOptions(None, ("oracle",), quick=True, trace=trace, trace_unit="ms")
    assert told.traced(bench.build_scenarios(1200.0, 800.0, trace, trace_unit="ms")) == {
        "trace": "t.csv", "target_rps": None, "trace_unit": "ms",
        "trace_reading": "3 requests over 3 s (0.000833 h); timestamps read as numbers in milliseconds (as given)"}


def test_another_sizing_is_recorded_beside_the_shipped_one_and_says_what_ran() -> None:
    from tidescale.benches.autoscale import report as benchreport

    burst = benchreport.BenchOptions(["diurnal"], ("oracle",), quick=True, sizing="burst")
    assert [p.name for p in burst.paths] == ["autoscale-burst-sizing.md", "autoscale-burst-sizing.png",
                                             "autoscale-burst-sizing-frontiers.png"]
    assert benchreport.tuning_of("burst")["sizing"] == "burst" and benchreport.tuning_of(None)["sizing"] == "fixed"
    assert benchreport._flags({"sizing": "burst"}).endswith(" --sizing burst")
    # a page run on some policies, at given settings, says so in the command that regenerates it
    assert benchreport._flags({"scenarios_named": ["workday"], "policies_named": ["static", "tidescale", "oracle"],
                               "peer_settings": ["static=4", "static=5"], "sweep": False,
                               "queue_policy": "recommended"}) == (
        " --scenario workday --policy static --policy tidescale --policy oracle --peer-setting static=4"
        " --peer-setting static=5 --no-sweep")
    with pytest.raises(UsageError, match="--sizing must be one of fixed, burst"):
        benchreport.BenchOptions(["diurnal"], ("oracle",), quick=True, sizing="magic")
    policy = pol.TidescalePolicy(2, 1, 40, 375.9, 60.0, 0.5, publish_delay_s=2.0, sizing="burst")
    assert policy.state.recommender.config.sizing == "burst"


def test_each_draw_has_its_own_clock_phases() -> None:
    """Where a surge falls in the scrape's and the HPA's 15 s cycles decides how long it goes unseen,
    so each seed draws both phases (the same ones every time), and every policy of a draw shares them."""
    offsets = {seed: clock_offsets(seed) for seed in range(8)}
    assert offsets[0] == clock_offsets(0)
    assert all(0 <= a < 15 and 0 <= b < 15 for a, b in offsets.values())
    assert len(set(offsets.values())) == 8
    seeded = with_seed(SimParams(CURVE, CFG, 30.0, 0.5), 3)
    assert (seeded.seed, seeded.scrape_offset_s, seeded.sync_offset_s) == (3, *offsets[3])


class _Ticks:
    """A policy that records when the loop asks it."""

    name = "ticks"

    def __init__(self, period_s: float) -> None:
        self.period_s, self.asked = period_s, []

    def decide(self, now: float, lag: object, sim: object) -> int:
        self.asked.append(now)
        return 1


def test_the_loop_decides_on_the_draws_sync_phase() -> None:
    params = SimParams(CURVE, CFG, 0.0, 0.5, hold_s=0.0, sync_offset_s=7.0)
    hpa, fast = _Ticks(15.0), _Ticks(2.0)
    run_policy(hpa, np.array([1.0]), 60.0, 1, params)
    run_policy(fast, np.array([1.0]), 10.0, 1, params)
    assert hpa.asked == [7.0, 22.0, 37.0, 52.0, 60.0]  # the last tick is the run's end
    assert fast.asked == [1.0, 3.0, 5.0, 7.0, 9.0, 10.0]


def test_tidescale_hpa_syncs_on_the_draws_phase_between_fast_path_ticks() -> None:
    """tidescale's loop ticks every 2 s (the fast path); its HPA syncs at the first tick at or after
    offset + 15 k, as a real HPA's sync would find the published answer."""
    params = SimParams(CURVE, CFG, 0.0, 0.5, hold_s=0.0, sync_offset_s=5.0)
    policy = pol.TidescalePolicy(1, 1, 4, 370.0, 0.0, 0.5, publish_delay_s=0.0, sync_offset_s=5.0)
    synced: list[float] = []
    step = policy.hpa.step
    policy.hpa.step = lambda now, metrics, pods: synced.append(now) or step(now, metrics, pods)  # type: ignore[method-assign, func-returns-value]
    run_policy(policy, np.arange(0.0, 70.0, 0.01), 70.0, 1, params)
    assert synced == [1.0, 5.0, 21.0, 35.0, 51.0, 65.0]  # the first tick syncs; then 20 -> 21 and 50 -> 51


def test_the_fluid_bound_counts_the_work_served_at_full_throughput_and_the_minimum_fleet() -> None:
    arrivals = np.arange(0.0, 100.0, 0.001)  # 1,000 req/s over 100 s
    # 99.9 % of 100,000 requests at 500 req/s a replica: 199.8 replica-seconds, over the 1-replica floor
    assert bench.fluid_bound_hours(arrivals, 0.0, 100.0, 500.0, 1, 0.999) == pytest.approx(199.8 / 3600)
    assert bench.fluid_bound_hours(arrivals, 0.0, 100.0, 500.0, 3, 0.999) == pytest.approx(300 / 3600)
    assert bench.fluid_bound_hours(arrivals, 50.0, 100.0, 500.0, 1, 1.0) == pytest.approx(100 / 3600)


def test_a_policys_fleet_at_the_surge_counts_the_replicas_it_had_asked_for() -> None:
    run = RunResult("x", np.zeros(0), np.zeros(0), times=[0.0, 10.0, 20.0], replicas=[3, 5, 8], ready=[3, 3, 5])
    assert [bench.fleet_at(run, t) for t in (0.0, 9.9, 10.0, 25.0)] == [3, 3, 5, 8]


def test_the_yardsticks_name_every_run_that_beats_the_oracle_at_its_own_slo_shares() -> None:
    from tidescale.benches.autoscale.report import yardstick_lines, yardsticks

    def row(requests: float, windows: float, hours: float) -> dict[str, float]:
        return {"requests_within_slo": requests, "windows_within_slo": windows, "replica_hours": hours,
                "cost_vs_fluid": hours / 0.5}

    scores = {"oracle": row(1.0, 1.0, 1.0), "static@4": row(1.0, 1.0, 0.98), "static@3": row(0.99, 1.0, 0.8),
              "tidescale": row(1.0, 1.0, 1.01)}
    marks = yardsticks(scores)
    assert marks == {"fluid_replica_hours": 0.5, "oracle_vs_fluid": 2.0, "oracle_beaten_by": ["static@4"],
                     "oracle_search": None}
    doc = {"yardsticks": {"azure": marks}, "scenarios": {"azure": {"tidescale": scores["tidescale"]}}}
    assert "| azure | 0.50 | 2.00× | – | – | 2.02× | static@4 |" in yardstick_lines(doc)
    searched = {**scores["oracle"], "search_evaluations": 31.0, "meets_goals": 0.0, "start_replica_hours": 1.25,
                "start_requests_within_slo": 1.0}
    doc["yardsticks"]["azure"] = yardsticks({**scores, "oracle": searched})
    assert "| azure | 0.50 | 2.00× | 1.25× | 31 (goals not met) | 2.02× | static@4 |" in yardstick_lines(doc)


def test_the_bench_records_each_policys_own_surge_bound() -> None:
    from tidescale.benches.autoscale import report as benchreport

    doc, _runs = benchreport.run(benchreport.BenchOptions(["surge-3x"], ("oracle", "static"), quick=True,
                                                          peer_settings=("static=3", "static=6"),
                                                          oracle_search=QUICK_ORACLE))
    rows = doc["scenarios"]["surge-3x"]
    # static's row is its best setting; the oracle stands ready before the surge (foresight)
    assert rows["static"]["fleet_at_surge"] == rows["static"]["setting"]
    assert rows["oracle"]["surge_bound"] == 1.0
    scenario_bound = doc["bounds"]["surge-3x"]  # from the pre-surge need: 3 replicas
    assert scenario_bound["fleet_at_surge"] == 3
    if rows["static"]["setting"] > 3:  # a larger standing fleet is held to a higher bound
        assert rows["static"]["surge_bound"] > scenario_bound["requests_within_slo_max"]
    assert doc["yardsticks"]["surge-3x"]["oracle_vs_fluid"] > 1.0
    text = benchreport.markdown(doc)
    assert "Each policy against its own no-foresight bound" in text and "fluid bound (replica-h)" in text
    # the page's command reruns what ran: these policies at these settings, not every peer's sweep
    assert ("`tidescale bench autoscale --quick --scenario surge-3x --policy oracle --policy static "
            "--peer-setting static=3 --peer-setting static=6 --oracle-search") in text


def test_the_proxies_count_a_queued_request_once() -> None:
    """KPA's and Ray's concurrency is Little's law on the completions (their time in the server, queued
    and executing, per second): the queue is not added on top of durations that already hold it."""
    cfg = BatcherConfig(max_batch_size=32, preferred_batch_sizes=(8, 16), max_queue_delay_s=0.002, instance_count=1)
    sim = bench.FleetSim(ServiceCurve.v100(), cfg, 1, 0.0)
    sim.offer(np.arange(0.0, 30.0, 1 / 600))  # over one replica's capacity: a queue builds
    probe = pol.ConcurrencyProbe()
    sim.advance(12.0)
    before = sim.counters()
    assert probe.sample(sim) is None  # a rate needs an interval
    sim.advance(14.0)
    after = sim.counters()
    assert after.pending > 0
    assert probe.sample(sim) == pytest.approx((after.request_duration_s - before.request_duration_s) / 2.0)


def test_knative_and_ray_route_as_their_own_routers_do() -> None:
    """The activator and Ray's router send each request to a replica with room: least-loaded routing,
    not the Service's round robin the HPA-driven policies get."""
    assert pol.KnativeKpa(3, 1, 40).routing == pol.RayServe(3, 1, 40).routing == "least-loaded"
    assert getattr(pol.hpa_cpu(3, 1, 40), "routing", "round-robin") == "round-robin"


def test_the_startup_scenarios_run_only_when_named_on_a_page_of_their_own() -> None:
    """Varied starts and waits for GPU nodes: the oracle asks ahead by a slow start, the no-foresight
    bound grants the quickest start (so it stays a bound), and the run is recorded apart."""
    from tidescale.benches.autoscale import report as benchreport

    available = bench.build_scenarios(1200.0, 800.0)
    assert set(bench.STARTUP_SCENARIOS) <= set(available)
    node = available["node-provisioning"]
    assert node.startup is not None and node.startup.free_gpus == 2
    assert node.fastest_start_s < node.cold_start_s < node.oracle_ahead_s
    assert "GPU(s) free" in node.describe() and "lognormal" in available["cold-start-variance"].describe()
    assert available["surge-3x"].oracle_ahead_s == available["surge-3x"].fastest_start_s == 60.0
    opts = benchreport.BenchOptions(list(bench.STARTUP_SCENARIOS), ("oracle",), quick=True)
    assert opts.paths == benchreport.named_page("startup")
    assert opts.paths[0].name == "autoscale-startup.md"
    mixed = benchreport.BenchOptions(["surge-3x", "node-provisioning"], ("oracle",), quick=True)
    assert mixed.paths[0] == benchreport.DOC
    doc, _runs = benchreport.run(benchreport.BenchOptions(["node-provisioning"], ("oracle",), quick=True,
                                                          oracle_search=QUICK_ORACLE))
    assert doc["scenario_info"]["node-provisioning"]["title"] == node.describe()
    assert not set(bench.STARTUP_SCENARIOS) & set(benchreport.default_scenarios(available, None))
    text = benchreport.markdown(doc)
    assert "## node-provisioning: " + node.describe() in text
    assert "autoscale-startup.png" in text and "autoscale-startup-frontiers.png" in text


def test_another_scheduler_model_runs_every_replica_and_is_recorded_beside_the_default(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--scheduler triton-2.51`: every replica (and the capacity load test) on Triton's batcher thread,
    said on the page and in its command, recorded beside the default (here on servers without a queue
    policy, where Triton prefetches payloads and the two models differ)."""
    from tidescale.benches.autoscale import report as benchreport

    opts = benchreport.BenchOptions(["diurnal"], ("oracle",), quick=True, scheduler="triton-2.51",
                                    queue_policy="none", oracle_search=QUICK_ORACLE)
    page = "autoscale-no-queue-policy-triton-2.51-scheduler"
    assert [p.name for p in opts.paths] == [f"{page}.md", f"{page}.png", f"{page}-frontiers.png"]
    assert benchreport.BenchOptions(scheduler="triton-2.51").paths[0].name == "autoscale-triton-2.51-scheduler.md"
    doc, _runs = benchreport.run(opts)
    assert doc["setup"]["scheduler"] == "triton-2.51"
    text = benchreport.markdown(doc)
    assert "--scheduler triton-2.51" in text and "(triton-2.51 scheduler model" in text
    stepped, _ = benchreport.run(dataclasses.replace(opts, scheduler="stepped"))
    assert "scheduler" not in stepped["setup"] and "(stepped scheduler model" in benchreport.markdown(stepped)
    # the capacity load test ran on the other batcher too: prefetching, Triton's serves a little less at
    # the SLO; under the recommended queue policy (no prefetching) the two measure the same
    assert doc["setup"]["capacity_rps_per_replica"] < stepped["setup"]["capacity_rps_per_replica"]
    curve, timeout = ServiceCurve.v100(), benchreport.BenchOptions().queue_policy_of(ServiceCurve.v100())["timeout_s"]
    capacities = {bench.measure_capacity(curve, BatcherConfig(max_batch_size=32, preferred_batch_sizes=(8, 16),
                                                              queue_timeout_s=timeout, scheduler=s), 0.5)
                  for s in ("stepped", "triton-2.51")}
    assert len(capacities) == 1
    with pytest.raises(UsageError, match="--scheduler must be one of stepped, triton-2.51"):
        benchreport.BenchOptions(["diurnal"], ("oracle",), quick=True, scheduler="exact")
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "autoscale", "--no-write", "--quick", "--scenario", "diurnal", "--scheduler", "exact"])
    assert exc.value.code == 2 and "--scheduler must be one of" in capsys.readouterr().err


def test_a_surge_bound_short_of_gpus_is_lower_and_still_granted_the_quickest_start() -> None:
    """Beyond the GPUs there are, a replica asked for at the surge serves a node's least wait later."""
    arrivals = np.sort(np.concatenate([np.linspace(0.0, 100.0, 10_000), np.linspace(100.0, 400.0, 90_000)]))
    free = bench.surge_bound(arrivals, 0.0, 400.0, 100.0, 10.0, 100.0, 1, 0.999, 40)
    short = bench.surge_bound(arrivals, 0.0, 400.0, 100.0, 10.0, 100.0, 1, 0.999, 40, bench.NodeLimit(2, 120.0))
    assert short.requests_within_slo < free.requests_within_slo
    assert short.replicas_for_goal is not None and free.replicas_for_goal is not None
    assert short.replicas_for_goal >= free.replicas_for_goal
    many = bench.surge_bound(arrivals, 0.0, 400.0, 100.0, 10.0, 100.0, 1, 0.999, 40, bench.NodeLimit(40, 120.0))
    assert many.requests_within_slo == free.requests_within_slo  # enough GPUs: no node to wait for


def test_a_capacity_profile_off_is_a_row_of_its_own_and_the_page_says_how_to_rerun_it() -> None:
    from tidescale.benches.autoscale import report as benchreport

    with pytest.raises(UsageError, match="--capacity-error must be a factor"):
        benchreport.BenchOptions(["surge-3x"], ("oracle",), quick=True, capacity_errors=(0.0,))
    opts = benchreport.BenchOptions(["node-provisioning"], ("tidescale", "oracle"), quick=True,
                                    capacity_errors=(0.7, 1.3), oracle_search=QUICK_ORACLE)
    doc, _runs = benchreport.run(opts)
    rows = doc["scenarios"]["node-provisioning"]
    low, high = rows["tidescale+capacity0.7x"], rows["tidescale+capacity1.3x"]
    # believing a replica serves less, it runs more of them, and the other way round
    assert low["replica_hours"] > rows["tidescale"]["replica_hours"] > high["replica_hours"]
    text = benchreport.markdown(doc)
    assert ("bench autoscale --quick --scenario node-provisioning --policy tidescale --policy oracle "
            "--capacity-error 0.7 --capacity-error 1.3" in text)
    assert "`tidescale+capacityFx` rows" in text


def test_another_slo_or_retrying_clients_are_recorded_beside_the_default_pages() -> None:
    from tidescale.benches.autoscale import report as benchreport

    def names(**kwargs: object) -> list[str]:
        return [p.name for p in benchreport.BenchOptions(**kwargs).paths]  # type: ignore[arg-type]

    assert names() == ["autoscale.md", "autoscale.png", "autoscale-frontiers.png"]
    assert names(slo_s=0.15) == ["autoscale-slo-0.15s.md", "autoscale-slo-0.15s.png",
                                 "autoscale-slo-0.15s-frontiers.png"]
    assert names(client_retries=2)[0] == "autoscale-retries-2.md"
    assert names(queue_policy="none", client_retries=2)[0] == "autoscale-no-queue-policy-retries-2.md"
    assert names(slo_s=0.15, client_retries=1)[0] == "autoscale-slo-0.15s-retries-1.md"
    # a named group on other servers: beside its own page, never over the default one of those servers
    assert names(scenarios=["overload"], queue_policy="none") == [
        "autoscale-overload-no-queue-policy.md", "autoscale-overload-no-queue-policy.png",
        "autoscale-overload-no-queue-policy-frontiers.png"]
    assert names(scenarios=["lulls"], queue_timeout_s=0.3)[0] == "autoscale-lulls-queue-timeout.md"
    assert names(queue_timeout_s=0.3)[0] == "autoscale-queue-timeout.md"
    assert names(slo_s=0.15, profile_replicas=4)[0] == "autoscale-slo-0.15s-profile-4-replicas.md"
    with pytest.raises(UsageError, match="client retries must be 0..10"):
        benchreport.BenchOptions(client_retries=11)
    for bad in (0, 65):
        with pytest.raises(UsageError, match=f"--profile-replicas must be in \\[1, 64\\], got {bad}"):
            benchreport.BenchOptions(profile_replicas=bad)


def test_the_frontier_plot_is_drawn_with_nothing_to_put_in_its_legend(tmp_path: Path) -> None:
    """tidescale alone (no oracle to cost it against, no peer): empty panels, not a traceback."""
    from tidescale.benches.autoscale import report as benchreport

    row = {"requests_within_slo": 0.99, "windows_within_slo": 1.0, "cost_vs_oracle": None}
    path = tmp_path / "frontiers.png"
    benchreport.plot_frontiers({"scenarios": {"surge-3x": {"tidescale": row}}}, path)
    assert path.stat().st_size > 0


@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=30))
def test_a_frontier_panel_spans_its_points_and_not_much_more(pcts: list[float]) -> None:
    """Every point inside the panel with two ticks to read it by, and a panel whose points all sit
    under 92 % (the overload) no longer reaching up to 100 %."""
    from tidescale.benches.autoscale import report as benchreport

    low, high, ticks = benchreport.nines_window(pcts)
    assert low <= min(pcts) and max(pcts) <= high and len(ticks) >= 2
    assert all(low <= t <= high for t in ticks)
    if max(pcts) <= 92.0:
        assert high < 99.0


@pytest.mark.parametrize("scenarios", [1, 2, 6])
def test_the_frontier_legend_fits_its_figure_however_many_panels(scenarios: int) -> None:
    """Every peer, tidescale's rows and the oracle: a one-panel figure cut the legend off at both sides."""
    import matplotlib.pyplot as plt

    from tidescale.benches.autoscale import report as benchreport

    row = {"requests_within_slo": 0.99, "windows_within_slo": 1.0, "cost_vs_oracle": 1.2}
    front = {peer: [{"setting": 1.0, "requests_within_slo": 0.9, "cost_vs_oracle": 1.0}] for peer in pol.PEERS}
    names = [f"s{k}" for k in range(scenarios)]
    fig = benchreport.frontier_figure({"scenarios": {n: {"tidescale": row, "tidescale+direct": row, "oracle": row}
                                                     for n in names}, "frontiers": dict.fromkeys(names, front)})
    try:
        fig.canvas.draw()
        legend = fig.legends[0].get_window_extent()
        assert len(fig.legends[0].get_texts()) == len(pol.PEERS) + 3
        assert legend.x0 >= 0 and legend.x1 <= fig.bbox.x1 and legend.y1 <= fig.bbox.y1
        top = max(ax.get_tightbbox().y1 for ax in fig.axes if ax.get_visible())
        assert top <= legend.y0  # the panels' titles under the legend, not behind it
    finally:
        plt.close(fig)


def test_the_lulls_run_only_when_named_on_a_page_of_their_own_and_every_named_group_has_one() -> None:
    from tidescale.benches.autoscale import report as benchreport

    available = bench.build_scenarios(1200.0, 800.0)
    assert set(bench.LULL_SCENARIOS) <= set(available)
    assert available["lulls"].surge_at_s is None  # judged as steady traffic: the load never exceeds the base
    assert available["lulls"].traffic.peak_rps == 800.0
    opts = benchreport.BenchOptions(list(bench.LULL_SCENARIOS), ("oracle",), quick=True)
    assert opts.paths == benchreport.named_page("lulls") and opts.paths[1].name == "autoscale-lulls.png"
    defaults = set(benchreport.default_scenarios(available, None))
    pages = set()
    for page, group in bench.NAMED_ONLY.items():
        assert not set(group) & defaults
        doc = benchreport.BenchOptions(list(group), ("oracle",), quick=True).paths[0]
        assert doc == benchreport.named_page(page)[0]
        pages.add(doc)
    assert len(pages) == len(bench.NAMED_ONLY)  # one page each, none the default's
    assert benchreport.DOC not in pages


def test_the_workday_is_a_real_day_with_the_day_before_as_history() -> None:
    from tidescale.benches.autoscale import report as benchreport

    for duration in (1200.0, 3600.0):  # --quick or not: a season is 24 h
        sc = bench.build_scenarios(duration, 800.0)["workday"]
        assert sc.traffic.duration_s == 86400.0 and len(sc.history) == 1 and sc.cold_start_s == 120.0
    available = bench.build_scenarios(1200.0, 800.0)
    assert not {"workday", "monday", "saturday"} & set(benchreport.default_scenarios(available, None))
    assert benchreport.BenchOptions(["workday"], ("oracle",), quick=True).paths == benchreport.named_page("seasonal")
    assert benchreport.BenchOptions(["monday", "saturday"], ("oracle",), quick=True).paths == \
        benchreport.named_page("weekly")
    days = (traffic.steady(50.0, 7200.0), traffic.steady(100.0, 3600.0))
    before = bench.BenchScenario("d", traffic.steady(100.0, 600.0), 60.0, history=days)
    samples = bench.history_samples(before, seed=0)
    # The days before end where the run's warm-up does, the oldest first: its last minute at WARMUP_S.
    assert samples[-1][0] == bench.WARMUP_S and samples[0][0] == bench.WARMUP_S - 10800.0 + 60.0
    assert {b[0] - a[0] for a, b in itertools.pairwise(samples)} == {60.0}
    split = bench.WARMUP_S - 3600
    older, newer = [r for t, r in samples if t <= split], [r for t, r in samples if t > split]
    assert 40.0 < sum(older) / len(older) < 60.0 and 90.0 < sum(newer) / len(newer) < 110.0
    assert bench.history_samples(dataclasses.replace(before, history=()), 0) == []
    assert samples != bench.history_samples(before, seed=1)


def test_the_workday_and_monday_forecasts_read_different_draws_of_the_same_workday() -> None:
    """The workday's day before and Monday's last Monday are the same shifted workday: read as one
    draw, the two pages' figures were equal on every seed, two pages of one test."""
    available = bench.build_scenarios(1200.0, 800.0)
    workday, monday = available["workday"], available["monday"]
    assert workday.history[0] is monday.history[0]
    day_s = int(workday.history[0].duration_s // 60)
    yesterday = bench.history_samples(workday, seed=0)
    last_monday = bench.history_samples(monday, seed=0)[:day_s]
    assert len(yesterday) == len(last_monday) == day_s
    assert [r for _, r in yesterday] != [r for _, r in last_monday]
    # Counted back from the run: the day before is the same draw, however long the history.
    saturday = available["saturday"]
    friday_alone = dataclasses.replace(saturday, history=saturday.history[-1:])
    assert bench.history_samples(saturday, 0)[-day_s:] == bench.history_samples(friday_alone, 0)


def test_no_two_draws_share_a_history_day() -> None:
    """Seeded seed + days before, draw s's second day before was draw s + 1's day before: a week's ten
    draws held 16 days between them, not 70, and the workday's seed 6 read Monday's seed 0's last Monday."""
    week = {bench.history_seed(seed, days) for seed in range(10) for days in range(1, 8)}
    assert len(week) == 70
    assert bench.history_seed(6, 1) == bench.history_seed(0, 1) + 6  # the day before kept its seed
    assert bench.history_seed(bench.MAX_SEED, 1) < bench.history_seed(0, 2)
    for seed, days in ((-1, 1), (bench.MAX_SEED + 1, 1), (0, 0)):
        with pytest.raises(ValueError, match="history of draw"):
            bench.history_seed(seed, days)


def test_a_week_with_a_weekend_reads_last_monday_on_monday_and_last_saturday_on_saturday() -> None:
    available = bench.build_scenarios(1200.0, 800.0)
    monday, saturday = available["monday"], available["saturday"]
    for sc in (monday, saturday):
        assert len(sc.history) == 7 and sum(d.duration_s for d in sc.history) == 7 * 86400.0
    nine = 9 * 3600 + 600.0  # ten minutes into the 09:00 peak
    assert monday.history[0].rate(nine) > 2 * monday.history[-1].rate(nine)  # last Monday peaked, Sunday did not
    assert saturday.history[-1].rate(nine) > 4 * saturday.history[0].rate(nine)  # Friday peaked, last Saturday not
    assert saturday.traffic.rate(nine) == pytest.approx(traffic.workday(800.0, peaks=()).rate(nine) * 0.5)
    assert set(bench.FORECAST_VARIANTS) == {bench.NO_FORECAST, "tidescale+forecast-1d"}
    policy = bench.make_policy("tidescale+forecast-1d", 2, 370.0, 120.0, [], 0.5)
    assert isinstance(policy, pol.TidescalePolicy)
    [state] = policy.service.states.values()
    assert [s.period_s for s in state.queries.seasons] == [86400.0]
    off = bench.make_policy(bench.NO_FORECAST, 2, 370.0, 120.0, [], 0.5)
    assert [s.queries.seasons for s in off.service.states.values()] == [()]  # type: ignore[attr-defined]


def test_the_readiness_scenarios_run_only_when_named_on_a_page_of_their_own() -> None:
    """Flaps and crash loops replay the 3x surge; their pods start at the surge, and they are recorded apart."""
    from tidescale.benches.autoscale import report as benchreport

    available = bench.build_scenarios(1200.0, 800.0)
    assert set(bench.READINESS_SCENARIOS) <= set(available)
    crash = available["crash-loop"]
    assert crash.faults is not None and crash.surge_at_s is not None
    assert crash.faults.crash_from_s == bench.WARMUP_S + crash.surge_at_s
    assert "CrashLoopBackOff" in crash.describe() and "from the surge on" in crash.describe()
    opts = benchreport.BenchOptions(list(bench.READINESS_SCENARIOS), ("oracle",), quick=True,
                                    oracle_search=QUICK_ORACLE)
    assert opts.paths == benchreport.named_page("readiness")
    assert opts.paths[2].name == "autoscale-readiness-frontiers.png"
    assert not set(bench.READINESS_SCENARIOS) & set(benchreport.default_scenarios(available, None))


def test_the_overload_runs_only_when_named_and_every_policy_stays_within_its_max_replicas() -> None:
    from tidescale.benches.autoscale import report as benchreport

    sc = bench.build_scenarios(1200.0, 800.0)["overload"]
    assert sc.max_replicas == bench.OVERLOAD_MAX_REPLICAS < bench.MAX_REPLICAS
    # the surge's load outgrows what maxReplicas complete flat out (the point of the scenario)
    assert sc.traffic.peak_rps > sc.max_replicas * CURVE.max_throughput()
    assert "maxReplicas 5" in sc.describe()
    assert benchreport.BenchOptions(["overload"], ("oracle",), quick=True).paths == benchreport.named_page("overload")
    def made(name: str, setting: float | None = None) -> pol.Policy:
        return bench.make_policy(name, 3, 370.0, 60.0, [9] * 100, 0.5, setting=setting, max_replicas=sc.max_replicas)

    assert made("static", 9).decide(0.0, None, None) == 5  # type: ignore[arg-type]
    assert made("oracle").decide(0.0, None, None) == 5  # type: ignore[arg-type]  # the schedule asks 9
    for name in ("hpa-cpu", "keda-rps+fast", "tidescale"):
        hpa = made(name).hpa  # type: ignore[attr-defined]
        assert hpa.spec.max_replicas == 5, name


def test_saturation_is_the_load_beyond_max_replicas_and_a_scale_down_then_is_counted() -> None:
    """100 req/s for 100 s, 300 req/s for 100 s, 100 req/s again; the largest fleet completes 200."""
    rates = [100.0] * 100 + [300.0] * 100 + [100.0] * 100
    arrivals = np.concatenate([k + (np.arange(int(r)) + 0.5) / r for k, r in enumerate(rates)])
    saturated = saturated_seconds(arrivals, 0.0, 300.0, 200.0)
    assert 98 <= np.flatnonzero(saturated)[0] <= 102 and 197 <= np.flatnonzero(saturated)[-1] <= 202
    assert saturated.sum() == pytest.approx(100, abs=2)  # where most of the 30 s around a second is the overload
    climbs = RunResult("p", arrivals, np.zeros(len(arrivals)), times=[0.0, 90.0, 130.0, 250.0],
                       replicas=[2, 3, 5, 2])
    held = saturation_scores(climbs, saturated, 0.0, 5)
    assert held["scale_downs_saturated"] == 0  # the scale-down at 250 s came after the overload
    assert held["saturated_at_max"] == pytest.approx(70 / saturated.sum(), abs=0.03)  # at 5 from 130 s
    drops = dataclasses.replace(climbs, times=[0.0, 90.0, 130.0, 160.0, 250.0], replicas=[2, 3, 5, 4, 2])
    assert saturation_scores(drops, saturated, 0.0, 5)["scale_downs_saturated"] == 1
    calm = saturation_scores(climbs, saturated_seconds(arrivals, 0.0, 300.0, 400.0), 0.0, 5)
    assert calm == {"saturated_s": 0.0, "scale_downs_saturated": 0.0, "saturated_at_max": None}


def test_the_bounds_count_what_max_replicas_cannot_serve() -> None:
    """The surge of the first bound test held for 400 s instead of 60: beyond 2 replicas of 100 req/s
    (the maximum), 100 req/s are lost for the whole surge, whatever the policy does."""
    rates = np.full(1000, 100.0)
    rates[500:900] = 300.0
    arrivals = np.concatenate([k + (np.arange(int(r)) + 0.5) / r for k, r in enumerate(rates)])
    free = bench.surge_bound(arrivals, 0.0, 1000.0, 500.0, 10.0, 100.0, 2, 0.999, 40)
    capped = bench.surge_bound(arrivals, 0.0, 1000.0, 500.0, 10.0, 100.0, 2, 0.999, 2)
    total = 1000 * 100 + 400 * 200
    assert free.requests_within_slo == pytest.approx(1 - 1000 / total)
    assert capped.requests_within_slo == pytest.approx(1 - 400 * 100 / total)  # the blind 10 s included
    assert capped.replicas_for_goal is None
    uncapped = bench.fluid_bound_hours(arrivals, 0.0, 1000.0, 100.0, 1, 1.0)
    assert uncapped == pytest.approx(total / 100 / 3600)
    assert bench.fluid_bound_hours(arrivals, 0.0, 1000.0, 100.0, 1, 1.0, max_replicas=2) == pytest.approx(
        (total - 400 * 100) / 100 / 3600)


def test_the_page_marks_a_scale_down_under_overload() -> None:
    from tidescale.benches.autoscale import report as benchreport

    row = {"saturated_s": 300.0, "scale_downs_saturated": 0.0, "saturated_at_max": 0.9, "requests_within_slo": 0.8}
    doc = {"scenarios": {"overload": {"tidescale": row, "keda-rps": {**row, "scale_downs_saturated": 2.0},
                                      "static": row, "oracle": {**row, "saturated_s": 0.0}}},
           "knobs": {"keda-rps": {"unit": "req/s"}},
           "sweeps": {"overload": {"keda-rps": [{"setting": 500.0, "scale_downs_saturated": 2.0},
                                                {"setting": 148.0, "scale_downs_saturated": 0.0}],
                                   "static": [{"setting": 5.0, "scale_downs_saturated": 0.0}]}}}
    lines = "\n".join(benchreport.saturation_lines(doc))
    assert "| overload | tidescale | 300 | 0 | 90.0 % | 80.00 % | – |" in lines
    assert "| overload | keda-rps | 300 | **2** | 90.0 % | 80.00 % | 500 req/s (2) |" in lines
    assert "| overload | static | 300 | 0 | 90.0 % | 80.00 % | none of 1 |" in lines
    assert "| overload | oracle |" not in lines
    draw = {"saturated_s": 290.0, "scale_downs_saturated": 1.0, "saturated_at_max": 0.8, "requests_within_slo": 0.8}
    doc["seeds"] = {"scenarios": {"overload": {"1": {"rows": {"tidescale": draw}},
                                               "2": {"rows": {"tidescale": {**draw, "scale_downs_saturated": 0.0,
                                                                            "saturated_at_max": 1.0}}}}}}
    assert ("- overload, tidescale on the 2 extra draws: 1 scale-downs while saturated in all, at maxReplicas "
            "90.0 % of that time on average") in benchreport.saturation_lines(doc)
    assert benchreport.saturation_lines({"scenarios": {"diurnal": {"tidescale": {"requests_within_slo": 1.0}}}}) == []


def test_the_benchmark_runs_the_shipped_recommender_whatever_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDESCALE_RECOMMENDER_TUNING__UTILISATION", "0.5")
    assert RecommenderSettings().tuning.utilisation == 0.5
    assert pol.shipped_settings().tuning.utilisation == RecommenderSettings.shipped().tuning.utilisation != 0.5
