"""The SLO-aware log buckets and the classic histogram the exporter serves."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.exporters.buckets import BucketHistogram, log_buckets


@settings(max_examples=150, deadline=None)
@given(
    st.floats(min_value=1e-5, max_value=1.0),
    st.floats(min_value=2.0, max_value=1e4),
    st.lists(st.floats(min_value=1e-6, max_value=1e5), max_size=8),
    st.integers(min_value=12, max_value=60),
)
def test_log_buckets_shape(min_s: float, max_s: float, slos: list[float], max_buckets: int) -> None:
    bounds = log_buckets(min_s, max_s, slos, max_buckets)
    assert len(bounds) <= max_buckets - 1
    assert list(bounds) == sorted(set(bounds))
    for slo in slos:
        assert slo in bounds
    assert bounds[0] <= min_s * 1.001 or bounds[0] in slos


def test_log_buckets_default_grid_is_fine_enough() -> None:
    bounds = log_buckets(0.0005, 60, [0.1, 0.25, 0.5, 1.0], 60)
    assert len(bounds) == 59
    ratios = [b / a for a, b in itertools.pairwise(bounds)]
    assert max(ratios) < 1.24  # 0.5 ms .. 60 s in 58 steps: 1.2234 if there were no anchors


def test_log_buckets_rejects_bad_ranges() -> None:
    with pytest.raises(ValueError):
        log_buckets(1.0, 0.5)
    with pytest.raises(ValueError):
        log_buckets(0.001, 1, [-1.0])
    with pytest.raises(ValueError):
        log_buckets(0.001, 1, [0.1 * i for i in range(1, 20)], max_buckets=12)


def test_histogram_le_semantics_and_cumulative() -> None:
    hist = BucketHistogram((0.1, 0.5))
    for v in (0.1, 0.2, 0.5, 0.7):
        hist.observe(v)
    assert hist.cumulative() == [("0.1", 1.0), ("0.5", 3.0), ("+Inf", 4.0)]
    assert hist.total == pytest.approx(1.5)
    many = BucketHistogram((0.1, 0.5))
    many.observe_many(np.array([0.1, 0.2, 0.5, 0.7]))
    assert many.counts == hist.counts
