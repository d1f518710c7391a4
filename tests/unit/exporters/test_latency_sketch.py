"""The relative-error sketch, the sliding window and the log buckets."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.exporters.latency import BucketHistogram, DDSketch, SlidingSketch, log_buckets

ALPHA = 0.005
# 8 decades: within the 2048 dense bins at α = 0.5 %, so no collapse happens here.
positive = st.floats(min_value=1e-4, max_value=1e4, allow_nan=False, allow_infinity=False)


def exact(values: list[float], q: float) -> float:
    return sorted(values)[math.floor(q * (len(values) - 1))]


@settings(max_examples=150, deadline=None)
@given(st.lists(positive, min_size=1, max_size=300), st.sampled_from([0.0, 0.5, 0.95, 0.99, 1.0]))
def test_quantiles_are_within_relative_accuracy(values: list[float], q: float) -> None:
    sketch = DDSketch(ALPHA)
    for v in values:
        sketch.add(v)
    estimate = sketch.quantile(q)
    assert estimate is not None
    truth = exact(values, q)
    assert abs(estimate - truth) <= ALPHA * truth * (1 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(st.lists(positive, max_size=200), st.lists(positive, max_size=200))
def test_merge_equals_sketch_of_union(a: list[float], b: list[float]) -> None:
    left, right, union = DDSketch(ALPHA), DDSketch(ALPHA), DDSketch(ALPHA)
    for v in a:
        left.add(v)
        union.add(v)
    for v in b:
        right.add(v)
        union.add(v)
    left.merge(right)
    assert left.bins == union.bins
    assert left.count == union.count


def test_add_many_matches_add() -> None:
    values = np.random.default_rng(1).lognormal(-4, 1, 5000)
    one, many = DDSketch(ALPHA), DDSketch(ALPHA)
    for v in values:
        one.add(float(v))
    many.add_many(values)
    assert one.bins == many.bins
    assert one.quantile(0.99) == many.quantile(0.99)


def test_collapse_bounds_bins_and_keeps_the_tail_accurate() -> None:
    values = np.geomspace(1e-7, 1e3, 20_000)  # far more buckets than allowed
    sketch = DDSketch(ALPHA, max_bins=300)
    sketch.add_many(values)
    assert len(sketch.bins) <= 300
    truth = float(np.sort(values)[math.floor(0.99 * (len(values) - 1))])
    estimate = sketch.quantile(0.99)
    assert estimate is not None and abs(estimate - truth) <= ALPHA * truth * 1.000001


def test_empty_and_invalid() -> None:
    sketch = DDSketch()
    assert sketch.quantile(0.5) is None
    sketch.add(float("nan"))
    sketch.add(-1.0)
    assert sketch.count == 0
    with pytest.raises(ValueError):
        sketch.quantile(1.5)
    with pytest.raises(ValueError):
        DDSketch(relative_accuracy=0)
    with pytest.raises(ValueError):
        DDSketch(0.01).merge(DDSketch(0.02))


def test_zero_durations_are_counted() -> None:
    sketch = DDSketch()
    for _ in range(9):
        sketch.add(0.0)
    sketch.add(1.0)
    assert sketch.quantile(0.5) == 0.0
    assert sketch.quantile(1.0) == pytest.approx(1.0, rel=ALPHA)


def test_sliding_window_forgets_old_intervals() -> None:
    window = SlidingSketch(window_s=60, slots=12)
    window.add(10.0, now=0.0)
    window.add(0.001, now=30.0)
    assert window.merged(now=59.0).count == 2
    merged = window.merged(now=61.0)  # the first 5 s interval left the window
    assert merged.count == 1
    assert merged.quantile(1.0) == pytest.approx(0.001, rel=ALPHA)
    assert window.empty(now=200.0)


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
