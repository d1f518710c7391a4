"""A steady fall lifts the hold-down and the band; a lull, a flat or a bursty rate does not (falls.py)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.autoscaler.decisions import DECISIONS, decision
from tidescale.autoscaler.falls import line_fit, steady_fall
from tidescale.autoscaler.recommend import WINDOW_READINGS, Observation, Recommender, RecommenderConfig
from tidescale.autoscaler.settings import RecommenderTuning
from tidescale.contracts.errors import UsageError

WINDOW = 240.0
Rate = Callable[[float], float]


def every_15s(rate: Rate, start: float = 0.0, end: float = WINDOW) -> list[tuple[float, float]]:
    return [(start + 15.0 * i, rate(start + 15.0 * i)) for i in range(int((end - start) / 15.0) + 1)]


def test_the_line_is_the_least_squares_one() -> None:
    """The trend and the fall read the same fit: an exact line fits fully, a flat rate has a zero
    slope and no fit, and times that do not spread define no line at all."""
    line = line_fit([(0.0, 10.0), (10.0, 30.0), (20.0, 50.0)])
    assert line is not None
    assert (line.slope, line.mean, line.fit) == pytest.approx((2.0, 30.0, 1.0))
    flat = line_fit([(0.0, 5.0), (15.0, 5.0), (30.0, 5.0)])
    assert flat is not None and (flat.slope, flat.fit) == (0.0, 0.0)
    step = line_fit([(0.0, 0.0), (1.0, 0.0), (2.0, 0.0), (3.0, 1.0)])  # a step at the end, as a lull's
    assert step is not None and step.fit == pytest.approx(0.6)
    assert line_fit([(3.0, 1.0)]) is None
    assert line_fit([(3.0, 1.0), (3.0, 2.0)]) is None


def test_a_days_fall_is_a_fall() -> None:
    """20 % down over four minutes, with the rate window's noise of a few req/s."""
    noise = random.Random(1)
    assert steady_fall(every_15s(lambda t: 1000.0 - 0.8 * t + noise.uniform(-5, 5)), WINDOW, 0.9)


@pytest.mark.parametrize("shape", [
    lambda t: 1000.0,  # flat
    lambda t: 1000.0 + 0.8 * t,  # rising
    lambda t: 1000.0 - (1000.0 - 350.0) * min(1.0, max(0.0, t - 180.0) / 60.0),  # a lull's first minute
    lambda t: 1000.0 - 0.1 * t,  # a perfect line that falls 2.4 % over the window
])
def test_a_flat_rising_or_stepping_rate_is_not_a_fall(shape: Rate) -> None:
    assert not steady_fall(every_15s(shape), WINDOW, 0.9)


def test_a_bursty_trace_that_drifts_down_is_not_a_steady_fall() -> None:
    """A 10 % drift under swings of ±25 %: falling on average, far from a line."""
    noise = random.Random(7)
    assert not steady_fall(every_15s(lambda t: 1000.0 - 0.4 * t + noise.uniform(-250, 250)), WINDOW, 0.9)


def test_a_fall_must_span_the_window() -> None:
    line = every_15s(lambda t: 1000.0 - 0.8 * t)
    assert steady_fall(line, WINDOW, 0.9)
    assert not steady_fall(line[len(line) // 2:], WINDOW, 0.9)  # two minutes of it
    assert not steady_fall(line[:3], 30.0, 0.9)  # three readings always fit


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e6), min_size=0, max_size=40), st.floats(0.01, 1.0))
def test_a_rate_that_never_drops_is_never_a_fall(values: list[float], fit: float) -> None:
    rising = sorted(values)
    assert not steady_fall([(15.0 * i, v) for i, v in enumerate(rising)], 15.0 * max(1, len(rising) - 1), fit)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e6), min_size=0, max_size=40), st.floats(1.0, 1e4), st.floats(0.01, 1.0))
def test_a_fall_is_a_shape_not_a_level(values: list[float], window: float, fit: float) -> None:
    """Any readings give an answer, and the same one at twice or half the rate (exact in floating point)."""
    def fall(scale: float) -> bool:
        return steady_fall([(15.0 * i, scale * v) for i, v in enumerate(values)], window, fit)

    assert fall(1.0) is fall(2.0) is fall(0.5)


def fleet_on(rate: Rate, config: RecommenderConfig, end: float) -> list[tuple[float, int, str]]:
    """(t, desired, decision) every 15 s, the fleet applying each answer at once."""
    rec, replicas = Recommender(config), 10
    out: list[tuple[float, int, str]] = []
    t = 0.0
    while t <= end:
        rps = rate(t)
        got = rec.recommend(Observation(t, arrival_rps=rps, queue_depth=0.0, ready_replicas=replicas,
                                        current_replicas=replicas, p99_s=0.1, slo_latency_threshold_s=0.5))
        out.append((t, got.desired, decision(got.desired, replicas, got.reason, None)))
        replicas = got.desired
        t += 15.0
    return out


def test_on_a_steady_fall_the_fleet_follows_without_the_hold_down_or_the_band() -> None:
    """850 -> 250 req/s over ten minutes on replicas of 100: blind to a fall the fleet keeps each count a
    minute past the moment it sufficed, and at 0.8 of its capacity; looking for one, from the
    fourth minute it scales down as soon as fewer replicas carry the rate at 0.9, and says so (as
    shipped; with the window infinite, as before)."""
    def rate(t: float) -> float:
        return max(250.0, 850.0 - t)

    blind = fleet_on(rate, RecommenderConfig(capacity_rps=100.0, max_replicas=20, fall_window_s=math.inf), 600.0)
    aware = fleet_on(rate, RecommenderConfig(capacity_rps=100.0, max_replicas=20), 600.0)  # as shipped
    assert [d for t, d, _ in blind if t < WINDOW] == [d for t, d, _ in aware if t < WINDOW]  # the window fills
    assert sum(d for _, d, _ in aware) < sum(d for _, d, _ in blind)
    assert all(a <= b for (_, a, _), (_, b, _) in zip(aware, blind, strict=True))
    assert "scale_down_fall" in {why for _, _, why in aware}
    assert "scale_down_fall" not in {why for _, _, why in blind}
    assert aware[-1][1] == 3 and blind[-1][1] == 4  # 250 req/s at 0.9 of 100, not at 0.8


@pytest.mark.parametrize(("interval", "window"), [(0.2, WINDOW), (15.0, 6 * 3600.0)])
def test_a_fall_is_seen_however_often_the_recommender_evaluates(interval: float, window: float) -> None:
    """1,200 and 1,440 evaluations a window: a deque that kept the newest 512 never spanned the
    window and the fall was off without a word; thinned, the window spans and memory stays bounded."""
    rec = Recommender(RecommenderConfig(capacity_rps=100.0, fall_window_s=window))
    steps = int(window / interval) + 1
    seen = [rec.track_fall(i * interval, 1000.0 - 500.0 * i / steps) for i in range(steps)]
    assert seen[-1] and not any(seen[: steps // 2])
    assert len(rec._fall_rates) <= 2 * WINDOW_READINGS


def test_a_lull_keeps_the_hold_down() -> None:
    """Flat for five minutes, then a lull to 0.35x: the rate window's minute-long ramp into it is no
    line over four minutes, so the fleet waits the down delay as shipped."""
    def rate(t: float) -> float:
        return 850.0 - (850.0 - 300.0) * min(1.0, max(0.0, t - 300.0) / 60.0)

    blind = fleet_on(rate, RecommenderConfig(capacity_rps=100.0, max_replicas=20, fall_window_s=math.inf), 420.0)
    aware = fleet_on(rate, RecommenderConfig(capacity_rps=100.0, max_replicas=20), 420.0)
    assert aware == blind and "hold_down_delay" in {why for _, _, why in aware}


def test_the_fall_is_a_setting_with_an_off_switch_and_bad_values_are_refused() -> None:
    assert RecommenderTuning().fall_window_s == WINDOW  # shipped (docs/autoscaler.md says why)
    assert RecommenderTuning.model_validate({"fall_window_s": "Infinity"}).fall_window_s == math.inf  # off
    for bad in ({"fall_window_s": 0.0}, {"fall_fit": 0.0}, {"fall_fit": 1.5}, {"fall_window_s": -1.0}):
        with pytest.raises(UsageError):
            RecommenderConfig(capacity_rps=1.0, **bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            RecommenderTuning.model_validate(bad)
    assert "scale_down_fall" in DECISIONS and decision(2, 3, "fall", None) == "scale_down_fall"
