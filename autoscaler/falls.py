"""A steady fall of the arrivals: the one kind of drop the scale-down need not wait out (pure).

The down delay (60 s) and the band between scaling up at 0.9 and down at 0.8 of the capacity keep a
fleet through a dip that comes back: a lull of a minute or two, a bursty trace's trough, the gap
between two waves of a surge. Without them the benchmark's lulls lost 17-18 points of requests and
the Azure trace half a point to a point. On a day's fall they are pure cost: the rate goes down
minute after minute, the fleet follows a delay and a band behind it, and that was most of the
diurnal day's distance from the optimum (docs/autoscale-benchmark.md, "Where the day's cost goes").

At the moment a lull begins it reads like the start of a fall, so the moment cannot tell them
apart; the minutes before it can. A day's fall is a line: over the last minutes (`fall_window_s`,
4 by default) the rate readings lie close to a straight, falling line. A lull is a step in a flat
minute (the rate window turns it into a 60 s ramp at the end of a flat stretch), and a bursty trace
wanders: neither fits a line well. So a fall is a least-squares line through the window's readings
that explains at least `min_fit` of their variance (R²) and drops at least `MIN_DROP` of their mean
over the window: a flat, noisy rate does not count whatever its fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIN_DROP = 0.05  # the line must fall at least this share of the window's mean over the window
MIN_READINGS = 4  # fewer points always fit a line (two of them exactly)
SPAN_SHARE = 0.95  # the readings must span this much of the window (evaluations drift by milliseconds)


@dataclass(frozen=True)
class Line:
    """The least-squares line through (t, value) samples: the recommender's 30 s trend reads its
    slope, the steady fall its slope, level and fit as well."""

    slope: float  # units per second
    mean: float  # the samples' mean value
    fit: float  # R²: the share of the values' variance the line explains; 0 for constant values


def line_fit(samples: Sequence[tuple[float, float]]) -> Line | None:
    """The least-squares line through *samples*; None when their times do not spread (fewer than
    two distinct ones), where no slope is defined."""
    n = len(samples)
    if n < 2:
        return None
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    stt = sum((t - mt) ** 2 for t, _ in samples)
    if stt <= 0:
        return None
    stv = sum((t - mt) * (v - mv) for t, v in samples)
    svv = sum((v - mv) ** 2 for _, v in samples)
    return Line(slope=stv / stt, mean=mv, fit=stv * stv / (stt * svv) if svv > 0 else 0.0)


def steady_fall(samples: Sequence[tuple[float, float]], window_s: float, min_fit: float) -> bool:
    """Whether the (t, arrival rate) *samples*, oldest first and within the last *window_s*, fall
    along a line that explains at least *min_fit* of their variance and drops at least `MIN_DROP`
    of their mean over *window_s*. False until they span the window."""
    if len(samples) < MIN_READINGS or not samples[-1][0] - samples[0][0] >= SPAN_SHARE * window_s:
        return False
    line = line_fit(samples)
    if line is None or line.mean <= 0 or line.fit <= 0:
        return False
    return -line.slope * window_s >= MIN_DROP * line.mean and line.fit >= min_fit
