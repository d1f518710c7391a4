"""Pods that lose readiness once they serve: flaps and crash loops, as the fleet and kube-state-metrics see them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.autoscaler.coldstart import FirstReadyTracker
from tidescale.contracts.errors import UsageError
from tidescale.sim import BatcherConfig, FleetSim
from tidescale.sim.readiness import BACKOFF_MAX_S, BACKOFF_S, Outages, ReadinessFaults
from tidescale.sim.servicecurve import ServiceCurve

CURVE = ServiceCurve(((1, 0.010), (32, 0.010)), jitter_sigma=0.0)
CFG = BatcherConfig(max_batch_size=8, preferred_batch_sizes=(), max_queue_delay_s=0.0)


def steady(rate: float, start: float, end: float) -> np.ndarray:
    return np.arange(start, end, 1.0 / rate)


def crash_loop_windows(first_ready: float, up_s: float, start_s: float, n: int) -> list[tuple[float, float]]:
    """What CrashLoopBackOff gives, written out: Ready *up_s*, then the back-off and a start."""
    windows, up = [], first_ready
    for k in range(n):
        down = up + up_s
        up = down + min(BACKOFF_MAX_S, BACKOFF_S * 2 ** k) + start_s
        windows.append((down, up))
    return windows


def test_a_crash_looping_pod_backs_off_as_the_kubelet_does() -> None:
    faults = ReadinessFaults(crash_looping=1, crash_up_s=60.0)
    outages = faults.schedule(np.random.default_rng(0), 100.0, True, lambda: 30.0)
    assert outages is not None
    expected = crash_loop_windows(100.0, 60.0, 30.0, 8)
    end = expected[-1][1]
    assert outages.changes(0.0, end) == sorted([t for w in expected for t in w])
    assert list(zip(outages.starts, outages.ends, strict=False))[:8] == expected
    # the back-off stops doubling at five minutes
    gaps = [e - s for s, e in expected]
    assert gaps[-1] == BACKOFF_MAX_S + 30.0 and gaps[0] == BACKOFF_S + 30.0


def test_ready_time_is_the_last_return_and_none_while_out() -> None:
    outages = Outages(10.0, lambda up, _k: (up + 50.0, 20.0))  # out 60-80, 130-150, ...
    assert outages.last_ready(5.0) is None  # not Ready yet
    assert outages.last_ready(59.0) == 10.0
    assert outages.last_ready(60.0) is None and outages.down(79.9)
    assert outages.last_ready(80.0) == 80.0 and not outages.down(80.0)
    assert outages.last_ready(140.0) is None and outages.last_ready(151.0) == 150.0


def test_faults_that_lose_nothing_schedule_nothing() -> None:
    assert ReadinessFaults().schedule(np.random.default_rng(0), 0.0, False, lambda: 1.0) is None


@pytest.mark.parametrize("bad", [{"flaps_per_hour": -1.0}, {"flap_s": 0.0}, {"crash_looping": -1},
                                 {"crash_up_s": float("nan")}, {"flaps_per_hour": float("inf")}])
def test_impossible_faults_are_refused_by_name(bad: dict[str, float]) -> None:
    with pytest.raises(UsageError, match="invalid readiness faults"):
        ReadinessFaults(**bad)  # type: ignore[arg-type]


def test_a_flapping_pod_leaves_the_endpoints_and_comes_back() -> None:
    """Round robin over the Ready replicas: a replica out of the endpoints gets nothing, the others
    share what arrives, and what finds none Ready is refused; what one had queued is still served."""
    sim = FleetSim(CURVE, CFG, 3, cold_start_s=0.0, faults=ReadinessFaults(flaps_per_hour=60.0, flap_s=20.0))
    arrivals = steady(100, 0.0, 600.0)
    sim.offer(arrivals)
    replicas = list(sim._replicas)
    sim.advance(605.0)
    ins = np.array([[not (r.outages is not None and r.outages.down(a)) for r in replicas] for a in arrivals])
    ready = ins.sum(axis=1)
    expected = (ins[ready > 0] / ready[ready > 0, None]).sum(axis=0)
    per = {r.name: r.requests for r in sim.counters().replicas}
    assert (ins.sum(axis=0) < 0.9 * len(arrivals)).all()  # each was out for a while
    for r, share in zip(replicas, expected, strict=True):
        assert abs(per[r.name] - share) < 30  # round robin's pointer and the segments' edges
    assert sim.counters().dropped == int((ready == 0).sum())
    assert len(sim.completed()) + sim.counters().dropped == len(arrivals)


def test_pod_times_show_the_return_and_the_tracker_keeps_the_first_start() -> None:
    """kube-state-metrics' ready time moves with each return; the learned cold start does not."""
    faults = ReadinessFaults(crash_looping=1, crash_up_s=60.0)
    sim = FleetSim(CURVE, CFG, 1, cold_start_s=45.0, faults=faults)
    tracker = FirstReadyTracker(started_at=-1000.0)
    sim.set_replicas(2)  # replica-1 is the first added: it crash-loops
    seen_ready = set()
    t = 0.0
    while t < 900.0:
        t += 5.0
        sim.advance(t)
        times = {pod: (start, ready) for pod, start, ready in sim.pod_times()}
        tracker.observe(times)
        if times["replica-1"][1] is not None:
            seen_ready.add(times["replica-1"][1])
    assert sim._replicas[0].outages is None  # the opening replica does not crash-loop
    assert len(seen_ready) >= 3  # its ready time moved with every restart
    assert tracker.cold_start() == pytest.approx(45.0)


def test_only_the_first_pods_started_from_the_moment_named_crash_loop() -> None:
    """Pods added and removed before the moment are not the bad node's: a policy is not spared by them."""
    sim = FleetSim(CURVE, CFG, 1, cold_start_s=10.0, faults=ReadinessFaults(crash_looping=2, crash_from_s=100.0))
    sim.set_replicas(3)  # replica-1 and replica-2, before the moment
    sim.advance(50.0)
    sim.set_replicas(1)
    sim.advance(100.0)
    sim.set_replicas(4)  # replica-3..5: the first two crash-loop
    sim.advance(101.0)
    looping = {r.name: r.outages is not None for r in sim._replicas if r.removed_at is None}
    assert looping == {"replica-0": False, "replica-3": True, "replica-4": True, "replica-5": False}


def test_crash_serving_loops_the_oldest_pods_ready_at_the_moment_from_then_on() -> None:
    """A GPU failing under pods that serve: the oldest Ready ones crash at the moment, not those that start
    after it nor one still starting, and they loop as the kubelet restarts them."""
    faults = ReadinessFaults(crash_looping=2, crash_up_s=60.0, crash_from_s=100.0, crash_serving=True)
    sim = FleetSim(CURVE, CFG, 2, cold_start_s=30.0, faults=faults)
    sim.set_replicas(3)  # replica-2, Ready at 30 s
    sim.advance(50.0)
    sim.set_replicas(2)  # a scale-down before the moment takes replica-2 (the newest)
    sim.advance(80.0)
    sim.set_replicas(4)  # replica-3 and replica-4 are still starting at the moment (Ready at 110 s)
    sim.advance(99.9)
    assert sim.replicas_ready == 2 and sim.crash_looping(300.0) == 0
    sim.advance(100.0)
    sim.advance(109.0)
    assert sim.replicas_ready == 0 and sim.crash_looping(300.0) == 2
    looping = {r.name: r.outages is not None for r in sim._replicas if r.removed_at is None}
    assert looping == {"replica-0": True, "replica-1": True, "replica-3": False, "replica-4": False}
    replica_0 = sim._replicas[0].outages
    assert replica_0 is not None
    expected = crash_loop_windows(40.0, 60.0, 30.0, 3)  # Ready since 0 s, it crashes at 100 s: as if up 60 s from 40 s
    assert replica_0.changes(0.0, expected[-1][1]) == [t for w in expected for t in w]
    sim.advance(200.0)  # pods started after the moment never loop
    assert sim.replicas_ready == 2 and sim.crash_looping(300.0) == 2


def test_crash_serving_before_any_pod_serves_loops_none() -> None:
    faults = ReadinessFaults(crash_looping=2, crash_from_s=5.0, crash_serving=True)
    sim = FleetSim(CURVE, CFG, 0, cold_start_s=30.0, faults=faults)
    sim.set_replicas(2)
    sim.advance(300.0)
    assert sim.replicas_ready == 2 and all(r.outages is None for r in sim._replicas)


def test_a_crash_loop_shows_its_back_off_for_the_window_after_it_and_a_flap_never() -> None:
    """`max_over_time` of the waiting reason over the window: true from the crash until the window has
    passed the back-off's end (the restart's start is not a wait), false for a flap."""
    loop = ReadinessFaults(crash_looping=1, crash_up_s=60.0).schedule(np.random.default_rng(0), 100.0, True,
                                                                       lambda: 30.0)
    assert loop is not None
    # Ready 100-160, back-off 160-170, starting 170-200, Ready 200-260, back-off 260-280, ...
    assert not loop.waited_within(159.9, 300.0)  # never crashed yet
    assert loop.waited_within(160.0, 300.0) and loop.waited_within(199.0, 300.0)
    assert loop.waited_within(169.9, 5.0) and not loop.waited_within(175.0, 5.0)  # the start is no wait
    assert loop.waited_within(259.0, 90.0) and not loop.waited_within(259.0, 89.0)  # back-off ended at 170
    flap = ReadinessFaults(flaps_per_hour=3600.0, flap_s=20.0).schedule(np.random.default_rng(0), 0.0, False,
                                                                          lambda: 30.0)
    assert flap is not None and not any(flap.waited_within(t, 300.0) for t in range(0, 600, 7))


def test_the_fleet_counts_its_crash_looping_pods_until_a_scale_down_removes_them() -> None:
    sim = FleetSim(CURVE, CFG, 1, cold_start_s=10.0, faults=ReadinessFaults(crash_looping=2, crash_up_s=30.0))
    sim.set_replicas(4)  # replica-1 and replica-2 crash-loop: Ready at 10 s, crash at 40 s
    sim.advance(39.0)
    assert sim.crash_looping(300.0) == 0 and sim.replicas_ready == 4
    sim.advance(41.0)
    assert sim.crash_looping(300.0) == 2 and sim.replicas_ready == 2
    sim.set_replicas(2)  # the ReplicaSet deletes the pods that are not Ready first: the two in their back-off
    assert sim.crash_looping(300.0) == 0 and sim.replicas_ready == 2 == sim.replicas_total


def test_flaps_at_a_rate_of_zero_change_nothing() -> None:
    """The seam costs the scenarios without faults nothing: the same requests, the same latencies."""
    def run(faults: ReadinessFaults | None) -> np.ndarray:
        sim = FleetSim(CURVE, CFG, 2, cold_start_s=30.0, seed=4, faults=faults)
        sim.offer(steady(150, 0.0, 200.0))
        sim.advance(50.0)
        sim.set_replicas(3)
        sim.advance(260.0)
        return sim.completed().completion

    assert np.array_equal(run(None), run(ReadinessFaults()))


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.tuples(st.floats(0.01, 500.0), st.floats(0.01, 500.0)), min_size=1, max_size=20),
       t=st.floats(0.0, 25_000.0), first=st.floats(0.0, 100.0))
def test_outages_agree_with_themselves(gaps: list[tuple[float, float]], t: float, first: float) -> None:
    """down, last_ready and changes read the same windows, whatever they are."""
    def next_outage(up: float, k: int) -> tuple[float, float]:
        gap, length = gaps[k % len(gaps)]
        return up + gap, length

    o = Outages(first, next_outage)
    down = o.down(t)
    assert (o.last_ready(t) is None) == (down or t < first)
    flips = o.changes(first, t)
    # leaving and rejoining alternate: an odd count of flips up to t means out at t
    assert down == (len(flips) % 2 == 1 and t >= first)
    assert flips == sorted(flips)


def test_a_scale_down_deletes_what_a_replicaset_deletes_first() -> None:
    """Kubernetes' ranking (LogarithmicScaleDown): not Ready first; of the Ready, the one Ready for the
    shortest time, in powers of two; of the not Ready, the one restarted the most; then the newest."""
    sim = FleetSim(CURVE, CFG, 1, cold_start_s=10.0, faults=ReadinessFaults(crash_looping=1, crash_up_s=30.0))
    sim.set_replicas(2)  # replica-1 crash-loops: Ready 10-40 s, back-off 40-50, starting 50-60, Ready 60-90
    sim.advance(45.0)
    sim.set_replicas(3)  # replica-2, a replacement: Ready at 55 s
    sim.advance(58.0)
    # Both replica-1 (restarted once) and none else are not Ready: it goes first, not the newest
    assert sorted(sim._replicas, key=lambda r: r.deletion_rank(58.0))[0].name == "replica-1"
    # replica-1: crash at 90 s, back-off 20 s, starting 110-120 s, Ready again since 120 s
    sim.advance(130.0)
    assert [r.last_ready(130.0) for r in sim._replicas] == [0.0, 120.0, 55.0]
    order = [r.name for r in sorted(sim._replicas, key=lambda r: r.deletion_rank(130.0))]
    assert order == ["replica-1", "replica-2", "replica-0"]  # Ready 10 s, then 75 s and 130 s (one power of two)


def test_pods_that_start_alike_go_newest_first_as_before() -> None:
    sim = FleetSim(CURVE, CFG, 2, cold_start_s=10.0)
    for n, t in ((5, 20.0), (7, 40.0), (9, 55.0)):  # replica-7 and -8 are still starting at 55 s
        sim.set_replicas(n)
        sim.advance(t)
    order = [r.name for r in sorted(sim._replicas, key=lambda r: r.deletion_rank(sim.now))]
    assert order == [f"replica-{i}" for i in range(8, -1, -1)]
