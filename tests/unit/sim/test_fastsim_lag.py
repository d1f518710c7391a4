"""Scraped series and PromQL-like rate(): what a controller sees, and how late."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.contracts.errors import UsageError
from tidescale.sim import BatcherConfig, FleetSim, MetricsLag, ScrapedSeries, prom_rate
from tidescale.sim.servicecurve import ServiceCurve


def test_rate_of_a_linear_counter_is_its_slope() -> None:
    ts = [15.0 * k for k in range(9)]
    assert prom_rate(ts, [3.0 * t for t in ts], 60.0, 120.0) == pytest.approx(3.0)


def test_rate_corrects_counter_resets() -> None:
    ts = [0.0, 15.0, 30.0, 45.0, 60.0]
    vs = [100.0, 115.0, 5.0, 20.0, 35.0]  # reset after 115 (restart)
    # the range (0, 60] is left-open: samples 115, 5, 20, 35 -> increase 5 + 15 + 15 over 45 s,
    # extrapolated by the 15 s to the window start (within 1.1 intervals)
    assert prom_rate(ts, vs, 0.0, 60.0) == pytest.approx(35.0 / 45.0)


def test_rate_needs_two_samples() -> None:
    assert prom_rate([10.0], [1.0], 0.0, 60.0) is None
    assert ScrapedSeries().rate(60.0, 100.0) is None


def test_rate_extrapolation_stops_at_zero_for_a_young_counter() -> None:
    # a counter born at t=55 with slope 1: 5 at 60, 20 at 75, 35 at 90; the window starts at 30,
    # too far for full extrapolation (half an interval, 7.5 s), and zero is reached after 5 s.
    r = prom_rate([60.0, 75.0, 90.0], [5.0, 20.0, 35.0], 30.0, 90.0)
    assert r == pytest.approx(30.0 * (30.0 + 5.0) / 30.0 / 60.0)


@settings(max_examples=150, deadline=None)
@given(slope=st.floats(0.0, 1e4), interval=st.floats(1.0, 30.0), window_k=st.integers(2, 20),
       offset=st.floats(0.0, 0.99))
def test_rate_is_exact_for_linear_counters_whatever_the_alignment(slope: float, interval: float, window_k: int,
                                                                  offset: float) -> None:
    start = 1000.0
    ts = [start + interval * (k + offset) for k in range(60)]
    vs = [slope * t for t in ts]
    at = ts[-1] + interval * 0.3
    r = prom_rate(ts, vs, at - window_k * interval, at)
    assert r is not None and r == pytest.approx(slope, rel=1e-6, abs=1e-9)


def test_gauge_is_the_last_scrape_within_lookback() -> None:
    s = ScrapedSeries()
    s.record(15.0, 3.0)
    s.record(30.0, 7.0)
    assert s.last(29.9) == 3.0 and s.last(44.0) == 7.0 and s.last(10.0) is None
    assert s.last(30.0 + 301.0) is None
    with pytest.raises(UsageError, match="not after"):
        s.record(30.0, 1.0)


def test_metrics_lag_sees_a_surge_only_after_scrape_and_delay() -> None:
    curve = ServiceCurve(((1, 0.005), (8, 0.005)), jitter_sigma=0.0)
    sim = FleetSim(curve, BatcherConfig(max_batch_size=8, preferred_batch_sizes=()), 2, cold_start_s=0.0)
    lag = MetricsLag(sim, scrape_interval_s=15.0, delay_s=30.0)
    sim.offer(np.arange(0.0, 300.0, 1 / 50))  # 50 req/s
    sim.offer(np.arange(300.0, 600.0, 1 / 200))  # then 200 req/s
    lag.advance(290.0)
    assert lag.rate("requests", 60.0) == pytest.approx(50.0, rel=0.05)
    lag.advance(320.0)  # the surge began 20 s ago, but the view is 30 s old
    assert lag.rate("requests", 60.0) == pytest.approx(50.0, rel=0.05)
    lag.advance(420.0)
    assert lag.rate("requests", 60.0) == pytest.approx(200.0, rel=0.05)
    assert lag.gauge("replicas_ready") == 2.0
    q = lag.ratio_of_rates("queue_duration_s", "requests", 60.0)
    assert q is not None and q >= 0.0
    with pytest.raises(UsageError, match="unknown series"):
        lag.rate("nope", 60.0)


def test_metrics_lag_scrapes_at_its_offset_in_the_interval() -> None:
    """Prometheus' scrape of a target has a phase of its own: a surge can fall anywhere in the cycle."""
    sim = FleetSim(ServiceCurve(((1, 0.005), (8, 0.005)), jitter_sigma=0.0),
                   BatcherConfig(max_batch_size=8, preferred_batch_sizes=()), 1, cold_start_s=0.0)
    lag = MetricsLag(sim, scrape_interval_s=15.0, offset_s=4.5)
    lag.advance(50.0)
    assert list(lag.series["requests"].times) == [4.5, 19.5, 34.5, 49.5]
    for bad in (-1.0, 15.0, float("nan")):
        with pytest.raises(UsageError, match="offset_s must be in"):
            MetricsLag(sim, scrape_interval_s=15.0, offset_s=bad)
