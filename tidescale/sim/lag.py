"""What a controller sees of the fleet: counters scraped every interval, read through PromQL-like
`rate()` and last-sample gauges, and a further polling delay (prometheus-adapter / KEDA / HPA)."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Callable

from tidescale.contracts.errors import UsageError
from tidescale.sim.fleet import FleetSim
from tidescale.sim.results import FleetCounters

LOOKBACK_S = 300.0  # Prometheus' default lookback delta for instant vectors

Extractor = Callable[[FleetSim, FleetCounters], float]

DEFAULT_EXTRACTORS: dict[str, Extractor] = {
    "requests": lambda s, c: float(c.requests),
    "failures": lambda s, c: float(c.failures),
    "inference_count": lambda s, c: float(c.inference_count),
    "exec_count": lambda s, c: float(c.exec_count),
    "request_duration_s": lambda s, c: c.request_duration_s,
    "queue_duration_s": lambda s, c: c.queue_duration_s,
    "compute_duration_s": lambda s, c: c.compute_duration_s,
    "busy_seconds": lambda s, c: c.busy_seconds,
    "cpu_seconds": lambda s, c: c.cpu_seconds,
    "pending": lambda s, c: float(c.pending),
    "replicas_ready": lambda s, c: float(s.replicas_ready),
    "replicas_total": lambda s, c: float(s.replicas_total),
}


def prom_rate(times: list[float], values: list[float], range_start: float, range_end: float,
              is_counter: bool = True) -> float | None:
    """PromQL `rate()` over the samples in (range_start, range_end], with its extrapolation.

    Mirrors Prometheus' extrapolatedRate: counter resets are corrected, the sampled interval is
    extrapolated to the window edges when the first/last sample lies within 1.1 average intervals
    of them (else by half an interval), and a counter is not extrapolated below zero.
    """
    lo = bisect.bisect_right(times, range_start)
    hi = bisect.bisect_right(times, range_end)
    if hi - lo < 2:
        return None
    ts, vs = times[lo:hi], values[lo:hi]
    delta = vs[-1] - vs[0]
    if is_counter:
        delta += sum(prev for prev, cur in itertools.pairwise(vs) if cur < prev)
    sampled = ts[-1] - ts[0]
    if sampled <= 0:
        return None
    avg = sampled / (len(ts) - 1)
    to_start, to_end = ts[0] - range_start, range_end - ts[-1]
    threshold = avg * 1.1
    if to_start >= threshold:
        to_start = avg / 2
    if is_counter and delta > 0 and vs[0] >= 0:
        to_zero = sampled * (vs[0] / delta)
        to_start = min(to_start, to_zero)
    if to_end >= threshold:
        to_end = avg / 2
    factor = (sampled + to_start + to_end) / sampled
    return delta * factor / (range_end - range_start)


class ScrapedSeries:
    """Samples of one value, as Prometheus stores them (bounded by retention_s)."""

    def __init__(self, retention_s: float = 3600.0) -> None:
        self.retention_s = retention_s
        self.times: deque[float] = deque()
        self.values: deque[float] = deque()

    def record(self, t: float, value: float) -> None:
        if self.times and t <= self.times[-1]:
            raise UsageError(f"scrape at {t}s is not after the previous one at {self.times[-1]}s")
        self.times.append(t)
        self.values.append(value)
        while self.times and self.times[0] < t - self.retention_s:
            self.times.popleft()
            self.values.popleft()

    def last(self, at_t: float) -> float | None:
        """The gauge value an instant query at *at_t* returns (last sample within the lookback)."""
        i = bisect.bisect_right(self.times, at_t) - 1
        if i < 0 or self.times[i] < at_t - LOOKBACK_S:
            return None
        return self.values[i]

    def rate(self, window_s: float, at_t: float) -> float | None:
        """`rate(x[window])` evaluated at *at_t* (None when fewer than two samples are in range)."""
        lo = bisect.bisect_right(self.times, at_t - window_s)
        hi = bisect.bisect_right(self.times, at_t)
        ts = [self.times[k] for k in range(lo, hi)]
        vs = [self.values[k] for k in range(lo, hi)]
        return prom_rate(ts, vs, at_t - window_s, at_t)


class MetricsLag:
    """Drives a FleetSim and scrapes it every scrape_interval_s; reads are delay_s stale.

    Use `advance(to_t)` instead of `sim.advance` so scrapes happen at their exact instants:
    offset_s + k x scrape_interval_s (Prometheus spreads its targets' scrapes over the interval).
    """

    def __init__(self, sim: FleetSim, scrape_interval_s: float = 15.0, delay_s: float = 0.0,
                 retention_s: float = 3600.0, extractors: dict[str, Extractor] | None = None,
                 offset_s: float = 0.0) -> None:
        if scrape_interval_s <= 0:
            raise UsageError(f"scrape_interval_s must be > 0, got {scrape_interval_s}")
        if not (math.isfinite(offset_s) and 0 <= offset_s < scrape_interval_s):
            raise UsageError(f"offset_s must be in [0, scrape_interval_s), got {offset_s}")
        if delay_s < 0:
            raise UsageError(f"delay_s must be >= 0, got {delay_s}")
        self.sim = sim
        self.scrape_interval_s = scrape_interval_s
        self.delay_s = delay_s
        self.extractors = dict(DEFAULT_EXTRACTORS if extractors is None else extractors)
        self.series = {name: ScrapedSeries(retention_s) for name in self.extractors}
        self.next_scrape = offset_s + math.ceil((sim.now - offset_s) / scrape_interval_s) * scrape_interval_s

    def advance(self, to_t: float) -> None:
        while self.next_scrape <= to_t:
            self.sim.advance(self.next_scrape)
            self.scrape()
            self.next_scrape += self.scrape_interval_s
        self.sim.advance(to_t)

    def scrape(self) -> None:
        counters = self.sim.counters()
        for name, fn in self.extractors.items():
            self.series[name].record(self.sim.now, fn(self.sim, counters))

    def _series(self, name: str) -> ScrapedSeries:
        try:
            return self.series[name]
        except KeyError:
            raise UsageError(f"unknown series {name!r}; known: {', '.join(sorted(self.series))}") from None

    @property
    def seen_at(self) -> float:
        """The time the controller's view corresponds to."""
        return self.sim.now - self.delay_s

    def rate(self, name: str, window_s: float) -> float | None:
        return self._series(name).rate(window_s, self.seen_at)

    def gauge(self, name: str) -> float | None:
        return self._series(name).last(self.seen_at)

    def ratio_of_rates(self, num: str, den: str, window_s: float) -> float | None:
        """e.g. average queue time: rate(queue_duration_s) / rate(requests); None when idle."""
        n, d = self.rate(num, window_s), self.rate(den, window_s)
        if n is None or d is None or d <= 0:
            return None
        return n / d
