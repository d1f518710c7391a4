"""A rise back to a level the arrivals held minutes ago is projected no further than that level
(`return_window_s`): a return, not a surge. And a dip like the dips that came back to that level is
not scaled into (`dip_hold_s`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.autoscaler.decisions import decision
from tidescale.autoscaler.recommend import Observation, Recommendation, Recommender, RecommenderConfig
from tidescale.autoscaler.settings import RecommenderTuning
from tidescale.contracts.errors import UsageError

Rate = Callable[[float], float]


def answers_on(rate: Rate, config: RecommenderConfig, end: float) -> list[tuple[float, int, Recommendation]]:
    """(t, replicas read, answer) every 15 s, the fleet applying each answer at once."""
    rec, replicas, t = Recommender(config), 3, 0.0
    out: list[tuple[float, int, Recommendation]] = []
    while t <= end:
        got = rec.recommend(Observation(t, arrival_rps=rate(t), queue_depth=0.0, ready_replicas=replicas,
                                        current_replicas=replicas, p99_s=0.1, slo_latency_threshold_s=0.5))
        out.append((t, replicas, got))
        replicas = got.desired
        t += 15.0
    return out


def fleet_on(rate: Rate, config: RecommenderConfig, end: float) -> list[tuple[float, int, float]]:
    """(t, desired, projected rate) every 15 s."""
    return [(t, got.desired, got.projected_rps) for t, _, got in answers_on(rate, config, end)]


def lull_phase(t: float) -> float:
    """Seconds into the current five-minute cycle of `lulls` (-1 before the first)."""
    return (t - 300.0) % 300.0 if t >= 300.0 else -1.0


def lulls(t: float) -> float:
    """800 req/s with a lull to 280 of two minutes every five (from 300 s on), as a 1-minute rate reads
    the steps: a minute's ramp each way."""
    phase = lull_phase(t)
    if phase < 0:
        return 800.0
    into = min(1.0, phase / 60.0)  # the ramp down
    back = min(1.0, max(0.0, (phase - 120.0) / 60.0))  # and back up once the lull ends
    return 800.0 - 520.0 * (into - back)


def config(return_window_s: float = 0.0) -> RecommenderConfig:
    """The trend capped at 2x the rate, as when the window was measured: under the shipped 1.25 a
    blind return asks for 4 where 3 serve, not 5, and the window's own effect is harder to see. No
    dip hold (below), which keeps a fleet through the lulls whatever the projection asks."""
    return RecommenderConfig(capacity_rps=370.0, max_replicas=40, cold_start_s=60.0, trend_cap=2.0,
                             return_window_s=return_window_s, dip_hold_s=0.0)


def test_a_return_is_projected_to_its_level_and_a_surge_past_it_is_not() -> None:
    """The rise out of a lull reads as a steep ramp; projected over the cold start it asked for 5
    replicas where 3 serve the level it returns to (with the window off). Past the level held, the trend
    is a surge's, projected as before."""
    def back_then_surge(t: float) -> float:
        return lulls(t) if t < 900.0 else 800.0 + 1600.0 * min(1.0, (t - 900.0) / 60.0)

    blind = fleet_on(back_then_surge, config(), 1000.0)
    aware = fleet_on(back_then_surge, config(600.0), 1000.0)
    assert [r for r in blind if r[0] < 420] == [r for r in aware if r[0] < 420]  # the lull's fall: no change
    assert max(d for t, d, _ in blind if 420 <= t < 900) >= 5
    assert max(d for t, d, _ in aware if 420 <= t < 900) == 3
    assert max(p for t, _, p in aware if 420 <= t < 900) == pytest.approx(800.0)
    surge_blind = [(d, p) for t, d, p in blind if 915 <= t <= 960]
    surge_aware = [(d, p) for t, d, p in aware if 915 <= t <= 960]
    assert surge_aware == surge_blind and max(d for d, _ in surge_aware) > 5


def test_a_return_says_so_and_a_surge_past_the_level_still_reads_as_a_lookahead() -> None:
    """The decision names the cap, so on-call can tell a climb back to a level held (projected no
    further than it) from a trend projected over the cold start; with the window off it never reads so."""
    def back_then_surge(t: float) -> float:  # the lulls, deeper (to 100 req/s), then a surge past 800
        return 100.0 + (lulls(t) - 280.0) * 700.0 / 520.0 if t < 900.0 else \
            800.0 + 1600.0 * min(1.0, (t - 900.0) / 60.0)

    def decisions(window: float) -> list[tuple[float, str]]:
        return [(t, decision(got.desired, read, got.reason, None))
                for t, read, got in answers_on(back_then_surge, config(window), 1000.0)]

    aware, blind = decisions(600.0), decisions(0.0)
    assert any(why == "scale_up_return" for t, why in aware if 420 <= t < 900)
    assert all(why != "scale_up_return" for t, why in aware if t >= 915 or t < 420)
    assert any(why == "scale_up_lookahead" for t, why in aware if t >= 915)
    assert all(why != "scale_up_return" for _, why in blind)


def test_a_level_older_than_the_window_is_forgotten() -> None:
    """A return after longer than the window is read as a new rise, projected on its trend."""
    def long_lull(t: float) -> float:
        return 800.0 if t < 300.0 else 280.0 if t < 1000.0 else 280.0 + 520.0 * min(1.0, (t - 1000.0) / 60.0)

    short = fleet_on(long_lull, config(300.0), 1100.0)
    assert short == fleet_on(long_lull, config(), 1100.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1e4), min_size=1, max_size=60), st.floats(1.0, 3600.0))
def test_the_projection_never_falls_under_the_rate_nor_rises_over_the_blind_one(rates: list[float],
                                                                                window: float) -> None:
    blind, aware = Recommender(config()), Recommender(config(window))
    for i, rate in enumerate(rates):
        obs = Observation(15.0 * i, arrival_rps=rate, queue_depth=0.0, ready_replicas=3, current_replicas=3,
                          p99_s=0.1, slo_latency_threshold_s=0.5)
        got, ref = aware.recommend(obs), blind.recommend(obs)
        assert rate * (1 - 1e-9) <= got.projected_rps <= ref.projected_rps * (1 + 1e-9)
        assert got.desired <= ref.desired


@pytest.mark.parametrize(("knob", "shipped", "too_large"), [("return_window_s", 600.0, float("inf")),
                                                           ("dip_hold_s", 300.0, float("inf")),
                                                           ("return_tolerance", 0.05, 1.5)])
def test_the_window_the_tolerance_and_the_dip_hold_are_settings_on_by_default_and_bad_values_are_refused(
        knob: str, shipped: float, too_large: float) -> None:
    assert getattr(RecommenderTuning(), knob) == shipped
    assert getattr(RecommenderTuning.model_validate({knob: 0}), knob) == 0  # off
    for bad in (-1.0, too_large, float("nan")):
        with pytest.raises(UsageError):
            RecommenderConfig(capacity_rps=1.0, **{knob: bad})
        with pytest.raises(ValueError):
            RecommenderTuning.model_validate({knob: bad})


def overshooting_lulls(t: float) -> float:
    """The lulls, each return reading 1 % over the level for a minute (a second's noise, and the
    queue refilling as the batches grow back, on top of the arrivals)."""
    return 808.0 if 180.0 <= lull_phase(t) < 240.0 else lulls(t)


def tolerant(return_tolerance: float) -> RecommenderConfig:
    return dataclasses.replace(config(600.0), return_tolerance=return_tolerance)


def test_a_return_a_little_over_the_level_is_still_the_level() -> None:
    """At 1 % over the level the return read as a surge and its trend was projected: a fourth replica
    where 3 serve (the benchmark's lulls, every draw). Within `return_tolerance` of the level it is
    projected no further than the rate itself."""
    strict = fleet_on(overshooting_lulls, tolerant(0.0), 1500.0)
    lenient = fleet_on(overshooting_lulls, tolerant(0.05), 1500.0)
    assert max(d for t, d, _ in strict if t >= 420) >= 4
    assert max(d for t, d, _ in lenient if t >= 420) == 3
    assert max(p for t, _, p in lenient if t >= 420) == pytest.approx(808.0)


def test_the_tolerance_holds_only_for_a_climb_out_of_a_dip() -> None:
    """A slow climb that never dipped passes the level held by less than the tolerance (the level is a
    rate window old), and is a rise: its trend is projected over the cold start as before."""
    def climb(t: float) -> float:
        return 800.0 + 0.4 * max(0.0, t - 600.0)

    strict = fleet_on(climb, tolerant(0.0), 1200.0)
    assert fleet_on(climb, tolerant(0.05), 1200.0) == strict
    rising = [(p, climb(t)) for t, _, p in strict if t >= 700]
    assert all(p > rate * 1.02 for p, rate in rising)  # projected past the rate, within 5 % of the level


def held(dip_hold_s: float) -> RecommenderConfig:
    return RecommenderConfig(capacity_rps=370.0, max_replicas=40, cold_start_s=60.0, dip_hold_s=dip_hold_s)


def test_after_a_lull_that_came_back_the_next_lulls_are_not_scaled_into() -> None:
    """Lulls of two minutes (and their minute-long ramps) every five: the down delay alone takes the
    fleet into each, and the load comes back onto it. Learned, the hold outlasts the next."""
    def lows(dip_hold_s: float) -> list[int]:  # the fewest replicas asked for in each lull
        got = answers_on(lulls, held(dip_hold_s), 1500.0)
        return [min(a.desired for t, _, a in got if start <= t < start + 300.0) for start in (300.0, 600.0, 900.0,
                                                                                               1200.0)]

    assert lows(0.0) == [1, 1, 1, 1]
    assert lows(300.0) == [1, 3, 3, 3]  # the first is not known yet
    whys = {decision(a.desired, read, a.reason, None) for t, read, a in answers_on(lulls, held(300.0), 1500.0)
            if t >= 600.0}
    assert "hold_dip_returns" in whys and "scale_down" not in whys


def test_a_learned_hold_keeps_the_levels_need_not_the_whole_fleet() -> None:
    """A burst between two lulls, read by the fast path alone, panics the fleet to 5 where 3 carry
    the level; the two extra go once the panic's hold and the down delay have passed, though dips have
    been learned: the hold is for the dip. Held whole, the fleet of 5 waited the learned delay (about
    160 s), into the next lull."""
    rec, replicas, answers = Recommender(held(300.0)), 3, []
    for t in range(0, 1500, 15):
        if t == 795:
            panicked = rec.panic(float(t), 1400.0, replicas)
            assert panicked is not None and panicked.desired > 4
            replicas = panicked.desired
        got = rec.recommend(Observation(float(t), arrival_rps=lulls(t), queue_depth=0.0, ready_replicas=replicas,
                                        current_replicas=replicas, p99_s=0.1, slo_latency_threshold_s=0.5))
        answers.append((t, got.desired))
        replicas = got.desired
    back = next(t for t, desired in answers if t > 795 and desired == 3)
    assert back <= 795 + 60 + 30  # the panic's hold, then the down delay it restarted
    assert {desired for t, desired in answers if t >= back} == {3}  # and the lulls after it still held


def test_a_fall_after_dips_that_came_back_waits_no_longer_than_they_lasted() -> None:
    """The lulls, then the load stays low: the fleet comes down once the dip has outlasted the
    longest that came back (about 130 s here) plus the lookahead's 30 s, not at the down delay, and
    not never."""
    def then_low(t: float) -> float:
        return lulls(t) if t < 900.0 else max(280.0, 800.0 - 520.0 * (t - 900.0) / 60.0)

    def down_at(dip_hold_s: float) -> float:
        return next(t for t, _, a in answers_on(then_low, held(dip_hold_s), 1500.0) if t >= 900.0 and a.desired < 3)

    assert down_at(0.0) + 60.0 <= down_at(300.0) <= down_at(0.0) + 150.0


def test_a_dip_longer_than_the_hold_is_a_fall_and_teaches_nothing() -> None:
    def long_lulls(t: float) -> float:  # 800 req/s with 280 for four minutes every six
        return 800.0 if t < 300.0 or (t - 300.0) % 360.0 >= 240.0 else 280.0

    assert fleet_on(long_lulls, held(180.0), 1500.0) == fleet_on(long_lulls, held(0.0), 1500.0)


def test_a_dip_that_came_back_longer_ago_than_the_return_window_is_forgotten() -> None:
    def one_lull_then_another(t: float) -> float:
        return 280.0 if 300.0 <= t < 400.0 or 1200.0 <= t < 1300.0 else 800.0

    def fleet(window: float) -> list[tuple[float, int, float]]:
        cfg = RecommenderConfig(capacity_rps=370.0, cold_start_s=60.0, dip_hold_s=300.0, return_window_s=window)
        return [r for r in fleet_on(one_lull_then_another, cfg, 1500.0) if r[0] >= 1200.0]

    remembered, forgotten = fleet(1000.0), fleet(600.0)
    assert min(d for _, d, _ in remembered) == 3
    assert min(d for _, d, _ in forgotten) < 3
