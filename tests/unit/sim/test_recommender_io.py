"""The benchmark runs the recommender service on the simulator: every query it sends has an answer,
and its passes run (a pass that raised would be logged and the benchmark would score a frozen fleet)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tidescale.autoscaler.fastpath import valid_address
from tidescale.autoscaler.queries import TargetQueries
from tidescale.autoscaler.settings import RecommenderSettings, TargetSettings
from tidescale.benches.autoscale import policies as pol
from tidescale.benches.autoscale.closedloop import SimParams, run_policy
from tidescale.contracts.errors import UsageError
from tidescale.sim import BatcherConfig, FleetSim, MetricsLag
from tidescale.sim.readiness import ReadinessFaults
from tidescale.sim.recommender_io import DemandHistory, SimPods, SimPrometheus, SimScale, minute_rates
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.startup import PodStartup

CURVE = ServiceCurve.v100()
CFG = BatcherConfig(max_batch_size=32, preferred_batch_sizes=(8, 16), max_queue_delay_s=0.002)


def _prometheus() -> tuple[SimPrometheus, TargetQueries]:
    settings = RecommenderSettings(targets=[TargetSettings(deployment="triton", namespace="bench", model="model",
                                                                  capacity_rps=370.0)],
                                   kube_events=False)
    queries = TargetQueries.for_target(settings.targets[0], settings.tuning, forecast=settings.forecast)
    return SimPrometheus(queries, settings.config_for(settings.targets[0])), queries


def _bound(replicas: int, seconds: float) -> tuple[SimPrometheus, TargetQueries, FleetSim]:
    """A simulated fleet at 100 req/s for *seconds*, its Prometheus bound at the end."""
    prom, queries = _prometheus()
    sim = FleetSim(CURVE, CFG, replicas, 0.0)
    lag = MetricsLag(sim, 15.0)
    sim.offer(np.arange(0.0, seconds, 0.01))
    lag.advance(seconds)
    prom.bind(seconds, lag, sim)
    return prom, queries, sim


def test_every_query_of_a_target_is_answered_or_known_to_have_no_series() -> None:
    prom, queries, _sim = _bound(2, 60.0)
    assert queries.seasons  # the forecast's reads, as shipped, are among them
    for name, expr in queries.expressions().items():
        if name == "pending":  # a selector: the service asks for its pods (podreader.discover_pods)
            assert prom.query(f"group by (pod, instance) ({expr})")
            continue
        prom.instant(expr)  # raises for a query the model does not know
        prom.query(expr)
    assert prom.instant(queries.completions)[0][1] > 50.0  # ~100 req/s, one scrape late
    assert prom.instant(queries.hpa_current) == [] and prom.instant(queries.unschedulable) == []
    assert prom.instant(queries.crash_looping) == []  # count(...) of no pods is no series
    started = {r["metric"]["pod"]: float(r["value"][1]) for r in prom.query(queries.pod_started)}
    ready = {r["metric"]["pod"]: float(r["value"][1]) for r in prom.query(queries.pod_ready_at)}
    assert started == {"replica-0": 0.0, "replica-1": 0.0} and ready == started  # cold start 0: Ready at once


def test_the_service_learns_the_cold_start_the_pods_show_and_sees_pods_waiting_for_a_node() -> None:
    """kube-state-metrics' times, as the recommender reads them: a start-to-Ready time that is not the
    configured one is learned; pods beyond the free GPUs are unschedulable until their node joins."""
    prom, queries = _prometheus()
    sim = FleetSim(CURVE, CFG, 1, 60.0, startup=PodStartup(45.0, free_gpus=1, node_scale_s=0.0))
    lag = MetricsLag(sim, 15.0)
    sim.offer(np.arange(0.0, 400.0, 0.01))
    lag.advance(10.0)
    sim.set_replicas(3)
    lag.advance(30.0)
    prom.bind(30.0, lag, sim)
    assert prom.instant(queries.unschedulable) == [(30.0, 1.0)]
    assert {r["metric"]["pod"]: float(r["value"][1]) for r in prom.query(queries.pod_started)} == {
        "replica-0": -45.0, "replica-1": 10.0}  # replica-2 has no node: no start time yet
    lag.advance(200.0)
    prom.bind(200.0, lag, sim)
    assert prom.instant(queries.unschedulable) == []
    ready = {r["metric"]["pod"]: float(r["value"][1]) for r in prom.query(queries.pod_ready_at)}
    assert ready == {"replica-0": 0.0, "replica-1": 55.0, "replica-2": 175.0}  # its node joined at 130 s

    policy = pol.TidescalePolicy(1, 1, 8, 370.0, 60.0, 0.5, publish_delay_s=0.0)
    params = SimParams(CURVE, CFG, 60.0, 0.5, hold_s=0.0, startup=PodStartup(20.0))
    run_policy(policy, np.sort(np.random.default_rng(1).uniform(0.0, 300.0, 300 * 900)), 300.0, 1, params)
    assert policy.state.cold_start_source == "pod_ready"
    assert policy.state.recommender.config.cold_start_s == 20.0


def test_the_fast_path_discovers_ready_pods_and_a_gone_pod_does_not_answer() -> None:
    prom, queries, sim = _bound(3, 30.0)
    rows = prom.query(f"group by (pod, instance) ({queries.pending})")
    pods = {r["metric"]["pod"]: r["metric"]["instance"] for r in rows}
    assert len(pods) == 3 and all(valid_address(a) for a in pods.values())
    reader = SimPods()
    reader.sim = sim
    reads = reader.read({**pods, "gone-pod": "gone-pod:8002"}, "model")
    assert reads["gone-pod"] is None
    assert sum(c.success for c in reads.values() if c is not None) == sim.counters().requests


def test_the_service_runs_every_pass_in_the_closed_loop() -> None:
    params = SimParams(CURVE, CFG, 0.0, 0.5, hold_s=0.0)
    policy = pol.TidescalePolicy(1, 1, 8, 370.0, 0.0, 0.5, publish_delay_s=0.0)
    run_policy(policy, np.sort(np.random.default_rng(1).uniform(0.0, 120.0, 120 * 900)), 120.0, 1, params)
    svc = policy.service
    assert svc.evaluation_heartbeat.beats >= 7 and svc.fast_path_heartbeat is not None
    assert svc.fast_path_heartbeat.beats >= 55  # every 2 s over 2 minutes
    assert policy.state.failsafe is None and policy.state.pods  # it decided, on the pods it discovered
    assert policy.current >= 3  # 900 req/s on 370 req/s replicas


def test_direct_mode_writes_the_simulated_scale_subresource() -> None:
    params = SimParams(CURVE, CFG, 0.0, 0.5, hold_s=0.0)
    policy = pol.TidescalePolicy(1, 1, 8, 370.0, 0.0, 0.5, publish_delay_s=5.0, direct=True)
    run_policy(policy, np.sort(np.random.default_rng(2).uniform(0.0, 90.0, 90 * 900)), 90.0, 1, params)
    assert isinstance(policy.scale, SimScale) and policy.scale.replicas == policy.current >= 3


@pytest.mark.parametrize("publish_delay_s", [2.0, 0.0])
def test_the_service_learns_when_the_simulated_hpa_reads_its_answer(publish_delay_s: float) -> None:
    """Through prometheus-adapter (a publish delay) from the HPA's lastScaleTime, to the second, on
    the syncs' grid; through KEDA's metrics-api (none) from each sync's read of `/desired`, and from
    KEDA's own polls of it on a second grid. Only
    with a panic that may wait (`panic_confirm_readings` 2)."""
    params = SimParams(CURVE, CFG, 0.0, 0.5, hold_s=0.0)
    policy = pol.TidescalePolicy(1, 1, 8, 370.0, 0.0, 0.5, publish_delay_s=publish_delay_s, sync_offset_s=3.3,
                                 overrides={"tuning": {"panic_confirm_readings": 2}})
    run_policy(policy, np.sort(np.random.default_rng(1).uniform(0.0, 120.0, 120 * 900)), 120.0, 1, params)
    clock = policy.state.hpa_reads
    windows = clock.windows(120.0)
    assert windows and clock.keeps_period(windows) and policy.current >= 3
    if publish_delay_s:
        stamp = policy.hpa_api.scaled_at
        assert stamp is not None and (stamp - 3.3) % 15.0 < 2.0  # the first 2 s tick at or after a sync
        assert windows[-1] == (math.floor(stamp) - 3.0, math.floor(stamp) + 2.0)
    else:  # a read a sync and one a KEDA poll, half a sync later: two grids
        phases = [(start + 1.0 - 3.3) % 15.0 for start, _ in windows]  # after a sync, to the 2 s tick
        syncs, polls = [p for p in phases if p < 2.5], [p for p in phases if 7.5 <= p < 10.0]
        assert len(windows) == 8 and syncs and polls and len(syncs) + len(polls) == 8
    shipped = pol.TidescalePolicy(1, 1, 8, 370.0, 0.0, 0.5, publish_delay_s=2.0)
    run_policy(shipped, np.sort(np.random.default_rng(1).uniform(0.0, 60.0, 60 * 900)), 60.0, 1, params)
    assert shipped.state.hpa_reads.windows(60.0) == []  # nothing waits: the HPA is not read


def test_the_demand_history_keeps_a_sample_a_minute_and_reads_windows_as_range_selectors() -> None:
    history = DemandHistory([(-120.0, 10.0), (-60.0, 30.0), (0.0, 20.0)])
    history.record(30.0, 99.0)  # within the minute: not a sample
    history.record(60.0, 40.0)
    assert history.times == [-120.0, -60.0, 0.0, 60.0]
    assert history.peak(-120.0, 0.0) == 30.0  # (start, end]: -120 is out
    assert history.median(-180.0, 60.0) == 25.0
    assert history.peak(100.0, 200.0) is None and history.median(-999.0, -500.0) is None
    with pytest.raises(UsageError, match="time order"):
        DemandHistory([(0.0, 1.0), (0.0, 2.0)])


def test_minute_rates_are_what_a_recording_rule_would_have_stored() -> None:
    arrivals = np.concatenate([np.linspace(0.0, 59.9, 600), np.linspace(60.0, 119.9, 1200)])
    assert minute_rates(arrivals, -120.0) == [(-60.0, 10.0), (0.0, 20.0)]
    assert minute_rates(np.empty(0), 0.0) == []


def test_the_simulated_prometheus_answers_the_forecast_from_the_day_before_then_records_the_run() -> None:
    """A peak of 900 req/s a day (minus a minute) before the end of a 60 s run: the season's peak
    read finds it; the level now is the run's own recorded demand (~100 req/s)."""
    settings = RecommenderSettings(targets=[TargetSettings(deployment="triton", namespace="bench", model="model",
                                                           capacity_rps=370.0)], kube_events=False)
    queries = TargetQueries.for_target(settings.targets[0], settings.tuning, forecast=settings.forecast)
    before = [(t, 900.0 if t == 60.0 - 86400 + 60 else 100.0) for t in np.arange(-86400.0 - 600, 0.0, 60.0)]
    prom = SimPrometheus(queries, settings.config_for(settings.targets[0]), history=DemandHistory(before))
    sim = FleetSim(CURVE, CFG, 2, 0.0)
    lag = MetricsLag(sim, 15.0)
    sim.offer(np.arange(0.0, 60.0, 0.01))
    lag.advance(60.0)
    prom.bind(60.0, lag, sim)
    day, week = queries.seasons
    assert prom.instant(day.peak) == [(60.0, 900.0)]
    assert prom.instant(day.level) == [(60.0, 100.0)]
    assert prom.instant(week.peak) == [] and prom.instant(week.level) == []  # no week of history
    assert queries.demand_level is not None
    [(_, now)] = prom.instant(queries.demand_level)
    assert 50.0 < now < 150.0  # the run's own sample, one scrape late


def test_the_simulated_prometheus_answers_the_reads_of_a_forecast_rebuilt_for_a_learned_cold_start() -> None:
    """A peak a day ago, 6 minutes ahead: past the reads built for the configured 60 s cold start; once
    the service rebuilds them for a learned 300 s, the simulated Prometheus answers those too."""
    settings = RecommenderSettings(targets=[TargetSettings(deployment="triton", namespace="bench", model="model",
                                                           capacity_rps=370.0)], kube_events=False)
    target = settings.targets[0]
    queries = TargetQueries.for_target(target, settings.tuning, forecast=settings.forecast, cold_start_s=60.0)
    before = [(t, 900.0 if t == 60.0 - 86400 + 360 else 100.0) for t in np.arange(-86400.0 - 600, 0.0, 60.0)]
    prom = SimPrometheus(queries, settings.config_for(target), history=DemandHistory(before))
    sim = FleetSim(CURVE, CFG, 2, 0.0)
    lag = MetricsLag(sim, 15.0)
    lag.advance(60.0)
    prom.bind(60.0, lag, sim)
    assert prom.instant(queries.seasons[0].peak) == [(60.0, 100.0)]
    learned = TargetQueries.for_target(target, settings.tuning, forecast=settings.forecast, cold_start_s=300.0)
    prom.follow(learned)
    assert prom.instant(learned.seasons[0].peak) == [(60.0, 900.0)]


def test_crash_looping_pods_are_answered_as_the_fleet_has_them() -> None:
    prom, queries = _prometheus()
    sim = FleetSim(CURVE, CFG, 1, 10.0, faults=ReadinessFaults(crash_looping=2, crash_up_s=30.0))
    sim.set_replicas(3)
    lag = MetricsLag(sim, 15.0)
    lag.advance(60.0)  # Ready at 10 s, crashed at 40 s
    prom.bind(60.0, lag, sim)
    assert prom.instant(queries.crash_looping) == [(60.0, 2.0)]
