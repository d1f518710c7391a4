"""Burst sizing: the margin over the smoothed rate a fleet needs for the bursts the fast path read."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.autoscaler.burst import (
    MAX_READINGS,
    MIN_SPAN_S,
    BurstProfile,
    burst_factor,
    late_share,
    level_means,
)
from tidescale.autoscaler.recommend import Observation, Recommender, RecommenderConfig
from tidescale.autoscaler.settings import RecommenderTuning
from tidescale.contracts.errors import UsageError


def readings(rates: list[float], step: float = 2.0) -> list[tuple[float, float]]:
    return [(step * (i + 1), r) for i, r in enumerate(rates)]


def poisson_like(mean: float, n: int, seed: int) -> list[float]:
    """2 s readings of a Poisson stream at *mean* req/s (normal approximation)."""
    rng = random.Random(seed)
    return [max(0.0, rng.gauss(mean, math.sqrt(mean / 2))) for _ in range(n)]


def bursty(mean: float, n: int, seed: int, every: int = 15, height: float = 1.6) -> list[float]:
    """The same with a 2 s burst to *height* x the mean every *every* readings."""
    return [r * (height if i % every == 0 else 1.0) for i, r in enumerate(poisson_like(mean, n, seed))]


def test_a_smooth_stream_needs_almost_no_margin_and_a_bursty_one_needs_more() -> None:
    smooth = burst_factor(readings(poisson_like(1500.0, 300, 1)), 60.0, 0.1, 0.001, 2.0)
    spiky = burst_factor(readings(bursty(1500.0, 300, 1)), 60.0, 0.1, 0.001, 2.0)
    assert smooth is not None and spiky is not None
    assert smooth < 1.05  # what the fixed 0.9 gives is 1.11
    assert spiky > 1.2  # a 60 % burst for 2 s: 1.2 s of work at f = 1
    # The more late arrivals allowed, or the longer they may wait, the smaller the margin.
    assert burst_factor(readings(bursty(1500.0, 300, 1)), 60.0, 0.5, 0.001, 2.0) < spiky
    assert burst_factor(readings(bursty(1500.0, 300, 1)), 60.0, 0.1, 0.1, 2.0) < spiky


def test_a_trend_is_not_a_burst() -> None:
    """The projection follows a ramp; only the swings above its level need standing capacity."""
    ramp = [500.0 + 5.0 * i for i in range(300)]  # 500 -> 2000 req/s over ten minutes, no noise
    assert burst_factor(readings(ramp), 60.0, 0.1, 0.001, 2.0) == pytest.approx(1.0, abs=0.01)
    assert burst_factor(readings(ramp[::-1]), 60.0, 0.1, 0.001, 2.0) == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("height", [10.0, 0.1, 3.0])
def test_a_step_to_a_new_level_is_not_a_burst(height: float) -> None:
    """A flash crowd that stays (10x), a drop (0.1x), a surge (3x): the fleet follows the new level; it
    does not carry the step as a margin for the ten minutes the step stays in the window (against a
    centred mean, the 10x step read as a burst of 2x and sized the fleet at the factor's cap)."""
    rates = [800.0] * 150 + [800.0 * height] * 150
    assert burst_factor(readings(rates), 60.0, 0.25, 0.01, 2.0) == pytest.approx(1.0, abs=1e-6)
    noisy = [r * n / 800.0 for r, n in zip(rates, poisson_like(800.0, 300, 7), strict=True)]
    assert (burst_factor(readings(noisy), 60.0, 0.25, 0.01, 2.0) or 9) < 1.05
    spiky = [r * b / 800.0 for r, b in zip(rates, bursty(800.0, 300, 7), strict=True)]
    assert (burst_factor(readings(spiky), 60.0, 0.1, 0.001, 2.0) or 0) > 1.2  # its bursts still count


def test_a_level_is_the_larger_side_and_a_burst_stands_above_both() -> None:
    rates = [1.0] * 10 + [5.0] + [1.0] * 10  # one reading's burst
    levels = level_means(rates, 3)
    assert levels[10] == 1.0  # neither side holds it: it reads at its full 5x
    assert levels[9] == levels[11] == pytest.approx(7 / 3)  # its neighbours see it on one side
    assert level_means([1.0] * 5 + [4.0] * 5, 2) == [1.0, 1.0, 1.0, 2.5, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    assert level_means([3.0], 2) == [3.0]  # alone: itself


def test_the_factor_waits_for_two_minutes_of_readings_and_stays_within_its_bounds() -> None:
    short = readings(bursty(1000.0, int(MIN_SPAN_S / 2) - 1, 2))
    assert burst_factor(short, 60.0, 0.1, 0.001, 2.0) is None
    assert burst_factor([], 60.0, 0.1, 0.001, 2.0) is None
    assert burst_factor(readings([0.0] * 100), 60.0, 0.1, 0.001, 2.0) is None  # no arrivals: no answer
    wild = readings([5000.0 if i % 3 == 0 else 0.0 for i in range(200)])
    assert burst_factor(wild, 60.0, 0.0, 0.0, 1.7) == 1.7  # capped: a bound, not an ask for everything


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=3, max_size=120),
       st.floats(min_value=0, max_value=2), st.floats(min_value=0, max_value=0.5))
def test_the_factor_is_the_smallest_one_that_meets_the_share(rates: list[float], delay: float, share: float) -> None:
    factor = burst_factor(readings(rates), 20.0, delay, share, 3.0)
    if factor is None:
        return
    assert 1.0 <= factor <= 3.0
    means = level_means(rates, 5)
    pairs = [(r / m, 2.0) for r, m in zip(rates[1:], means[1:], strict=True) if m > 0]
    ratios, dts = [r for r, _ in pairs], [d for _, d in pairs]
    if factor < 3.0:
        assert late_share(ratios, dts, factor, delay) <= share + 1e-12
    if factor > 1.0:
        assert late_share(ratios, dts, max(1.0, factor - 1e-3), delay) > share - 1e-12


def test_the_profile_forgets_old_readings_and_skips_bad_ones() -> None:
    profile = BurstProfile(window_s=300.0, smooth_s=60.0, share=0.001, max_factor=2.0, refresh_s=0.0)
    for t, r in readings(bursty(1000.0, 150, 3)):
        profile.add(t, r)
    assert (profile.factor(300.0, 0.1) or 0) > 1.2
    for bad in (None, math.nan, math.inf, -1.0):
        profile.add(400.0, bad)
    profile.add(299.0, 1000.0)  # out of order: skipped
    for t, r in readings(poisson_like(1000.0, 150, 4)):
        profile.add(300.0 + t, r)  # five minutes of calm push the bursts out
    assert (profile.factor(600.0, 0.1) or 9) < 1.06
    endless = BurstProfile(window_s=1e12, smooth_s=60.0, share=0.01, max_factor=2.0)
    for k in range(MAX_READINGS + 500):
        endless.add(float(k), 100.0)
    assert len(endless._samples) == MAX_READINGS  # a window no one meant stays bounded


def calm(t: float, rps: float, replicas: int) -> Observation:
    return Observation(t, arrival_rps=rps, queue_depth=0.0, ready_replicas=replicas, current_replicas=replicas,
                       p99_s=0.1, slo_latency_threshold_s=0.5, fast_arrival_rps=rps)


def test_burst_sizing_sizes_a_smooth_stream_thinner_and_a_bursty_one_fatter_than_the_fixed_share() -> None:
    """1,000 req/s on replicas of 100: the fixed 0.9 asks 12; a smooth stream needs 11, one with 2 s
    bursts of 60 % every 30 s more than 12. Before two minutes of readings, the fixed share."""
    def asked(rates: list[float], sizing: str) -> int:
        rec = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, sizing=sizing))
        for t, r in readings(rates):
            rec.record_interval(t, r)
        return rec.recommend(calm(2.0 * len(rates), 1000.0, 10)).desired

    assert asked(poisson_like(1000.0, 150, 5), "fixed") == 12
    assert asked(poisson_like(1000.0, 150, 5), "burst") == 11
    assert asked(bursty(1000.0, 150, 5), "burst") > 12
    assert asked(bursty(1000.0, 20, 5), "burst") == 12  # 40 s of readings: the fixed share still


def test_the_panic_acts_past_the_share_the_sizing_lets_the_fleet_carry() -> None:
    """Burst sizing carries a smooth stream at the full capacity: 930 req/s on 10 replicas of 100 is
    no overload for it, where the fixed 0.9 panics; past all of their capacity both do."""
    def panics(sizing: str, rps: float) -> bool:
        rec = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, sizing=sizing))
        for t, r in readings(poisson_like(930.0, 150, 13)):
            rec.record_interval(t, r)
        return rec.panic(300.0, rps, 10) is not None

    assert panics("fixed", 930.0) and not panics("burst", 930.0)
    assert panics("fixed", 1050.0) and panics("burst", 1050.0)


def test_burst_sizing_is_a_setting_and_bad_values_are_refused() -> None:
    assert RecommenderTuning().sizing == "fixed"  # shipped: the fixed share (docs/autoscaler.md says why)
    assert RecommenderTuning(sizing="burst").sizing == "burst"
    with pytest.raises(ValueError, match="sizing"):
        RecommenderTuning(sizing="magic")  # type: ignore[arg-type]
    for bad in ({"sizing": "magic"}, {"burst_late_share": 1.0}, {"max_burst_factor": 0.5},
                {"burst_window_s": 0.0}, {"burst_delay_ratio": -1.0}):
        with pytest.raises(UsageError):
            RecommenderConfig(capacity_rps=1.0, **bad)  # type: ignore[arg-type]


def test_the_burst_margin_and_the_trend_are_not_multiplied() -> None:
    """A ramp to 1,500 req/s over the lookahead on a bursty stream: the fleet carries the larger of the
    projection and the rate x the margin (15 of 100 req/s), not both at once (19 or more): a bursty
    trace's swings are what tilts its trend."""
    rec = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, sizing="burst", cold_start_s=60.0,
                                        lookahead_extra_s=30.0, trend_window_s=30.0, trend_cap=2.0))
    for t, r in readings(bursty(1000.0, 150, 6)):
        rec.record_interval(t, r)
    margin, up_share, down_share = rec.sizing(300.0)
    assert margin > 1.2 and up_share == down_share == 1.0
    answers = [rec.recommend(calm(t, rps, 12)).desired for t, rps in ((270.0, 1000 - 500 / 3), (285.0, 1000 - 250 / 3),
                                                                      (300.0, 1000.0))]
    assert rec.last is not None and rec.last.projected_rps == pytest.approx(1500.0)
    assert answers[-1] == 15 and answers[-1] < math.ceil(1500.0 * margin / 100.0)
