"""The recommender's math: rate, look-ahead, queue growth, hysteresis, limits."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.autoscaler.events import observation_detail
from tidescale.autoscaler.recommend import (
    WINDOW_READINGS,
    Observation,
    Recommendation,
    Recommender,
    RecommenderConfig,
    drain_replicas,
    queue_growth,
    reachable_under_tolerance,
    replicas_for,
    trend_slope,
)
from tidescale.contracts.errors import UsageError

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
        out = r.recommend(obs(t, 300.0 + 1.0 * t, current=4))  # +1 req/s per second
    assert out is not None
    assert out.projected_rps == pytest.approx(300 + 60 + 60, rel=1e-6)  # now 360, +60 ahead (under the cap)
    assert out.desired == math.ceil(420 / 90) > math.ceil(360 / 90)
    assert out.reason == "lookahead"


def test_a_step_is_projected_at_most_trend_cap_times_the_rate() -> None:
    """After a step, the 30 s trend is a steep ramp; over a 90 s lookahead it meant max_replicas."""
    capped, free = rec(max_replicas=200), rec(max_replicas=200, trend_cap=math.inf)
    for r in (capped, free):
        r.recommend(obs(0, 300.0, current=4))
        r.recommend(obs(15, 3000.0, current=4))
    assert capped.last is not None and free.last is not None
    cap = capped.config.trend_cap
    assert 1 < cap < 2 and capped.last.projected_rps == pytest.approx(3000.0 * cap)
    assert free.last.projected_rps == pytest.approx(3000 + 180 * 90)  # 180 req/s per second, 90 s ahead
    assert capped.last.desired == math.ceil(3000 * cap / 90) < free.last.desired


def test_an_unshed_backlog_projects_under_the_panics_cap() -> None:
    """A pod backlog with nothing rejected outlives the surge (no queue policy): the slow path's
    projection takes the panic's cap. Rejections within the trend window mean a policy sheds it."""
    def step(rejected_at_0: float, pod_queue: float) -> Recommendation:
        r = rec(max_replicas=200)
        for t, rate, rejected in ((0, 300.0, rejected_at_0), (15, 3000.0, 0.0)):
            last = r.recommend(Observation(t, rate, 100.0, 4, 4, slo_latency_threshold_s=0.5,
                                           max_pod_queue=pod_queue, rejected_rps=rejected))
        return last
    cfg = RecommenderConfig(CAP)
    assert cfg.trend_cap < cfg.panic_trend_cap
    lifted = step(0.0, 500.0)  # 500 queued, 50 served within the SLO
    assert lifted.projected_rps == pytest.approx(3000 * cfg.panic_trend_cap)
    assert lifted.lifted_trend_cap == cfg.panic_trend_cap
    for capped in (step(1.0, 500.0), step(0.0, 50.0)):  # shed 15 s ago; no backlog beyond the SLO
        assert capped.projected_rps == pytest.approx(3000 * cfg.trend_cap)
        assert capped.lifted_trend_cap is None
    # The Event puts the cause beside a count sized for twice the rate read.
    seen = Observation(15, 3000.0, 100.0, 4, 4)
    assert "the trend cap lifted to x2: a pod holds a backlog that no queue policy sheds" in \
        observation_detail(seen, CAP, lifted.projected_rps, lifted.lifted_trend_cap)
    assert "lifted" not in observation_detail(seen, CAP, lifted.projected_rps)


def test_queue_growth_counts_as_arrivals() -> None:
    """Completions flatten at capacity under overload; the growing queue shows the real demand."""
    r = rec(cold_start_s=0.0, lookahead_extra_s=0.0, drain_s=1e9)
    r.recommend(obs(0, 500.0, queue=0.0, current=5))
    out = r.recommend(obs(15, 500.0, queue=3000.0, current=5))  # +200 req/s unserved
    assert out.desired == math.ceil(700 / 90)


def test_rejected_requests_count_as_arrivals() -> None:
    """With a queue timeout the queue stays bounded and the overflow shows only as REJECTED failures."""
    out = rec().recommend(Observation(0, 500.0, 0.0, 5, 5, rejected_rps=400.0))
    assert out.desired == math.ceil(900 / 90)
    fast = rec().recommend(Observation(0, 500.0, 0.0, 5, 5, fast_arrival_rps=500.0, rejected_rps=0.0,
                                       fast_rejected_rps=400.0))
    assert fast.desired == math.ceil(900 / 90)  # the short window's rejections read the jump


def test_headroom_sizes_for_a_multiple_of_the_load() -> None:
    r = rec(headroom=2.0)
    for t in range(0, 120, 15):
        out = r.recommend(obs(t, 450.0, current=10))
    assert out.desired == math.ceil(2 * 450 / 90)  # 10: the standing count holds the fleet there


def test_headroom_multiplies_the_recent_floor_not_the_surge() -> None:
    """Spare replicas are for the jump a surge starts from; once a surge is being served, sizing it
    x headroom again would double the bill exactly when the load is highest."""
    r = rec(headroom=2.0, cold_start_s=0.0, lookahead_extra_s=0.0)
    for t in range(0, 600, 15):
        r.recommend(obs(t, 450.0, current=10))
    out = r.recommend(obs(600, 1350.0, current=10))
    assert out.desired == math.ceil(1350 / 90)  # 15, not 30
    for t in range(615, 1300, 15):  # the surge outlasts the window: it becomes the floor
        out = r.recommend(obs(t, 1350.0, current=out.desired))
    assert out.desired == math.ceil(2 * 1350 / 90)
    assert r.recent_floor(1300, 100.0) == 100.0  # a lower rate is the new floor at once


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


@pytest.mark.parametrize("spike", [False, True])
def test_a_long_down_delay_at_a_short_interval_still_elapses_and_holds_what_it_saw(spike: bool) -> None:
    """A half-hour down delay evaluated every second: 1,800 candidates, where a deque capped at 512
    never spanned the delay and the fleet never scaled down. Thinned, it scales down at most a
    spacing (delay / WINDOW_READINGS) later than every candidate kept would, and one evaluation's
    jump (600 req/s at t = 100, which the trend projects to the whole fleet) still holds the fleet
    until it leaves the delay."""
    r = rec(down_delay_s=1800.0)
    r.recommend(obs(0, 900.0, current=10))
    desired = {t: r.recommend(obs(t, 600.0 if spike and t == 100 else 300.0, current=10)).desired
               for t in range(1, 2001)}
    first_down = min(t for t, d in desired.items() if d < 10)
    if spike:
        assert first_down > 1900
    else:
        assert 1800 <= first_down <= 1800 + 1800 / WINDOW_READINGS + 1
    assert desired[2000] == math.ceil(300 / (CAP * 0.8))
    assert len(r._down_candidates) <= 2 * WINDOW_READINGS + 1


def test_a_spike_during_hold_down_resets_it() -> None:
    r = rec(down_delay_s=60.0)
    r.recommend(obs(0, 900.0, current=10))
    r.recommend(obs(15, 100.0, current=10))
    r.recommend(obs(30, 100.0, current=10))
    spike = r.recommend(obs(45, 1200.0, current=10)).desired
    assert spike > 14
    # The HPA has applied part of it: the answer holds what was asked (no scale-down before the delay).
    held = r.recommend(obs(60, 100.0, current=14))
    assert (held.desired, held.reason) == (spike, "hold-down")


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
    ({"capacity_rps": 10.0, "pod_drain_s": 0.0}, "drain times > 0"),
    ({"capacity_rps": 10.0, "max_drain_factor": 0.5}, "drain factor >= 1"),
    ({"capacity_rps": 10.0, "headroom": 0.9}, "headroom must be a finite factor >= 1"),
    ({"capacity_rps": 10.0, "headroom": math.inf}, "headroom must be a finite factor >= 1"),
    ({"capacity_rps": 10.0, "headroom_window_s": 0.0}, "headroom_window_s must be > 0"),
])
def test_config_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        RecommenderConfig(**kwargs)


def miss(t: float, p99: float, queue: float = 0.0, ready: int = 5) -> Observation:
    return Observation(t, 400.0, queue, ready, 5, p99_s=p99, slo_latency_threshold_s=0.5)


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


@pytest.mark.parametrize(("disturbance", "cut_to"), [
    # The 80 req/s each of the 5 replicas served for a whole rate window while missing the SLO is
    # more than they carry within it (their ceiling): a deeper cut than 10 %.
    ({"queue": 10_000.0}, 80.0),
    # 133 req/s on each of 3 Ready replicas, then 80 on 5: no plateau, the 10 % step alone.
    ({"ready": 3}, 90.0),
])
def test_misses_explained_by_a_backlog_or_starting_replicas_cut_nothing(disturbance: dict, cut_to: float) -> None:
    r = rec(p99_window_s=60.0)
    r.recommend(miss(0, 2.0, **disturbance))
    r.recommend(miss(30, 2.0))  # the P99 window still holds the disturbance
    assert r.capacity_rps == CAP
    r.recommend(miss(75, 2.0))
    assert r.capacity_rps == pytest.approx(cut_to)


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


@pytest.mark.parametrize(("rate", "backlog", "horizon", "expected"), [
    (2400.0, 0.0, 240.0, 0),  # no backlog: no drain term
    (2400.0, 12000.0, math.inf, 0),  # drain off
    (2400.0, 12000.0, 240.0, 48),  # 100 - 50 spare per pod: 2400 / 50 = 48 -> capped below
    (600.0, 12000.0, 240.0, 12),  # 600 / 50
    (600.0, 6000.0, 120.0, 12),  # same spare (50 req/s)
    (600.0, 24000.0, 240.0, 40),  # backlog / horizon = capacity: cannot clear, the maximum
    (0.0, 5000.0, 240.0, 0),
])
def test_drain_replicas_divert_arrivals_from_a_backlogged_pod(rate: float, backlog: float, horizon: float,
                                                               expected: int) -> None:
    assert drain_replicas(rate, backlog, CAP, horizon, max_replicas=40) == min(expected, 40)


@pytest.mark.parametrize(("samples", "window", "expected"), [
    ([], 30.0, 0.0),
    ([(0.0, 5.0)], 30.0, 0.0),
    ([(0.0, 0.0), (15.0, 150.0), (30.0, 600.0)], 45.0, 20.0),  # endpoints, not a fit
    ([(0.0, 0.0), (15.0, 150.0), (30.0, 600.0)], 30.0, 30.0),  # left-open: the sample at t - 30 is out
    ([(0.0, 0.0), (15.0, 150.0), (30.0, 600.0)], 15.0, 0.0),  # one sample: no change to read
    ([(0.0, 900.0), (30.0, 0.0)], 60.0, -30.0),  # a draining queue reads negative
])
def test_queue_growth_over_a_window(samples: list[tuple[float, float]], window: float, expected: float) -> None:
    assert queue_growth(samples, window) == pytest.approx(expected)


def test_short_window_counts_only_when_it_reads_a_jump() -> None:
    r = rec(cold_start_s=0.0, lookahead_extra_s=0.0, fast_jump=1.1)
    out = None
    for t in (0, 15, 30):
        out = r.recommend(Observation(t, 400.0, 0.0, 5, 5, fast_arrival_rps=420.0))  # +5 %: noise
    assert out is not None and out.projected_rps == pytest.approx(400.0)
    out = r.recommend(Observation(45, 400.0, 0.0, 5, 5, fast_arrival_rps=480.0))  # +20 %: a surge
    assert out.projected_rps >= 480.0


def test_fast_estimate_matches_the_queue_window() -> None:
    """A draining backlog's completions are not arrivals: completions + the queue's change."""
    r = rec(cold_start_s=0.0, lookahead_extra_s=0.0, rate_window_s=60.0, fast_window_s=30.0)
    r.recommend(Observation(0, 500.0, 6000.0, 5, 5, fast_arrival_rps=500.0))
    r.recommend(Observation(15, 500.0, 6000.0, 5, 5, fast_arrival_rps=500.0))
    out = r.recommend(Observation(30, 500.0, 3000.0, 5, 5, fast_arrival_rps=700.0))  # 700 done, 200/s from the queue
    assert out.projected_rps == pytest.approx(500.0)


def _falling(fast_lead: bool) -> int:
    """Seconds until the first scale-down when the load falls from 900 to 300 req/s at t=0: the
    long window reads the fall over 60 s; the short one (with *fast_lead*) over 30 s."""
    r = rec(down_delay_s=60.0)
    r.recommend(Observation(-15, 900.0, 0.0, 10, 10, fast_arrival_rps=900.0 if fast_lead else None))
    for t in range(0, 300, 5):
        slow = 900.0 - 600.0 * min(t, 60) / 60
        fast = 900.0 - 600.0 * min(t, 30) / 30
        out = r.recommend(Observation(t, slow, 0.0, 10, 10, fast_arrival_rps=fast if fast_lead else None))
        if out.desired < 10:
            return t
    raise AssertionError("never scaled down")


def test_scale_down_follows_the_short_windows_reading_of_a_fall() -> None:
    """The lower of the two windows' rates decides scale-down: the short one reads a fall sooner.
    Scale-up still takes the long window unless the short one reads a jump."""
    assert _falling(fast_lead=True) < _falling(fast_lead=False)
    r = rec(down_delay_s=60.0)
    assert r.recommend(Observation(0, 900.0, 0.0, 10, 10, fast_arrival_rps=300.0)).desired == 10  # up: 900


def test_a_dip_in_the_short_window_within_the_down_delay_does_not_scale_down() -> None:
    r = rec(down_delay_s=60.0)
    for t in range(0, 120, 5):
        fast = 300.0 if 30 <= t < 60 else 900.0  # a 30 s lull, then back
        assert r.recommend(Observation(t, 900.0, 0.0, 10, 10, fast_arrival_rps=fast)).desired == 10


def test_a_backlogged_pod_asks_for_replicas_that_divert_its_arrivals() -> None:
    r = rec(cold_start_s=0.0, lookahead_extra_s=0.0, pod_drain_s=100.0, max_replicas=40)
    out = r.recommend(Observation(0, 300.0, 5000.0, 3, 3, slo_latency_threshold_s=0.5, max_pod_queue=5050.0))
    # worst pod 5050 - 50 served within the SLO = 5000 -> 50 req/s to spare -> 300 / 50 = 6
    assert out.desired == 6 and out.reason == "drain"
    even = rec(cold_start_s=0.0, lookahead_extra_s=0.0, pod_drain_s=100.0, max_replicas=40)
    assert even.recommend(Observation(0, 300.0, 15150.0, 3, 3,
                                      slo_latency_threshold_s=0.5)).desired == 6  # queue / ready


def test_the_drain_term_at_most_doubles_the_rates_need() -> None:
    """A backlog no count can clear within the horizon asks for at most max_drain_factor × the rate's need."""
    r = rec(cold_start_s=0.0, lookahead_extra_s=0.0, pod_drain_s=100.0, max_replicas=40, max_drain_factor=2.0)
    out = r.recommend(Observation(0, 300.0, 60000.0, 3, 3, slo_latency_threshold_s=0.5, max_pod_queue=20000.0))
    assert out.desired == 2 * math.ceil(300 / 90) and out.reason == "drain"


def test_scale_down_happens_when_evaluations_drift_by_milliseconds() -> None:
    """A real clock never ticks exactly `interval` apart; the hold-down window must still elapse."""
    r = Recommender(RecommenderConfig(capacity_rps=40.0, min_replicas=1, max_replicas=4, down_delay_s=30.0))
    t, desired = 1000.0, 4
    for _ in range(12):
        t += 5.013  # a 5 s loop whose Prometheus queries take 13 ms
        desired = r.recommend(Observation(t, 0.0, 0.0, 4, 4, None, 0.5)).desired
    assert desired == 1


def test_crash_looping_pods_are_not_counted_as_serving_and_go_with_a_scale_down() -> None:
    """With `replace_crash_looping`, 450 req/s needs 5 serving replicas; with 2 of the 5 crash-looping,
    7 are asked for (`replace`), none are let go while they loop, and once the ReplicaSet has deleted
    them the scale-down's own need (at 0.8 utilisation) is all that stays."""
    r = rec(down_delay_s=0.0, replace_crash_looping=True)
    assert r.recommend(obs(0, 450.0)).desired == 5
    looping = Observation(15, 450.0, 0.0, 3, 5, crash_looping_pods=2)
    out = r.recommend(looping)
    assert (out.desired, out.reason) == (7, "replace")
    assert "2 pod(s) crash-looping" in observation_detail(looping, out.capacity_rps)
    assert r.recommend(Observation(30, 450.0, 0.0, 5, 7, crash_looping_pods=2)).desired == 7  # no scale-down
    assert r.recommend(Observation(45, 450.0, 0.0, 5, 5)).desired == math.ceil(450 / (CAP * 0.8))  # 6: no allowance
    # more crash-looping pods than replicas read (a lagging count) add no more than the replicas
    assert rec(replace_crash_looping=True).recommend(Observation(0, 90.0, 0.0, 0, 2, crash_looping_pods=9)).desired \
        == 1 + 2


def test_crash_looping_pods_are_replaced_by_default_and_count_as_serving_when_that_is_off() -> None:
    assert rec().recommend(Observation(15, 450.0, 0.0, 3, 5, crash_looping_pods=2)).desired == 7
    r = rec(replace_crash_looping=False)
    r.recommend(obs(0, 450.0))
    out = r.recommend(Observation(15, 450.0, 0.0, 3, 5, crash_looping_pods=2))
    assert (out.desired, out.reason) == (5, "rate")


def test_crash_looping_pods_are_replaced_only_as_far_as_the_rest_fall_short_at_full_capacity() -> None:
    """400 req/s needs 5 replicas at 0.9 of their capacity, 4 at all of it: with 2 of 6 looping, the 4
    left carry it, so no more are asked for (one per looping pod asked for 7); with 3 of 6, one more."""
    r = rec()
    r.recommend(obs(0, 400.0, current=6))
    out = r.recommend(Observation(15, 400.0, 0.0, 4, 6, crash_looping_pods=2))
    assert out.desired == 6 and out.reason != "replace"
    out = r.recommend(Observation(30, 400.0, 0.0, 3, 6, crash_looping_pods=3))
    assert (out.desired, out.reason) == (7, "replace")


def test_a_fleet_with_room_for_its_crash_looping_pods_asks_for_no_more() -> None:
    r = rec(replace_crash_looping=True)
    r.recommend(obs(0, 180.0, current=6))  # 2 would do
    out = r.recommend(Observation(15, 180.0, 0.0, 4, 6, crash_looping_pods=2))
    assert out.desired == 6 and out.reason != "replace"  # 2 + 2 <= 6: a hold (the down delay), nothing new
