"""Seasonal forecast: the demand one season ago (yesterday, last week), scaled to today's level (pure).

The recommender's own projection extrapolates the last 30 s, so a peak that comes every day at the
same time (the 09:00 logins, a nightly batch) and rises faster than a replica starts is met one
cold start late, every day. Prometheus already holds the demand of every past day: the highest
demand over the lookahead one season ago, times how busy today is against that day (the median
demand over the last minutes, now and then), is what the fleet should be ready for when the
replicas asked for now are Ready. Seasonal-naive forecasting with a level correction: no model to
fit, nothing to train, and wrong in a way an on-call engineer can check on a dashboard (the same
panel, a day back).

The forecast only raises the count (the recommender takes the larger need), so a season that was
quieter than today costs nothing; one that was busier (an incident's retry storm, a load test)
pre-scales the same hour the next day, bounded by the level correction. `forecast.enabled: false`
turns it off. Without history (a new install, a Prometheus that keeps less than a season) there is
no forecast and the recommender runs as without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DAY_S = 86400.0
WEEK_S = 7 * DAY_S


@dataclass(frozen=True)
class SeasonReading:
    """What Prometheus holds of one season: its peak over the lookahead and its level, each None when
    it holds nothing that far back."""

    period_s: float
    peak_rps: float | None  # the highest demand one period ago, over the lookahead (± the margin)
    level_rps: float | None  # the median demand over the level window that ended one period ago


@dataclass(frozen=True)
class Forecast:
    """The demand to be ready for, and what it came from (for the decision's Event)."""

    rps: float
    period_s: float
    peak_rps: float
    growth: float  # today's level over the season's, bounded


def _usable(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x >= 0


def seasonal_forecast(readings: Sequence[SeasonReading], level_now: float | None, max_growth: float
                      ) -> Forecast | None:
    """The forecast from the longest season that Prometheus holds a peak of, or None.

    The longest, because it holds the shorter ones: last week's Monday knows Monday is not Sunday,
    yesterday does not. Its peak is scaled by today's level over that season's (at most
    *max_growth*; 1 where either level is unknown or the season's was 0, which says nothing of
    the peak that followed it)."""
    held = [r for r in readings if _usable(r.peak_rps)]
    if not held:
        return None
    season = max(held, key=lambda r: r.period_s)
    peak = float(season.peak_rps or 0.0)
    growth = 1.0
    if _usable(level_now) and _usable(season.level_rps) and (season.level_rps or 0.0) > 0:
        growth = min(max_growth, float(level_now or 0.0) / float(season.level_rps or 1.0))
    rps = peak * growth
    if not math.isfinite(rps):
        return None  # a peak near the float's limit: no demand any fleet could be sized for
    return Forecast(rps, season.period_s, peak, growth)


def period_name(period_s: float) -> str:
    """`1d`, `7d`, or seconds: how an Event and the docs name a season."""
    if period_s % DAY_S == 0:
        return f"{int(period_s // DAY_S)}d"
    return f"{period_s:g}s"
