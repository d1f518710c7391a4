"""The dynamic batcher on hand-computed cases, and against the naive event-per-request oracle."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.contracts.errors import UsageError
from tidescale.sim import BatcherConfig, FleetSim, batch_to_send
from tidescale.sim.batcher import SCHEDULERS
from tidescale.sim.reference import simulate_naive
from tidescale.sim.servicecurve import ServiceCurve

FLAT = ServiceCurve(((1, 0.010), (32, 0.010)), jitter_sigma=0.0)  # every batch takes 10 ms
LINEAR = ServiceCurve(((1, 0.010), (32, 0.041)), jitter_sigma=0.0)  # 10 ms + 1 ms per extra request


def run(curve: ServiceCurve, cfg: BatcherConfig, arrivals: list[float], until: float = 10.0,
        replicas: int = 1) -> FleetSim:
    sim = FleetSim(curve, cfg, replicas, cold_start_s=0.0)
    sim.offer(np.asarray(arrivals))
    sim.advance(until)
    return sim


def batches(sim: FleetSim) -> list[int]:
    counts = sim.counters().batch_counts
    return [b for b in range(len(counts)) for _ in range(int(counts[b]))]


def test_single_request_waits_max_queue_delay_then_runs_alone() -> None:
    sim = run(FLAT, BatcherConfig(max_queue_delay_s=0.002), [1.0])
    done = sim.completed()
    assert list(done.batch_size) == [1]
    assert done.queue[0] == pytest.approx(0.002)
    assert done.latency[0] == pytest.approx(0.012)


def test_forty_simultaneous_requests_make_32_then_8_without_preferred_sizes() -> None:
    cfg = BatcherConfig(max_batch_size=32, preferred_batch_sizes=(), max_queue_delay_s=0.002)
    sim = run(LINEAR, cfg, [1.0] * 40)
    c = sim.counters()
    assert c.batch_counts[32] == 1 and c.batch_counts[8] == 1 and c.exec_count == 2
    lat = np.sort(sim.completed().latency)
    assert lat[:32] == pytest.approx([0.041] * 32)  # the full batch goes at once
    assert lat[32:] == pytest.approx([0.041 + 0.017] * 8)  # then 8 run when the instance frees (expired)


def test_preferred_sizes_are_sent_before_the_delay_expires() -> None:
    # Triton sends the largest preferred size it can reach while the delay has not expired.
    cfg = BatcherConfig(max_batch_size=32, preferred_batch_sizes=(8, 16), max_queue_delay_s=0.5)
    sim = run(FLAT, cfg, [1.0] * 40)
    assert sorted(batches(sim), reverse=True) == [16, 16, 8]
    # 20 queued: 16 is preferred -> sent at once; 4 left wait for the 0.5 s delay.
    sim = run(FLAT, cfg, [1.0] * 20)
    assert batches(sim) == [4, 16]
    assert sim.completed().queue.max() == pytest.approx(0.5)


def test_batch_forms_when_arrivals_reach_a_preferred_size() -> None:
    cfg = BatcherConfig(max_batch_size=32, preferred_batch_sizes=(4,), max_queue_delay_s=1.0)
    arrivals = [1.0, 1.001, 1.002, 1.003]
    sim = run(FLAT, cfg, arrivals)
    done = sim.completed()
    assert batches(sim) == [4]
    assert done.completion.max() == pytest.approx(1.003 + 0.010)


def test_zero_queue_delay_dispatches_immediately() -> None:
    cfg = BatcherConfig(max_batch_size=8, preferred_batch_sizes=(), max_queue_delay_s=0.0)
    sim = run(FLAT, cfg, [1.0, 1.001])
    # the second request waits for the instance (busy until 1.010), then runs alone
    assert batches(sim) == [1, 1]
    assert sorted(sim.completed().completion) == pytest.approx([1.010, 1.020])


def test_two_instances_run_batches_in_parallel() -> None:
    cfg = BatcherConfig(max_batch_size=8, preferred_batch_sizes=(), max_queue_delay_s=0.0, instance_count=2)
    sim = run(FLAT, cfg, [1.0, 1.001])
    assert sorted(sim.completed().completion) == pytest.approx([1.010, 1.011])


OVERLOAD = np.arange(0.0, 20.0, 1 / 800)  # twice the 400 req/s that batches of 4 in 10 ms serve


def overloaded(queue_timeout_s: float | None = None, scheduler: str = "stepped") -> tuple[FleetSim, list[int]]:
    """One replica offered OVERLOAD, and its queue depth every 5 s."""
    cfg = BatcherConfig(max_batch_size=4, preferred_batch_sizes=(), max_queue_delay_s=0.001,
                        queue_timeout_s=queue_timeout_s, scheduler=scheduler)
    sim = FleetSim(FLAT, cfg, 1, cold_start_s=0.0)
    sim.offer(OVERLOAD)
    depths = []
    for t in (5.0, 10.0, 15.0, 20.0):
        sim.advance(t)
        depths.append(sim.queue_depth)
    return sim, depths


def test_queue_grows_without_bound_above_capacity() -> None:
    sim, depths = overloaded()
    arrivals = OVERLOAD
    assert all(b > a for a, b in itertools.pairwise(depths))
    assert depths[-1] == pytest.approx(0.5 * len(arrivals), rel=0.05)
    done = sim.completed()
    late = done.queue[done.arrival > 9.0].mean()
    early = done.queue[done.arrival < 1.0].mean()
    assert late > 5 * early  # queue time keeps rising with arrival time


# the stepped model rejects when it forms a batch; Triton 2.51's batcher thread when it next looks at
# the queue with a payload slot free (under a timeout: an instance waiting, as no payload is prefetched)
@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_queue_timeout_rejects_what_waited_too_long_and_bounds_the_backlog(scheduler: str) -> None:
    """Triton's queue policy (REJECT after default_timeout_microseconds): under 2x overload the queue
    stops growing, no served request waited longer than the timeout, and every arrival is either
    served or rejected (nv_inference_request_failure)."""
    sim, depths = overloaded(queue_timeout_s=0.2, scheduler=scheduler)
    arrivals = OVERLOAD
    assert max(depths) <= 0.2 * 800 + 4  # a timeout's worth of arrivals, not half of everything
    sim.advance(30.0)  # no more arrivals: the rest is served or rejected
    done, c = sim.completed(), sim.counters()
    assert done.queue.max() <= 0.2 + 1e-9
    assert c.failures == pytest.approx(0.5 * len(arrivals), rel=0.05)
    assert c.requests + c.failures == len(done) + c.failures == len(arrivals) and sim.queue_depth == 0
    assert batches(sim) and set(batches(sim)) <= {1, 2, 3, 4}  # rejections are not executions


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_queue_timeout_leaves_a_fleet_under_capacity_alone(scheduler: str) -> None:
    cfg = BatcherConfig(max_batch_size=4, preferred_batch_sizes=(), max_queue_delay_s=0.001, queue_timeout_s=0.2,
                        scheduler=scheduler)
    sim = run(FLAT, cfg, list(np.arange(0.0, 5.0, 1 / 200)))
    assert sim.counters().failures == 0 and sim.counters().requests == 1000


def test_triton_scheduler_wakes_at_the_oldest_requests_timeout_when_it_comes_before_the_queue_delay() -> None:
    """GetDynamicBatch waits for the closest timeout if it is sooner than the queue delay: a lone request
    that cannot fill a preferred batch is rejected at its timeout, not served when the delay runs out."""
    cfg = BatcherConfig(max_batch_size=4, preferred_batch_sizes=(4,), max_queue_delay_s=0.5, queue_timeout_s=0.1,
                        scheduler="triton-2.51")
    sim = run(FLAT, cfg, [0.0, 0.3])
    c = sim.counters()
    assert (c.requests, c.failures) == (0, 2)


def test_batcher_config_rejects_bad_values() -> None:
    with pytest.raises(UsageError, match="queue_timeout_s must be > 0"):
        BatcherConfig(queue_timeout_s=0.0)
    with pytest.raises(UsageError, match="preferred batch size 64"):
        BatcherConfig(max_batch_size=32, preferred_batch_sizes=(64,))
    with pytest.raises(UsageError, match="max_queue_delay_s"):
        BatcherConfig(max_queue_delay_s=-1)
    with pytest.raises(UsageError, match="instance_count"):
        BatcherConfig(instance_count=0)


def test_batch_to_send_rule() -> None:
    cfg = BatcherConfig(max_batch_size=32, preferred_batch_sizes=(8, 16), max_queue_delay_s=0.01)
    assert batch_to_send(cfg, 0, False) == 0
    assert batch_to_send(cfg, 5, False) == 0
    assert batch_to_send(cfg, 5, True) == 5
    assert batch_to_send(cfg, 12, False) == 8
    assert batch_to_send(cfg, 40, False) == 16
    assert batch_to_send(cfg, 40, True) == 32


configs = st.builds(
    BatcherConfig,
    max_batch_size=st.integers(1, 16),
    preferred_batch_sizes=st.just(()),
    max_queue_delay_s=st.sampled_from([0.0, 0.001, 0.004]),
    instance_count=st.integers(1, 2),
    prefetch_depth=st.integers(0, 2),
).flatmap(lambda c: st.lists(st.integers(1, c.max_batch_size), max_size=3).map(
    lambda p: dataclasses.replace(c, preferred_batch_sizes=tuple(p))))

arrival_lists = st.lists(st.floats(0.0, 0.5, allow_nan=False), min_size=1, max_size=120).map(
    lambda xs: np.round(np.sort(np.asarray(xs)), 4))


@settings(max_examples=150, deadline=None)
@given(cfg=configs, arrivals=arrival_lists, replicas=st.integers(1, 3), seed=st.integers(0, 3))
def test_matches_naive_event_simulation(cfg: BatcherConfig, arrivals: np.ndarray, replicas: int, seed: int) -> None:
    """Conservation, latency >= execution, batch <= max, and exactly the oracle's batches."""
    curve = ServiceCurve.v100().scaled(0.05)
    sim = FleetSim(curve, cfg, replicas, cold_start_s=0.0, seed=seed, keep_history_s=None)
    sim.offer(arrivals)
    for t in (0.1, 0.25, 0.37, 10.0):  # stepping must not change the outcome
        sim.advance(t)
    done = sim.completed()
    c = sim.counters()
    assert c.requests == len(arrivals) == len(done) and sim.queue_depth == 0
    assert np.array_equal(np.sort(done.arrival), arrivals)  # each request completes exactly once
    assert done.batch_size.max() <= cfg.max_batch_size
    min_exec = min(curve.exec_seconds(b) for b in range(1, cfg.max_batch_size + 1)) * 0.5
    assert np.all(done.latency >= done.queue + min_exec)
    ref = simulate_naive(curve, cfg, replicas, arrivals, seed=seed)
    assert c.exec_count == len(ref.batches)
    assert np.sort(done.latency) == pytest.approx(np.sort(ref.latencies), abs=1e-9)
    assert c.batch_counts.sum() == c.exec_count


def test_prefetched_batch_is_fixed_when_formed() -> None:
    """Triton forms the next batch while the instance is busy; later arrivals wait for the one after."""
    slow = ServiceCurve(((1, 0.100), (8, 0.100)), jitter_sigma=0.0)
    arrivals = [0.0, 0.010, 0.020, 0.030, 0.040]
    prefetch = BatcherConfig(max_batch_size=8, preferred_batch_sizes=(), max_queue_delay_s=0.002, prefetch_depth=1)
    assert batches_in_order(run(slow, prefetch, arrivals)) == [1, 1, 3]
    no_prefetch = dataclasses.replace(prefetch, prefetch_depth=0)
    assert batches_in_order(run(slow, no_prefetch, arrivals)) == [1, 4]


def batches_in_order(sim: FleetSim) -> list[int]:
    done = sim.completed()
    order = np.argsort(done.completion, kind="stable")
    sizes, seen = [], set()
    for c, b in zip(done.completion[order], done.batch_size[order], strict=True):
        if c not in seen:
            seen.add(c)
            sizes.append(int(b))
    return sizes


TRITON = "triton-2.51"


def test_triton_mode_single_request_waits_the_delay() -> None:
    sim = run(FLAT, BatcherConfig(max_queue_delay_s=0.002, scheduler=TRITON), [1.0])
    assert list(sim.completed().batch_size) == [1]
    assert sim.completed().queue[0] == pytest.approx(0.002)


def test_triton_mode_lone_early_request_runs_alone() -> None:
    """The pattern of real Triton traces: while the instance is busy, the first request forms a payload
    once its delay expires; later arrivals only join it in groups of next_preferred, so they wait."""
    slow = ServiceCurve(((1, 0.100), (16, 0.100)), jitter_sigma=0.0)
    cfg = BatcherConfig(max_batch_size=16, preferred_batch_sizes=(8, 16), max_queue_delay_s=0.002,
                        scheduler=TRITON)
    arrivals = [0.0, 0.010, 0.020, 0.030, 0.040]  # 0.0 runs alone; 0.010 forms a payload at 0.012
    sim = run(slow, cfg, arrivals)
    assert batches_in_order(sim) == [1, 1, 3]
    stepped = run(slow, dataclasses.replace(cfg, scheduler="stepped"), arrivals)
    assert batches_in_order(stepped) == [1, 4]


def test_triton_mode_prefetches_no_payload_under_a_queue_timeout() -> None:
    """Triton's queue supports prefetching only without a default timeout; without it a payload slot
    exists only while an instance waits. The lone early request of the test above then does not run
    alone: the batch forms when the instance frees, as in the stepped model."""
    slow = ServiceCurve(((1, 0.100), (16, 0.100)), jitter_sigma=0.0)
    cfg = BatcherConfig(max_batch_size=16, preferred_batch_sizes=(8, 16), max_queue_delay_s=0.002,
                        queue_timeout_s=5.0, scheduler=TRITON)
    sim = run(slow, cfg, [0.0, 0.010, 0.020, 0.030, 0.040])
    assert batches_in_order(sim) == [1, 4] and sim.counters().failures == 0


@settings(max_examples=100, deadline=None)
@given(cfg=configs, arrivals=arrival_lists, replicas=st.integers(1, 3), timeout=st.floats(0.001, 0.5))
def test_triton_mode_under_a_queue_timeout_serves_or_rejects_each_request_once(
        cfg: BatcherConfig, arrivals: np.ndarray, replicas: int, timeout: float) -> None:
    """Nothing waits in a prefetched payload, so no request runs after waiting past its timeout."""
    cfg = dataclasses.replace(cfg, scheduler=TRITON, queue_timeout_s=timeout)
    sim = FleetSim(ServiceCurve.v100().scaled(0.05), cfg, replicas, cold_start_s=0.0, keep_history_s=None)
    sim.offer(arrivals)
    for t in (0.1, 0.25, 10.0):
        sim.advance(t)
    done, c = sim.completed(), sim.counters()
    assert c.requests == len(done) and c.requests + c.failures == len(arrivals) and sim.queue_depth == 0
    assert np.all(done.queue < timeout + 1e-9) and np.all(done.batch_size <= cfg.max_batch_size)


@settings(max_examples=150, deadline=None)
@given(cfg=configs, arrivals=arrival_lists, replicas=st.integers(1, 3), timeout=st.floats(0.005, 0.5))
def test_under_a_queue_timeout_the_triton_model_runs_the_stepped_models_batches(
        cfg: BatcherConfig, arrivals: np.ndarray, replicas: int, timeout: float) -> None:
    """Without prefetching, Triton's batcher forms a batch when an instance frees, as the stepped model
    does: with a timeout longer than the queue delay (where GetDynamicBatch would wake at the timeout
    first) and no two arrivals at once (a tie Triton's threads race on), the two agree request for
    request. So `bench autoscale` under the recommended queue policy runs Triton's batcher exactly."""
    cfg = dataclasses.replace(cfg, prefetch_depth=0, queue_timeout_s=timeout)
    arrivals = np.unique(arrivals)
    runs = []
    for scheduler in SCHEDULERS:
        sim = FleetSim(ServiceCurve.v100().scaled(0.05), dataclasses.replace(cfg, scheduler=scheduler), replicas,
                       cold_start_s=0.0, keep_history_s=None, seed=1)
        sim.offer(arrivals)
        sim.advance(10.0)
        done = sim.completed()
        order = np.argsort(done.arrival)
        runs.append((done.arrival[order].tolist(), done.latency[order].tolist(), done.batch_size[order].tolist(),
                     sim.counters().failures))
    assert runs[0] == runs[1]


def test_triton_mode_merges_once_next_preferred_requests_queue() -> None:
    slow = ServiceCurve(((1, 0.100), (16, 0.100)), jitter_sigma=0.0)
    cfg = BatcherConfig(max_batch_size=16, preferred_batch_sizes=(8, 16), max_queue_delay_s=0.002,
                        scheduler=TRITON)
    # busy from 0.002 to 0.102; a payload of 1 forms at 0.012 (next_preferred was computed as 8 while
    # the payload was empty); the 8th request queued behind it wakes the batcher, which merges all 8.
    arrivals = [0.0, 0.010] + [0.020 + 0.005 * k for k in range(8)]
    sim = run(slow, cfg, arrivals)
    assert batches_in_order(sim) == [1, 9]


@settings(max_examples=100, deadline=None)
@given(cfg=configs, arrivals=arrival_lists, replicas=st.integers(1, 3))
def test_triton_mode_conserves_requests(cfg: BatcherConfig, arrivals: np.ndarray, replicas: int) -> None:
    cfg = dataclasses.replace(cfg, scheduler=TRITON)
    sim = FleetSim(ServiceCurve.v100().scaled(0.05), cfg, replicas, cold_start_s=0.0, keep_history_s=None)
    sim.offer(arrivals)
    for t in (0.1, 0.25, 10.0):
        sim.advance(t)
    done = sim.completed()
    assert sim.counters().requests == len(arrivals) == len(done) and sim.queue_depth == 0
    assert np.array_equal(np.sort(done.arrival), arrivals)
    assert done.batch_size.max() <= cfg.max_batch_size
    assert np.all(done.queue >= 0) and np.all(done.latency > done.queue)


def test_in_flight_looks_past_rejections() -> None:
    """A rejection record after the executing batch must not hide it from least-loaded routing."""
    cfg = BatcherConfig(max_batch_size=1, preferred_batch_sizes=(), max_queue_delay_s=0.0, queue_timeout_s=0.05)
    slow = ServiceCurve(((1, 1.0),), jitter_sigma=0.0)
    sim = FleetSim(slow, cfg, 1, cold_start_s=0.0)
    sim.offer(np.array([0.0, 0.01, 0.02]))  # the first runs 1 s; the others time out behind it
    sim.advance(1.5)  # at 1.0 the scheduler rejects both and starts nothing
    batcher = sim._replicas[0].batcher
    assert batcher.sizes == [1, -2]  # the batch, then the rejection record (not flushed yet)
    assert batcher.in_flight(0.5) == 1  # the batch started at 0 ran until 1.0
    assert sim.counters().failures == 2
