"""The exporter's histogram: SLO-aware log-spaced bucket bounds and a classic Prometheus histogram.

Why only a histogram: Prometheus can add histograms across pods and across exporter replicas
(`sum by (le)`), so one bucket layout serves every dashboard, alert and the recommender through
the recording rules (`namespace_model:tidescale_request_duration_seconds:p50/p95/p99`). Per-replica
quantile gauges could not be aggregated (each replica sees a different subset of spans), so the
exporter publishes none. Every SLO threshold is a bound exactly, so the rules count, never interpolate.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


def log_buckets(min_s: float, max_s: float, slo_thresholds: Sequence[float] = (),
                max_buckets: int = 60) -> tuple[float, ...]:
    """Finite upper bounds: log-spaced from min_s to max_s with every SLO threshold exact.

    `max_buckets` counts the implicit +Inf bucket, so at most `max_buckets - 1` finite bounds
    are returned. min_s, max_s and the SLO thresholds are anchors; the remaining budget goes to
    the segments between anchors so that the largest ratio between neighbouring bounds is as
    small as possible (a threshold never sits in a sliver bucket and no gap is wider than needed).
    """
    if not (0.0 < min_s < max_s) or not math.isfinite(max_s):
        raise ValueError(f"need 0 < min_s < max_s, got min_s={min_s}, max_s={max_s}")
    slos = sorted({float(s) for s in slo_thresholds})
    if any(not math.isfinite(s) or s <= 0.0 for s in slos):
        raise ValueError(f"SLO thresholds must be positive and finite, got {slos}")
    anchors = sorted({min_s, max_s, *(s for s in slos if min_s < s < max_s)})
    outside = [s for s in slos if not min_s <= s <= max_s]
    spare = max_buckets - 1 - len(anchors) - len(outside)
    if spare < 0:
        raise ValueError(f"{len(slos)} SLO thresholds do not fit in {max_buckets} buckets")
    lengths = [math.log(b / a) for a, b in itertools.pairwise(anchors)]
    interior = [0] * len(lengths)
    for _ in range(spare):
        widest = max(range(len(lengths)), key=lambda i: lengths[i] / (interior[i] + 1))
        interior[widest] += 1
    bounds = set(anchors) | set(outside)
    for a, n in zip(anchors, interior, strict=False):
        step = lengths[anchors.index(a)] / (n + 1)
        bounds.update(float(f"{a * math.exp(step * k):.6g}") for k in range(1, n + 1))
    return tuple(sorted(bounds))


@dataclass
class BucketHistogram:
    """A classic Prometheus histogram: per-bucket counts (non-cumulative), sum and count."""

    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0
    count: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, weight: float = 1.0) -> None:
        # Prometheus buckets are "le": a value equal to a bound belongs to that bucket.
        self.counts[bisect_left(self.bounds, value)] += weight
        self.total += value * weight
        self.count += weight

    def observe_each(self, values: Sequence[float], weight: float) -> None:
        """`observe` of each value in turn (the same sums, in the same order), with the lookups
        hoisted out of the loop: the ingest path's per-series update."""
        counts, bounds, total, count = self.counts, self.bounds, self.total, self.count
        for value in values:
            counts[bisect_left(bounds, value)] += weight
            total += value * weight
            count += weight
        self.total, self.count = total, count

    def observe_many(self, values: np.ndarray) -> None:
        arr = np.asarray(values, dtype=np.float64)
        idx = np.searchsorted(np.asarray(self.bounds), arr, side="left")
        for i, c in enumerate(np.bincount(idx, minlength=len(self.counts)).tolist()):
            self.counts[i] += c
        self.total += float(arr.sum())
        self.count += float(arr.size)

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, cumulative count) pairs including +Inf, as Prometheus exposes them."""
        out: list[tuple[str, float]] = []
        running = 0.0
        for bound, c in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += c
            out.append(("+Inf" if math.isinf(bound) else repr(bound), running))
        return out
