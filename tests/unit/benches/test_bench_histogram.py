"""Prometheus' histogram_quantile as the benchmarks compute it: one histogram over cumulative
buckets (`bench overhead`) and many rows of per-bucket counts at once (`bench trace-rate`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tidescale.benches.histogram import histogram_quantile, histogram_quantiles


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    # 100 observations: 10 in (0, 1], 80 in (1, 2], 10 in (2, 4]
    buckets = {1.0: 10.0, 2.0: 90.0, 4.0: 100.0, math.inf: 100.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(1.0 + 40 / 80)
    assert histogram_quantile(0.05, buckets) == pytest.approx(0.5)  # lowest bucket starts at 0
    assert histogram_quantile(0.99, buckets) == pytest.approx(2.0 + 2.0 * 9 / 10)
    assert histogram_quantile(1.0, buckets) == pytest.approx(4.0)


def test_histogram_quantile_edges() -> None:
    # a rank in the +Inf bucket answers the highest finite bound
    assert histogram_quantile(0.99, {1.0: 50.0, 2.0: 90.0, math.inf: 100.0}) == 2.0
    assert histogram_quantile(0.99, {1.0: 0.0, math.inf: 0.0}) is None  # no observations (NaN)
    assert histogram_quantile(0.5, {1.0: 3.0, 2.0: 5.0}) is None  # no +Inf bucket
    assert histogram_quantile(0.5, {math.inf: 3.0}) is None  # one bucket
    # counts that dip (a scrape between two bucket updates) are made monotonic first
    assert histogram_quantile(0.5, {1.0: 10.0, 2.0: 8.0, 4.0: 20.0, math.inf: 20.0}) == pytest.approx(
        histogram_quantile(0.5, {1.0: 10.0, 2.0: 10.0, 4.0: 20.0, math.inf: 20.0}))
    with pytest.raises(ValueError):
        histogram_quantile(1.5, {1.0: 1.0, math.inf: 1.0})
    # a lowest bucket at or below 0 answers its own bound, as Prometheus does
    assert histogram_quantile(0.25, {-1.0: 5.0, 1.0: 10.0, math.inf: 10.0}) == -1.0


def test_rows_of_counts_give_each_histograms_own_quantile() -> None:
    bounds = [1.0, 2.0, 4.0]
    rows = np.array([[10.0, 80.0, 10.0, 0.0], [0.0, 0.0, 0.0, 5.0], [50.0, 40.0, 0.0, 10.0]])
    cumulative = [dict(zip([*bounds, math.inf], np.cumsum(row).tolist(), strict=True)) for row in rows]
    for q in (0.5, 0.9, 0.99):
        expected = [histogram_quantile(q, c) for c in cumulative]
        assert histogram_quantiles(q, rows, bounds).tolist() == pytest.approx(expected)
    assert histogram_quantiles(0.99, rows, bounds)[1] == 4.0  # all in +Inf: the highest finite bound
