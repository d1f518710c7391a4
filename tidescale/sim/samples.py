"""Quantiles of measured samples, one definition for every measurement outside the product.

The demo's client-side latencies, the load generator's windows, the simulator's results and every
benchmark take their percentiles here. The default is numpy's `linear` (Hyndman & Fan type 7, what
`np.quantile` does); a caller that needs another estimator names it (`higher` for the benchmark's
per-window P99, which must be a latency some request really had; `inverted_cdf` for the soak's
nearest-rank goals), so two numbers side by side were computed the same way or say otherwise.
The product's P99 is Prometheus' `histogram_quantile` over the exporter's buckets, not this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

Method = Literal["linear", "higher", "nearest", "inverted_cdf"]


def sample_quantile(values: Sequence[float] | np.ndarray, q: float, method: Method = "linear") -> float | None:
    """The *q*-quantile (0 <= q <= 1) of *values*; None for no values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is not in [0, 1]")
    if len(values) == 0:
        return None
    return float(np.quantile(np.asarray(values, dtype=float), q, method=method))


def sample_quantiles(values: Sequence[float] | np.ndarray, qs: Sequence[float],
                     method: Method = "linear") -> list[float | None]:
    """`sample_quantile` for each of *qs*, one sort."""
    if len(values) == 0:
        return [None] * len(qs)
    if any(not 0.0 <= q <= 1.0 for q in qs):
        raise ValueError(f"quantiles {list(qs)} are not all in [0, 1]")
    return [float(x) for x in np.quantile(np.asarray(values, dtype=float), list(qs), method=method)]
