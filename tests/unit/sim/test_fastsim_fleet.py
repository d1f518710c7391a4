"""Fleet behaviour: routing, cold start, drain, counters, bounded history, input validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.contracts.errors import UsageError
from tidescale.sim import BatcherConfig, FleetSim
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.startup import SLOWEST, PodStartup

CURVE = ServiceCurve(((1, 0.010), (32, 0.010)), jitter_sigma=0.0)
CFG = BatcherConfig(max_batch_size=8, preferred_batch_sizes=(), max_queue_delay_s=0.0)


def steady(rate: float, start: float, end: float) -> np.ndarray:
    return np.arange(start, end, 1.0 / rate)


def test_round_robin_spreads_requests_evenly() -> None:
    sim = FleetSim(CURVE, CFG, 4, cold_start_s=0.0)
    sim.offer(steady(100, 0.0, 10.0))
    sim.advance(11.0)
    per = [r.requests for r in sim.counters().replicas]
    assert per == [250, 250, 250, 250]


@pytest.mark.parametrize("routing", ["random", "least-loaded"])
def test_other_routings_serve_everything(routing: str) -> None:
    sim = FleetSim(CURVE, CFG, 3, cold_start_s=0.0, routing=routing, seed=3)
    sim.offer(steady(300, 0.0, 5.0))
    sim.advance(6.0)
    c = sim.counters()
    assert c.requests == 1500
    assert all(r.requests > 300 for r in c.replicas)


def _new_replica_share(routing: str) -> int:
    sim = FleetSim(CURVE, CFG, 2, cold_start_s=0.0, routing=routing)
    sim.offer(np.full(50, 0.0005))  # a burst: both replicas are backlogged for ~40 ms
    sim.advance(0.001)
    sim.set_replicas(3)  # a third, empty replica (cold start 0)
    sim.offer(steady(200, 0.002, 0.1))
    sim.advance(1.0)
    return {r.name: r.requests for r in sim.counters().replicas}["replica-2"]


def test_least_loaded_prefers_the_idle_replica() -> None:
    assert _new_replica_share("least-loaded") > _new_replica_share("round-robin") + 1


def test_cold_replica_gets_traffic_only_once_ready() -> None:
    sim = FleetSim(CURVE, CFG, 1, cold_start_s=30.0)
    sim.offer(steady(50, 0.0, 100.0))
    sim.advance(10.0)
    sim.set_replicas(2)
    assert (sim.replicas_total, sim.replicas_ready) == (2, 1)
    sim.advance(39.9)
    assert sim.counters().replicas[1].requests == 0
    sim.advance(40.0)
    assert sim.replicas_ready == 2
    sim.advance(101.0)
    new = sim.counters().replicas[1]
    assert new.requests == pytest.approx(60 * 50 / 2, abs=2)


def test_scale_down_drains_in_flight_and_queued_requests() -> None:
    slow = BatcherConfig(max_batch_size=1, preferred_batch_sizes=(), max_queue_delay_s=0.0)
    sim = FleetSim(CURVE, slow, 2, cold_start_s=0.0)
    sim.offer(np.full(20, 1.0))  # 10 per replica, each needs 10 x 10 ms
    sim.advance(1.0)
    sim.set_replicas(1)
    assert sim.replicas_total == 1
    assert len(sim.counters().replicas) == 2  # the removed one is still draining
    sim.offer(steady(10, 1.01, 2.0))
    sim.advance(3.0)
    c = sim.counters()
    assert c.requests == 20 + 10
    assert [r.name for r in c.replicas] == ["replica-0"]  # drained and gone, counters kept in totals


def test_scale_down_removes_starting_replicas_first() -> None:
    sim = FleetSim(CURVE, CFG, 2, cold_start_s=60.0)
    sim.set_replicas(4)
    sim.set_replicas(2)
    assert (sim.replicas_total, sim.replicas_ready) == (2, 2)


def test_no_ready_replica_drops_arrivals() -> None:
    sim = FleetSim(CURVE, CFG, 0, cold_start_s=5.0)
    sim.set_replicas(1)
    sim.offer(steady(10, 0.0, 10.0))
    sim.advance(11.0)
    c = sim.counters()
    assert c.dropped == 50 and c.requests == 50


def test_counters_match_per_request_results() -> None:
    cfg = BatcherConfig(max_batch_size=8, preferred_batch_sizes=(4,), max_queue_delay_s=0.003)
    sim = FleetSim(ServiceCurve.v100().scaled(0.1), cfg, 3, cold_start_s=0.0, seed=5, keep_history_s=None)
    rng = np.random.default_rng(1)
    sim.offer(np.sort(rng.uniform(0, 20, 6000)))
    sim.advance(25.0)
    c, done = sim.counters(), sim.completed()
    assert c.requests == c.inference_count == len(done) == 6000
    assert c.request_duration_s == pytest.approx(done.latency.sum())
    assert c.queue_duration_s == pytest.approx(done.queue.sum())
    assert sum(b * n for b, n in enumerate(c.batch_counts)) == 6000
    assert 0 < c.busy_seconds < 25.0 * 3
    assert c.cpu_seconds == pytest.approx(0.05 * 3 * 25.0 + 0.0005 * 6000)


def test_counters_count_only_completed_requests() -> None:
    sim = FleetSim(CURVE, CFG, 1, cold_start_s=0.0)
    sim.offer(np.array([1.0]))
    sim.advance(1.005)  # dispatched at 1.0, completes at 1.010
    assert sim.counters().requests == 0 and sim.queue_depth == 0
    sim.advance(1.010)
    assert sim.counters().requests == 1


def test_history_is_bounded() -> None:
    sim = FleetSim(CURVE, CFG, 1, cold_start_s=0.0, keep_history_s=10.0)
    sim.offer(steady(20, 0.0, 100.0))
    for t in range(10, 101, 10):
        sim.advance(float(t))
        sim.counters()
    kept = sim.completed()
    assert 0 < len(kept) <= 21 * 20
    assert sim.completed(since_t=95.0).completion.min() > 95.0


def test_bad_input_is_rejected_with_a_clear_message() -> None:
    with pytest.raises(UsageError, match="unknown routing"):
        FleetSim(CURVE, CFG, 1, 0.0, routing="sticky")
    sim = FleetSim(CURVE, CFG, 1, 0.0)
    with pytest.raises(UsageError, match="sorted"):
        sim.offer(np.array([2.0, 1.0]))
    sim.advance(5.0)
    with pytest.raises(UsageError, match="before the current time"):
        sim.offer(np.array([1.0]))
    with pytest.raises(UsageError, match="backwards"):
        sim.advance(1.0)
    with pytest.raises(UsageError, match=">= 0"):
        sim.set_replicas(-1)


@settings(max_examples=100, deadline=None)
@given(plan=st.lists(st.tuples(st.floats(0.1, 3.0), st.integers(0, 4)), min_size=1, max_size=6),
       routing=st.sampled_from(["round-robin", "random", "least-loaded"]))
def test_scaling_conserves_requests(plan: list[tuple[float, int]], routing: str) -> None:
    """Whatever the scaling plan, every arrival is served once or dropped (no endpoints)."""
    sim = FleetSim(ServiceCurve.v100().scaled(0.05), BatcherConfig(), 1, cold_start_s=0.5, routing=routing,
                   keep_history_s=None, routing_quantum_s=0.05)
    arrivals = steady(200, 0.0, 10.0)
    sim.offer(arrivals)
    t = 0.0
    for dt, n in plan:
        t += dt
        sim.advance(t)
        sim.set_replicas(n)
    sim.set_replicas(max(1, sim.replicas_total))
    sim.advance(t + 20.0)
    c = sim.counters()
    assert c.requests + c.dropped + sim.queue_depth == len(arrivals)
    assert len(sim.completed()) == c.requests
    assert sim.queue_depth == 0 or sim.replicas_ready == 0


# --- how new replicas start: varied starts, waits for GPU nodes ------------------------------------

def test_a_replica_beyond_the_free_gpus_waits_for_its_node_and_serves_nothing_before() -> None:
    sim = FleetSim(CURVE, CFG, 1, cold_start_s=5.0,
                   startup=PodStartup(5.0, free_gpus=1, node_min_s=100.0, node_scale_s=0.0))
    sim.offer(steady(50, 0.0, 300.0))
    sim.advance(10.0)
    sim.set_replicas(3)  # one free GPU: replica-1 starts now, replica-2 waits for a node (100 s)
    assert sim.unschedulable == 1 and sim.replicas_total == 3
    sim.advance(109.0)
    assert sim.unschedulable == 1
    sim.advance(111.0)
    assert sim.unschedulable == 0 and sim.replicas_ready == 2  # its node joined at 110 s, it starts then
    served = {r.name: r.requests for r in sim.counters().replicas}
    assert served["replica-2"] == 0
    sim.advance(116.0)
    assert sim.replicas_ready == 3
    assert [(name, start) for name, start, _ in sim.pod_times()] == [
        ("replica-0", -5.0), ("replica-1", 10.0), ("replica-2", 110.0)]


def test_a_gpu_freed_by_a_scale_down_goes_to_the_waiting_pod_and_nodes_stay() -> None:
    sim = FleetSim(CURVE, CFG, 2, cold_start_s=1.0,
                   startup=PodStartup(1.0, free_gpus=0, node_min_s=50.0, node_scale_s=0.0))
    sim.set_replicas(3)
    assert sim.unschedulable == 1
    sim.set_replicas(1)  # the waiting pod goes first, then the newest Ready one
    sim.advance(1.0)
    assert sim.unschedulable == 0 and sim.replicas_total == 1
    sim.advance(60.0)  # the node asked for the gone pod joins anyway, and stays
    sim.set_replicas(3)
    assert sim.unschedulable == 0


@given(st.integers(0, 2**32 - 1), st.floats(0.0, 2.0))
@settings(max_examples=40, deadline=None)
def test_drawn_starts_stay_within_their_clips(seed: int, sigma: float) -> None:
    model = PodStartup(60.0, container_sigma=sigma, free_gpus=0)
    rng = np.random.default_rng(seed)
    starts = [model.container(rng) for _ in range(20)]
    waits = [model.node_wait(rng) for _ in range(20)]
    assert all(model.fastest_s - 1e-9 <= s <= 60.0 * SLOWEST + 1e-9 for s in starts)
    assert all(model.node_min_s <= w <= model.node_max_s for w in waits)
    assert model.slow_s >= model.container_s


@pytest.mark.parametrize("bad", [{"container_s": -1.0}, {"container_s": float("nan")}, {"container_sigma": -0.1},
                                 {"free_gpus": -1}, {"node_shape": 0.0}, {"node_max_s": 10.0},
                                 {"node_scale_s": float("inf")}])
def test_a_bad_startup_model_is_named(bad: dict[str, float]) -> None:
    with pytest.raises(UsageError, match="invalid pod start-up model"):
        PodStartup(**{"container_s": 60.0, **bad})  # type: ignore[arg-type]


def test_clients_that_keep_their_connections_stay_on_the_pods_they_first_reached() -> None:
    """kube-proxy balances connections: at a steady load, pods that become Ready later get none of it,
    where a Service that spreads requests gives them their share."""
    from tidescale.sim.servicecurve import ServiceCurve

    curve = ServiceCurve(((1, 0.010), (32, 0.010)), jitter_sigma=0.0)
    cfg = BatcherConfig(max_batch_size=4, preferred_batch_sizes=(), max_queue_delay_s=0.001)
    shares = {}
    for routing in ("connections", "round-robin"):
        sim = FleetSim(curve, cfg, 1, cold_start_s=1.0, routing=routing, seed=3)
        sim.offer(np.arange(0.0, 30.0, 1 / 100))  # 100 req/s: a few requests open at a time
        sim.advance(5.0)
        sim.set_replicas(3)  # Ready at 6 s
        sim.advance(40.0)
        counts = [r.requests for r in sim.counters().replicas]
        shares[routing] = max(counts) / sum(counts)
    assert shares["connections"] > 0.95
    assert shares["round-robin"] < 0.6


def test_connections_to_a_pod_that_left_are_reopened_on_the_ready_ones() -> None:
    from tidescale.sim.connections import ClientConnections

    pool = ClientConnections(keepalive=4, rng=np.random.default_rng(0))
    assert set(pool.route(10, [7], outstanding=3).tolist()) == {0}  # 4 connections, all on pod 7
    assert pool.held == {7: 4}
    picks = pool.route(50, [8, 9], outstanding=5)  # pod 7 gone: six connections on 8 and 9
    assert sum(pool.held.values()) == 6 and set(pool.held) <= {8, 9}
    assert set(picks.tolist()) <= {0, 1}
    pool.route(5, [8, 9], outstanding=0)  # idle: down to the keep-alive limit
    assert sum(pool.held.values()) == 4


def test_a_pool_without_keepalive_is_refused() -> None:
    from tidescale.sim.connections import ClientConnections

    with pytest.raises(UsageError, match="keep-alive connections must be >= 1"):
        ClientConnections(keepalive=0, rng=np.random.default_rng(0))
