"""Prometheus' `histogram_quantile`, computed here: the benchmarks judge the exporter's buckets by
the quantile a dashboard would read from them, so they must interpolate exactly as Prometheus does.

One implementation, over rows of per-bucket counts (`trace-rate` reads thousands of simulated
histograms at once); `histogram_quantile` is the one-histogram form over cumulative `le` buckets as
a scrape gives them (`overhead`), with Prometheus' answers for the edge cases.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np


def histogram_quantiles(q: float, counts: np.ndarray, bounds: Sequence[float]) -> np.ndarray:
    """The q-quantile of each row of *counts* (per bucket, not cumulative; the last column the +Inf
    bucket; *bounds* the finite upper bounds): linear within the bucket holding rank q·total, the
    first bucket starting at 0, the highest finite bound when the rank falls in +Inf."""
    cumulative = np.cumsum(counts, axis=1)
    rank = q * cumulative[:, -1]
    idx = (cumulative < rank[:, None]).sum(axis=1)  # first bucket whose cumulative count reaches rank
    upper = np.asarray((*bounds, bounds[-1]))
    lower = np.concatenate(([0.0], np.asarray(bounds)))
    rows = np.arange(len(counts))
    below = np.where(idx > 0, cumulative[rows, np.maximum(idx - 1, 0)], 0.0)
    in_bucket = counts[rows, idx]
    fraction = np.divide(rank - below, in_bucket, out=np.ones_like(rank), where=in_bucket > 0)
    return np.where(idx >= len(bounds), bounds[-1], lower[idx] + (upper[idx] - lower[idx]) * fraction)


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The q-quantile of one histogram of cumulative buckets (upper bound -> count, +Inf included).

    None where Prometheus answers NaN (no +Inf bucket, a single bucket, no observations). Counts
    that dip (a scrape between two bucket updates) are made monotonic first, as Prometheus does; a
    rank in a lowest bucket whose bound is ≤ 0 answers that bound."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must lie in [0, 1], got {q}")
    ordered = sorted(buckets.items())
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    finite = [b for b, _ in ordered[:-1]]
    cumulative = np.maximum.accumulate(np.asarray([float(c) for _, c in ordered]))
    if cumulative[-1] <= 0:
        return None
    if finite[0] <= 0 and cumulative[0] >= q * cumulative[-1]:
        return finite[0]
    per_bucket = np.diff(cumulative, prepend=0.0)
    return float(histogram_quantiles(q, per_bucket[None, :], finite)[0])
