"""Burst sizing: how much more than the smoothed rate a fleet must carry for the bursts seen (pure).

The capacity profile is measured with Poisson arrivals at a steady rate, so the margin a fleet needs
over the rate it is sized on depends on the traffic, not on a constant: a smooth stream needs little,
a bursty one (the Azure trace's 2 s rate swings by 20 % around its minute) needs more, and sizing
both at one fixed utilisation makes the first fat and the second thin. A burst shorter than a cold
start cannot be chased; only standing capacity meets it.

`burst_factor` replays the arrival rates of the last minutes (the fast path's reading per interval),
each divided by its level (the larger of the means over the half-minute before it and after it: the
trend the projection already follows, and a step to a new level, are not bursts), through a fluid
queue served at f times that level, and returns the smallest f at which at
most `late_share` of the arrivals wait longer than `delay_s`. The queue is the fleet's work beyond
the profile's own Poisson noise: a burst of 30 % for 2 s at f = 1 leaves 0.6 s of work, which every
request behind it waits on top of the profile's P99.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from itertools import pairwise

MIN_SPAN_S = 120.0  # readings needed before the factor counts: two minutes of them
SEARCH_STEPS = 24  # bisection steps: the factor to within (max - 1) / 2^24
MAX_CACHED = 64  # delay budgets whose factor is kept between refreshes
MAX_READINGS = 4096  # held at most, whatever the window and the fast path's interval (memory and time bound)


def level_means(rates: Sequence[float], half: int) -> list[float]:
    """Each reading's level: the larger of the means of the *half* readings before it and of the *half*
    after it (itself in neither; one side at the ends, the reading itself when alone).

    A burst stands above both sides; a step to a new level stands level with the side it belongs to.
    Over a centred mean, the readings just after a 10x step read as a burst of 2x (the mean still held
    the old level), and the step sized the fleet at twice the new level for the whole window."""
    sums = [0.0]
    for r in rates:
        sums.append(sums[-1] + r)
    n = len(rates)
    levels = []
    for i in range(n):
        lo, hi = max(0, i - half), min(n, i + half + 1)
        sides = [(sums[i] - sums[lo]) / (i - lo) if i > lo else None,
                 (sums[hi] - sums[i + 1]) / (hi - i - 1) if hi > i + 1 else None]
        known = [m for m in sides if m is not None]
        levels.append(max(known) if known else rates[i])
    return levels


def late_share(ratios: Sequence[float], dts: Sequence[float], factor: float, delay_s: float) -> float:
    """Share of the arrivals that wait longer than *delay_s* in a fluid queue served at *factor*
    (arrivals and service both in units of the smoothed rate, per reading: *ratios*, over *dts*)."""
    backlog = late = total = 0.0
    for r, dt in zip(ratios, dts, strict=True):
        backlog = max(0.0, backlog + (r - factor) * dt)
        total += r * dt
        if backlog / factor > delay_s:
            late += r * dt
    return late / total if total > 0 else 0.0


def burst_ratios(samples: Sequence[tuple[float, float]], smooth_s: float) -> tuple[list[float], list[float]] | None:
    """Each reading of *samples* (t, arrival rate) over its level (`level_means`, *smooth_s*/2 a side),
    and the span it covers: what the fluid queue of `ratio_factor` is fed. None while they span less
    than `MIN_SPAN_S` or carry no arrivals."""
    if len(samples) < 3 or samples[-1][0] - samples[0][0] < MIN_SPAN_S:
        return None
    times = [t for t, _ in samples]
    rates = [max(0.0, r) for _, r in samples]
    dts = [b - a for a, b in pairwise(times)]
    step = sorted(dts)[len(dts) // 2]  # the readings' usual interval
    if not step > 0:
        return None
    means = level_means(rates, max(1, round(smooth_s / 2 / step)))
    pairs = [(r / m, dt) for r, m, dt in zip(rates[1:], means[1:], dts, strict=True) if m > 0]
    if not pairs:
        return None
    return [r for r, _ in pairs], [dt for _, dt in pairs]


def ratio_factor(ratios: Sequence[float], spans: Sequence[float], delay_s: float, share: float,
                 max_factor: float) -> float:
    """The smallest factor in [1, *max_factor*] at which at most *share* of the arrivals (*ratios* over
    *spans*, `burst_ratios`) wait longer than *delay_s*."""
    if late_share(ratios, spans, 1.0, delay_s) <= share:
        return 1.0
    if late_share(ratios, spans, max_factor, delay_s) > share:
        return max_factor
    lo, hi = 1.0, max_factor
    for _ in range(SEARCH_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if late_share(ratios, spans, mid, delay_s) <= share else (mid, hi)
    return hi


def burst_factor(samples: Sequence[tuple[float, float]], smooth_s: float, delay_s: float, share: float,
                 max_factor: float) -> float | None:
    """The smallest factor in [1, *max_factor*] over the level (`level_means`, *smooth_s*/2 a side) that keeps the
    share of arrivals delayed beyond *delay_s* at most *share*, on *samples* of (t, arrival rate).
    None while they span less than `MIN_SPAN_S` or carry no arrivals."""
    found = burst_ratios(samples, smooth_s)
    return None if found is None else ratio_factor(*found, delay_s, share, max_factor)


class BurstProfile:
    """The fast path's arrival readings over the last `window_s`, and the burst factor they ask for
    (recomputed at most once per `refresh_s`: a slow evaluation reads it, the fast path feeds it)."""

    def __init__(self, window_s: float, smooth_s: float, share: float, max_factor: float,
                 refresh_s: float = 10.0) -> None:
        self.window_s, self.smooth_s = window_s, smooth_s
        self.share, self.max_factor, self.refresh_s = share, max_factor, refresh_s
        self._samples: deque[tuple[float, float]] = deque(maxlen=MAX_READINGS)
        self._cached_at = -math.inf
        self._cached: dict[float, float] = {}  # delay budget -> factor, since `_cached_at`
        self._ratios: tuple[list[float], list[float]] | None = None  # `burst_ratios`, since `_cached_at`

    def add(self, t: float, rps: float | None) -> None:
        """One reading of the fleet's arrival rate over the fast path's newest interval; none or a
        non-finite one is skipped (a pod that did not answer keeps its last rate in the reading)."""
        if rps is None or not math.isfinite(rps) or rps < 0 or (self._samples and t <= self._samples[-1][0]):
            return
        self._samples.append((t, rps))
        while self._samples[0][0] < t - self.window_s:
            self._samples.popleft()

    def factor(self, t: float, delay_s: float) -> float | None:
        """The burst factor of the readings held for a delay budget of *delay_s* (None until they span
        `MIN_SPAN_S`). Each budget asked for is kept for `refresh_s` (queue sizing asks for several)."""
        if not 0 <= t - self._cached_at < self.refresh_s:
            self._cached_at, self._cached = t, {}
            self._ratios = burst_ratios(list(self._samples), self.smooth_s)  # once per refresh, for every budget
        if self._ratios is None:
            return None
        if delay_s not in self._cached:
            if len(self._cached) >= MAX_CACHED:  # a budget per SLO seen: bounded whatever the SLO does
                self._cached.clear()
            self._cached[delay_s] = ratio_factor(*self._ratios, delay_s, self.share, self.max_factor)
        return self._cached[delay_s]
