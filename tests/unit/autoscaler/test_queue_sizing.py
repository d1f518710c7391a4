"""Queue sizing: the SLO split between the server's latency-vs-load curve and the bursts' wait."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.autoscaler.budget import (
    BUDGET_FRACTIONS,
    cheapest_split,
    check_budget_shares,
    shares_from_capacities,
)
from tidescale.autoscaler.burst import BurstProfile
from tidescale.autoscaler.capacity import load_budget_shares
from tidescale.autoscaler.recommend import Recommender, RecommenderConfig
from tidescale.autoscaler.settings import RecommenderSettings, TargetSettings
from tidescale.contracts.errors import UsageError

from .test_autoscaler_capacity import RATE_PROFILE
from .test_burst_sizing import bursty, calm, poisson_like, readings

# A batching server's curve: flat far from saturation, steep near it (the benchmark's V100 at 0.5 s
# reads 0.67 of its capacity within a fifth of the SLO, 0.96 within two fifths).
CURVE = ((0.1, 0.2), (0.2, 0.67), (0.3, 0.88), (0.4, 0.96), (0.5, 0.98), (0.6, 0.99), (0.7, 1.0),
         (0.8, 1.0), (0.9, 1.0))


def test_the_split_is_the_cheapest_one_and_a_tie_gives_the_server_the_budget() -> None:
    """No bursts (factor 1 at any wait): the server keeps its whole budget. Bursts that need a wait
    budget: the split trades the server's share for the bursts' margin at the cheapest point."""
    assert cheapest_split(CURVE, lambda _wait: 1.0, 0.5) == (1.0, 1.0)
    # 1.5 under a 0.19 s wait, 1.1 from it: 1.1 / 0.99 at 0.6 of the SLO beats 1.5 / 1.0.
    margin, share = cheapest_split(CURVE, lambda wait: 1.1 if wait >= 0.19 else 1.5, 0.5) or (0, 0)
    assert (margin, share) == (1.1, 0.99)
    assert cheapest_split(CURVE, lambda _wait: None, 0.5) is None  # no factor yet: no split


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 0.99), st.floats(0.01, 1.0)), max_size=12),
       st.floats(1.0, 3.0), st.floats(0.0, 2.0), st.floats(0.01, 5.0))
def test_no_split_asks_for_fewer_replicas_than_the_one_chosen(rows: list[tuple[float, float]], top: float,
                                                             slope: float, slo: float) -> None:
    shares = tuple(sorted({f: s for f, s in rows}.items()))
    shares = tuple((f, max(s for g, s in shares if g <= f)) for f, _ in shares)  # not falling
    shares = check_budget_shares(shares)

    def factor(wait: float) -> float:  # falls as the wait budget grows
        return max(1.0, top - slope * wait / slo)

    split = cheapest_split(shares, factor, slo)
    assert split is not None
    margin, share = split
    for f, s in (*shares, (1.0, 1.0)):
        assert margin / share <= factor((1 - f) * slo) / s + 1e-12


def test_queue_sizing_sizes_on_the_curve_and_as_burst_sizing_without_one() -> None:
    """1,000 req/s on replicas of 100. A smooth stream: the server keeps the budget, 11 replicas as
    burst sizing asks. A bursty one: a wait budget, paid in capacity, never more than burst sizing's
    half of the SLO on top of a P99 at the SLO would have let through. No curve: burst sizing."""
    def asked(rates: list[float], sizing: str, shares: tuple[tuple[float, float], ...] = CURVE) -> int:
        rec = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, sizing=sizing, budget_shares=shares))
        for t, r in readings(rates):
            rec.record_interval(t, r)
        return rec.recommend(calm(2.0 * len(rates), 1000.0, 10)).desired

    smooth, spiky = poisson_like(1000.0, 150, 5), bursty(1000.0, 150, 5)
    assert asked(smooth, "queue") == asked(smooth, "burst") == 11
    assert asked(spiky, "queue") >= asked(spiky, "burst") > 12
    assert asked(spiky, "queue", ()) == asked(spiky, "burst")
    assert asked(bursty(1000.0, 20, 5), "queue") == 12  # 40 s of readings: the fixed share still


def test_the_burst_profile_keeps_a_factor_per_wait_budget() -> None:
    profile = BurstProfile(window_s=300.0, smooth_s=60.0, share=0.001, max_factor=2.0, refresh_s=10.0)
    for t, r in readings(bursty(1000.0, 150, 3)):
        profile.add(t, r)
    short, long = profile.factor(300.0, 0.05), profile.factor(301.0, 0.5)
    assert short is not None and long is not None and long < short
    assert profile.factor(302.0, 0.05) == short  # kept within the refresh


def test_shares_from_a_load_test_skip_budgets_no_load_meets_and_never_fall() -> None:
    capacities = {0.05: None, 0.1: 50.0, 0.15: 120.0, 0.2: 110.0, 0.25: 150.0, 0.5: 200.0}
    shares = shares_from_capacities(lambda b: capacities.get(round(b, 2), 200.0), 0.5)
    assert shares[:4] == ((0.2, 0.25), (0.3, 0.6), (0.4, 0.6), (0.5, 0.75))
    assert [f for f, _ in shares] == list(BUDGET_FRACTIONS[1:])
    with pytest.raises(UsageError, match="no capacity within the SLO"):
        shares_from_capacities(lambda _b: None, 0.5)


def test_a_profile_gives_the_curve_and_the_settings_carry_it(tmp_path: Path) -> None:
    """perf_analyzer's request-rate profile: P99 41 ms at 99.8 req/s, 97 ms at 199.6, 260 ms at
    298.1; at a 0.5 s SLO that is 298.1 req/s, a third of it within a tenth of the SLO."""
    p = tmp_path / "rate.csv"
    p.write_text(RATE_PROFILE)
    shares = load_budget_shares(p, 0.5)
    assert shares[0] == pytest.approx((0.1, 99.8 / 298.1))
    assert shares[1] == pytest.approx((0.2, 199.6 / 298.1)) and shares[-1] == (0.9, 1.0)
    target = TargetSettings(deployment="triton", namespace="ml", model="m")
    queue = RecommenderSettings(profile=p, tuning={"sizing": "queue"}, targets=[target])  # type: ignore[arg-type]
    assert queue.config_for(target).budget_shares == shares
    assert RecommenderSettings(profile=p, targets=[target]).config_for(target).budget_shares == ()  # fixed: unread
    given_curve = RecommenderSettings(capacity_rps=100.0, budget_shares=[(0.5, 0.9)], tuning={"sizing": "queue"},
                                      targets=[target])  # type: ignore[arg-type]
    assert given_curve.config_for(target).budget_shares == ((0.5, 0.9),)


@pytest.mark.parametrize(("rows", "message"), [
    ([(0.0, 0.5)], "0 < fraction < 1"),
    ([(1.0, 0.5)], "0 < fraction < 1"),
    ([(0.5, 1.5)], "0 < share <= 1"),
    ([(0.5, math.nan)], "0 < share <= 1"),
    ([(0.5, 0.9), (0.4, 0.95)], "fractions must ascend"),
    ([(0.4, 0.9), (0.5, 0.8)], "shares not fall"),
    ([(0.5,)], "need \\[fraction of the SLO, share of the capacity\\]"),
])
def test_bad_curves_are_refused_naming_the_row(rows: list[tuple[float, ...]], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check_budget_shares(rows)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=message):
        RecommenderConfig(capacity_rps=1.0, budget_shares=tuple(rows))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="budget_shares"):
        RecommenderSettings(budget_shares=rows)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="at most 64 rows"):
        check_budget_shares([(0.5, 0.9)] * 65)
