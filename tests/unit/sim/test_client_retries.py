"""Clients that retry refused requests (sim/clients.py): what the fleet counts, what the client sees."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tidescale.contracts.errors import UsageError
from tidescale.sim import BatcherConfig, FleetSim
from tidescale.sim.batcher import SCHEDULERS
from tidescale.sim.clients import CappedSender, ClientRetries, RetryLedger
from tidescale.sim.servicecurve import ServiceCurve

FLAT = ServiceCurve(((1, 0.010), (32, 0.010)), jitter_sigma=0.0)  # batches of 4 in 10 ms: 400 req/s
CFG = BatcherConfig(max_batch_size=4, preferred_batch_sizes=(), max_queue_delay_s=0.001, queue_timeout_s=0.2)
OVERLOAD = np.arange(0.0, 10.0, 1 / 800)  # twice what one replica serves




def overloaded(retries: ClientRetries | None, until: float = 30.0,
               scheduler: str = "stepped") -> tuple[FleetSim, np.ndarray, np.ndarray]:
    """One replica offered OVERLOAD; the client's (first arrival, latency) of every answered request."""
    sim = FleetSim(FLAT, dataclasses.replace(CFG, scheduler=scheduler), 1, cold_start_s=0.0, retries=retries)
    sim.offer(OVERLOAD)
    sim.advance(until)
    done = sim.completed()
    first = sim.first_attempts(done)
    return sim, first, done.completion - first


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_without_retries_every_arrival_is_answered_or_refused_once(scheduler: str) -> None:
    sim, first, _ = overloaded(None, scheduler=scheduler)
    c = sim.counters()
    assert c.requests + c.failures == len(OVERLOAD)
    assert set(first.tolist()) <= set(OVERLOAD.tolist())


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_retries_add_attempts_that_triton_counts_and_serve_more_requests(scheduler: str) -> None:
    plain, plain_first, _ = overloaded(None, scheduler=scheduler)
    sim, first, latency = overloaded(ClientRetries(max_retries=2), scheduler=scheduler)
    c, p = sim.counters(), plain.counters()
    # Every attempt reaches Triton: the refused ones again, as requests or as further rejections.
    assert c.requests + c.failures > len(OVERLOAD)
    assert c.failures > p.failures
    # The client counts each request once, at its first attempt, and at most once answered.
    assert set(first.tolist()) <= set(OVERLOAD.tolist()) and len(set(first.tolist())) == len(first)
    # Both models form a batch from the living requests when an instance frees (Triton prefetches no
    # payload under a queue timeout), so retries answer more requests, not fewer.
    assert len(first) >= len(plain_first)
    # A retried request's latency runs from its first attempt: longer than any attempt's own wait.
    retried = latency[~np.isin(first, plain_first)]
    assert len(retried) and retried.min() > 0.2
    assert len(sim._ledger or []) == 0  # every entry left with its answer or its last refusal


def test_no_ready_replica_refuses_and_the_retry_finds_the_new_one() -> None:
    cfg = BatcherConfig(max_batch_size=4, preferred_batch_sizes=(), max_queue_delay_s=0.001)
    sim = FleetSim(FLAT, cfg, 0, cold_start_s=0.05, retries=ClientRetries(max_retries=3))
    sim.set_replicas(1)  # Ready at 0.05 s
    sim.offer(np.array([0.01]))
    sim.advance(2.0)
    done = sim.completed()
    assert sim.first_attempts(done).tolist() == [0.01]
    assert sim.counters().dropped == 1  # the first attempt found no endpoint


def test_a_request_out_of_retries_is_lost() -> None:
    sim = FleetSim(FLAT, CFG, 0, cold_start_s=0.0, retries=ClientRetries(max_retries=2))
    sim.offer(np.array([0.5]))
    sim.advance(5.0)
    assert len(sim.completed()) == 0 and sim.counters().dropped == 3 and len(sim._ledger or []) == 0


def test_zero_retries_is_the_plain_fleet() -> None:
    _, a_first, a_lat = overloaded(None)
    _, b_first, b_lat = overloaded(ClientRetries(max_retries=0))
    assert np.array_equal(a_first, b_first) and np.array_equal(a_lat, b_lat)


def test_retry_times_are_unique_sorted_and_never_before_now() -> None:
    ledger = RetryLedger(ClientRetries(max_retries=1), seed=0)
    attempts = np.array([1.0, 1.0 + 1e-12, 2.0, 3.0])
    out = ledger.refused(attempts, np.array([5.0, 5.0, 5.0, 5.0]), now=10.0)  # found late: all at now
    assert out.tolist() == sorted(set(out.tolist())) and out.min() >= 10.0 and len(ledger) == 4
    assert sorted(ledger.first_attempts(out).tolist()) == attempts.tolist() and len(ledger) == 0
    again = ledger.refused(attempts, attempts, now=10.0)
    assert len(ledger.refused(again, again, now=11.0)) == 0 and len(ledger) == 0  # out of retries


@pytest.mark.parametrize("kwargs", [{"max_retries": -1}, {"max_retries": 11}, {"base_s": 0.0},
                                    {"base_s": 1.0, "max_s": 0.5}, {"base_s": float("nan")}])
def test_bad_retry_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(UsageError):
        ClientRetries(**kwargs)  # type: ignore[arg-type]


def _capped_run(rate: float, cap: int) -> tuple[CappedSender, np.ndarray, np.ndarray]:
    from tidescale.sim.clients import CappedSender, OpenRequestCap

    no_timeout = BatcherConfig(max_batch_size=4, preferred_batch_sizes=(), max_queue_delay_s=0.001)
    sim = FleetSim(FLAT, no_timeout, 1, cold_start_s=0.0)  # 400 req/s
    arrivals = np.arange(0.0, 20.0, 1.0 / rate)
    sender = CappedSender(OpenRequestCap(cap), arrivals)
    sender.offer_until(sim, 20.0, sim.advance)
    sim.advance(200.0)
    done = sim.completed()
    return sender, done.arrival, done.latency


def test_capped_clients_send_everything_a_fleet_keeps_up_with() -> None:
    sender, arrival, _ = _capped_run(rate=5.0, cap=8)
    assert sender.not_sent == 0 and sender.sent == len(arrival) == 100


def test_capped_clients_drop_what_is_due_while_the_cap_is_open_and_bound_the_wait() -> None:
    capped, arrival, latency = _capped_run(rate=800.0, cap=8)
    assert capped.not_sent > 0 and capped.sent + capped.not_sent == 16_000
    assert len(arrival) == capped.sent
    _, _, unbounded = _capped_run(rate=800.0, cap=100_000)
    # a request waits behind at most the cap (and a batch in service): far below the unbounded queue
    assert latency.max() < 0.1 * unbounded.max()


def test_a_cap_below_one_is_refused() -> None:
    from tidescale.sim.clients import OpenRequestCap

    with pytest.raises(UsageError, match="open requests must be >= 1"):
        OpenRequestCap(0)
    with pytest.raises(UsageError, match="step must be > 0"):
        OpenRequestCap(4, step_s=float("nan"))
