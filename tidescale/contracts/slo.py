"""The latency SLO, once: every component that needs it reads it from here.

The exporter's histogram places a bucket boundary exactly on each threshold, the alert rules
count requests below `le="<threshold>"`, the recommender sizes for the P99 target and the chart
ships the same defaults. A threshold that is not a bucket boundary cannot be measured (the rules
would interpolate), so `threshold_problems` is checked wherever thresholds and buckets meet.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# The P99 latency a model must stay under (seconds): alerts page on its burn, the recommender
# scales for it, dashboards draw it.
SLO_P99_S: Final = 0.5
# Histogram boundaries the burn-rate rules may select (`le`): SLO_P99_S and the usual per-model
# alternatives. Per-model thresholds must be one of these.
SLO_THRESHOLDS_S: Final[tuple[float, ...]] = (0.1, 0.25, 0.5, 1.0)
# The window of the recorded P50/P95/P99 (`namespace_model:…:p99`).
QUANTILE_WINDOW: Final = "5m"
QUANTILE_WINDOW_S: Final = 300.0


def threshold_problems(thresholds: Iterable[float], boundaries: Iterable[float]) -> list[str]:
    """One message per SLO threshold that is not exactly a histogram bucket boundary."""
    bounds = {float(b) for b in boundaries}
    listed = ", ".join(f"{b:g}" for b in sorted(bounds))
    return [f"SLO threshold {t:g}s is not a histogram bucket boundary (boundaries: {listed})"
            for t in sorted(set(thresholds)) if float(t) not in bounds]


assert not threshold_problems([SLO_P99_S], SLO_THRESHOLDS_S), "the SLO must be one of the bucket boundaries"
