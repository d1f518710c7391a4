"""The recommender's math: rate, look-ahead, queue growth, hysteresis, limits."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.recommend import (
    Observation,
    Recommender,
    RecommenderConfig,
    reachable_under_tolerance,
    replicas_for,
    trend_slope,
)
from tidescale.errors import UsageError

CAP = 100.0


def rec(**kw: float) -> Recommender:
    return Recommender(RecommenderConfig(CAP, **kw))  # type: ignore[arg-type]


def obs(t: float, rate: float, queue: float = 0.0, current: int = 5, ready: int | None = None) -> Observation:
    return Observation(t, rate, queue, current if ready is None else ready, current)


def test_steady_rate_needs_rate_over_capacity_at_utilisation() -> None:
    r = rec()
    for t in range(0, 120, 15):
        out = r.recommend(obs(t, 450.0))
    assert out.desired == math.ceil(450 / (CAP * 0.9))  # 5
    assert out.reason == "rate"


def test_rising_rate_looks_ahead_by_the_cold_start() -> None:
    r = rec(cold_start_s=60.0, lookahead_extra_s=0.0)
    out = None
    for t in range(0, 75, 15):
        out = r.recommend(obs(t, 300.0 + 2.0 * t, current=4))  # +2 req/s per second
    assert out is not None
    assert out.projected_rps == pytest.approx(300 + 2 * 60 + 2 * 60, rel=1e-6)  # now 420, +120 ahead
    assert out.desired == math.ceil(540 / 90)
    assert out.reason == "lookahead"


def test_queue_growth_counts_as_arrivals() -> None:
    """Completions flatten at capacity under overload; the growing queue shows the real demand."""
    r = rec(cold_start_s=0.0, lookahead_extra_s=0.0, drain_s=1e9)
    r.recommend(obs(0, 500.0, queue=0.0, current=5))
    out = r.recommend(obs(15, 500.0, queue=3000.0, current=5))  # +200 req/s unserved
    assert out.desired == math.ceil(700 / 90)


def test_backlog_is_drained_when_configured() -> None:
    r = rec(cold_start_s=0.0, drain_s=10.0, queue_window_s=0.0)
    out = r.recommend(obs(0, 100.0, queue=900.0, current=2))
    assert out.desired == math.ceil((100 + 90) / 90)
    assert out.reason == "queue"


def test_scale_down_waits_for_the_delay_and_the_lower_utilisation() -> None:
    r = rec(down_delay_s=120.0)
    assert r.recommend(obs(0, 900.0, current=10)).desired == 10
    downs = [r.recommend(obs(t, 300.0, current=10)) for t in range(15, 200, 15)]
    held = [d for d in downs if d.desired == 10]
    assert held and held[0].reason == "hold-down"
    final = downs[-1].desired
    assert final == math.ceil(300 / (CAP * 0.8))  # the down threshold, not the up one (4)
    # the first down step comes only once the lower count has sufficed for the whole delay
    first_down = next(i for i, d in enumerate(downs) if d.desired < 10)
    assert (first_down + 1) * 15 >= 120


def test_a_spike_during_hold_down_resets_it() -> None:
    r = rec(down_delay_s=60.0)
    r.recommend(obs(0, 900.0, current=10))
    r.recommend(obs(15, 100.0, current=10))
    r.recommend(obs(30, 100.0, current=10))
    assert r.recommend(obs(45, 1200.0, current=10)).desired > 10
    assert r.recommend(obs(60, 100.0, current=14)).desired == 14


def test_min_and_max() -> None:
    r = rec(min_replicas=2, max_replicas=6)
    assert r.recommend(obs(0, 0.0, current=2)).desired == 2
    out = r.recommend(obs(15, 10_000.0, current=2))
    assert (out.desired, out.reason) == (6, "max")


def test_rejects_nan() -> None:
    with pytest.raises(ValueError, match="finite"):
        rec().recommend(obs(0, float("nan")))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"capacity_rps": 0.0}, "capacity must be > 0"),
    ({"capacity_rps": 10.0, "min_replicas": 5, "max_replicas": 2}, "min replicas <= max"),
    ({"capacity_rps": 10.0, "min_replicas": 0}, ">= 1"),
    ({"capacity_rps": 10.0, "utilisation": 0.5, "down_utilisation": 0.8}, "down_utilisation"),
])
def test_config_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        RecommenderConfig(**kwargs)


def miss(t: float, p99: float, queue: float = 0.0, ready: int = 5) -> Observation:
    return Observation(t, 400.0, queue, ready, 5, p99_s=p99, slo_p99_s=0.5)


def test_capacity_aimd_cuts_on_misses_and_recovers_slowly_within_bounds() -> None:
    r = rec(p99_window_s=60.0)
    r.recommend(miss(0, 2.0))
    assert r.capacity_rps == pytest.approx(90.0)  # multiplicative decrease
    for t in range(15, 900, 15):
        r.recommend(miss(t, 9.0))
    assert r.capacity_rps == pytest.approx(CAP * 0.5)  # bounded below
    r.recommend(miss(900, 0.1))
    assert r.capacity_rps == pytest.approx(CAP * 0.51)  # additive increase
    for t in range(915, 9000, 15):
        r.recommend(miss(t, 0.1))
    assert r.capacity_rps == pytest.approx(CAP)  # never above the profile


@pytest.mark.parametrize("disturbance", [{"queue": 10_000.0}, {"ready": 3}])
def test_misses_explained_by_a_backlog_or_starting_replicas_cut_nothing(disturbance: dict) -> None:
    r = rec(p99_window_s=60.0)
    r.recommend(miss(0, 2.0, **disturbance))
    r.recommend(miss(30, 2.0))  # the P99 window still holds the disturbance
    assert r.capacity_rps == CAP
    r.recommend(miss(75, 2.0))
    assert r.capacity_rps == pytest.approx(90.0)


def test_helpers() -> None:
    assert trend_slope([(0, 1.0)]) == 0.0
    assert trend_slope([(0, 1.0), (10, 21.0)]) == pytest.approx(2.0)
    assert replicas_for(0.0, 10, 0.9) == 0
    assert replicas_for(90.0, 10, 0.9) == 10


@given(st.integers(1, 500), st.integers(1, 500))
@settings(max_examples=200, deadline=None)
def test_reachable_counts_escape_the_dead_band(n: int, d: int) -> None:
    out = reachable_under_tolerance(n, d)
    if d > n:
        assert out >= d and out / n > 1.1
    elif d < n:
        assert out == n or (out == d and d / n < 0.9)
    else:
        assert out == n
