"""Triton's trace rate, found from what the exporter already sees, so nobody has to configure it.

With `--trace-config rate=N` Triton traces one request in N, so the latency histogram sees a
sample. The stats poller reads how many requests each pod served, and the span joiner counts how
many of them arrived traced. Their ratio over the last few minutes is N. Each traced request then
counts N times in the histogram, so `rate(tidescale_request_duration_seconds_count)` is the request
rate and not the traced rate.

The ratio moves for reasons that are not a new rate. Spans arrive seconds after the stats count
their requests. A model reloads and its counters restart. A proxy drops spans. So:
- the estimate snaps to Triton's whole-number rate when it is within 10 % of one;
- a counter reset starts the window over (never a negative count);
- more traces than requests reads as rate 1 (never a weight below 1), with no confidence when
  it is more than 10 % more;
- with too few traced requests the last estimate is kept, else the configured rate;
- an estimate within 25 % of the configured rate confirms it, and one farther away replaces it
  only once the window holds 120 traced requests over at least a minute (spans lag their requests,
  which reads high while traffic ramps up: a 100 read as 107 to 119 in the overhead bench; and
  Triton posts its spans in lumps up to 5 s apart, which read a 10 as 20 over the first 10 s).
Weights apply only to requests observed from then on, so a rate changed at run time never turns
counts already exported into negative or inflated ones.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tidescale.contracts import catalog

# (namespace, pod, model, version): one Triton pod's model version, as both the poller and the
# span attribution name it.
RateKey = tuple[str, str, str, str]
SNAP_TOLERANCE = 0.1
# An estimate this close to the configured rate confirms it: the lag of spans behind the request
# counters reads high while traffic ramps up (+7 % for a 5 s lag over a 50 s burst), and the rate
# Triton was given is the better answer then.
AGREE_TOLERANCE = 0.25
# A rate far from the configured one replaces it only from this many times `min_traced` traced
# requests in the window, and only over a window of at least SURE_WINDOW_S: the first estimates of
# a ramp are the most biased. Triton posts its spans when its batch span processor fills or every
# 5 s, so the traced count moves in steps up to 5 s (plus a poll) behind the served count; over the
# first few polls such a step reads a rate of 10 as 14 to 20 (at 1,000 requests a second, 120 traced
# requests are in within 2 s), over a minute it is a few percent.
SURE_TRACED_FACTOR = 4
SURE_WINDOW_S = 60.0
MAX_KEYS = 20_000
# Triton keeps its trace rate in a uint32: a slope that reads a larger N is broken counters, not a rate.
MAX_RATE = 2**32 - 1


@dataclass(frozen=True)
class DetectedRate:
    """N (one request in N traced), how sure the detector is (0..1), and where N came from."""

    rate: float
    confidence: float
    source: str  # "detected", "confirmed" (the estimate agrees with the configured rate) or "configured"


@dataclass
class _History:
    traced: float = 0.0  # traced requests seen so far (running count)
    snapshots: deque[tuple[float, float, float]] = field(default_factory=deque)  # (t, requests, traced) per poll
    last: DetectedRate | None = None


def estimate(points: Sequence[tuple[float, float]], min_traced: float) -> tuple[float, float] | None:
    """(N, confidence) from cumulative (requests served, requests traced) pairs of one window, or
    None when there are too few traced requests to say.

    N is 1 / the least-squares slope of traced on served. Spans arrive a few seconds after the
    stats count their requests; at a steady rate that shifts every traced count by the same amount,
    which moves the line but not its slope, so the lag does not bias N (a plain ratio of the
    window's totals would read it as a higher rate)."""
    if len(points) < 2:
        return None
    requests = [p[0] - points[0][0] for p in points]
    traced = [p[1] - points[0][1] for p in points]
    # Fewer than one request served is no window (counts are whole; a sliver would overflow the scaling).
    if traced[-1] < min_traced or requests[-1] < 1 or not all(map(math.isfinite, requests + traced)):
        return None
    # On a 0..1 scale of the window's totals, so no square overflows whatever the counters say.
    scale_r, scale_t = requests[-1], traced[-1]
    xs, ys = [r / scale_r for r in requests], [t / scale_t for t in traced]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    cov = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = (cov / var if len(points) > 2 and var > 1e-12 else 1.0) * scale_t / scale_r
    if not math.isfinite(slope) or slope <= 0:
        return None
    raw = 1.0 / slope
    if not raw <= MAX_RATE:  # also a slope so small that its inverse is infinite
        return None
    # At rate 1 the ratio scatters around 1 from both sides (spans lag their requests), so a slope
    # a little over 1 is rate 1 like any other, judged by its fit below; only clearly more traces
    # than requests means the windows do not line up (or spans are counted twice).
    if raw < 1.0 - SNAP_TOLERANCE:
        return 1.0, 0.0
    whole = max(1.0, float(round(raw)))
    misfit = abs(raw - whole) / whole
    rate = whole if misfit <= SNAP_TOLERANCE else raw
    # Enough traced requests, and a ratio that sits on a whole number (Triton's rate is one).
    data = min(1.0, traced[-1] / (4.0 * min_traced))
    fit = max(0.0, 1.0 - 2.0 * abs(raw - whole)) if rate == whole else 0.0
    return rate, round(data * fit, 3)


class SampleRateDetector(Collector):
    """Per pod and model version: the trace rate N from served vs traced requests.

    `requests()` is fed by the stats poller (cumulative success + failure counts), `traced()` by
    the latency aggregator for each request-stage sample; `rate()` answers the weight of the next
    traced request. A prometheus-client collector of the detected rate and its confidence."""

    def __init__(self, configured: int = 1, window_s: float = 300.0, min_traced: int = 30,
                 max_keys: int = MAX_KEYS, clock: Callable[[], float] = time.monotonic) -> None:
        if configured < 1 or window_s <= 0 or min_traced < 1:
            raise ValueError("configured rate, window and min_traced must be positive")
        self.configured = DetectedRate(float(configured), 0.0, "configured")
        self.window_s = window_s
        self.min_traced = min_traced
        self.max_keys = max_keys
        self.clock = clock
        self._keys: dict[RateKey, _History] = {}
        self._lock = threading.Lock()

    def _history(self, key: RateKey) -> _History | None:
        history = self._keys.get(key)
        if history is None and len(self._keys) < self.max_keys:
            history = self._keys[key] = _History()
        return history

    def traced(self, key: RateKey, n: int = 1) -> None:
        with self._lock:
            history = self._history(key)
            if history is not None:
                history.traced += n

    def weigh_batch(self, traced: Mapping[RateKey, int], keys: Iterable[RateKey]) -> dict[RateKey, float]:
        """The weight (rate N) of each of *keys*' samples in one body, counting *traced* request
        samples per key first: one lock hold per body on the ingest path."""
        weights: dict[RateKey, float] = {}
        with self._lock:
            for key in keys:
                n = traced.get(key, 0)
                history = self._history(key) if n else self._keys.get(key)
                if history is not None:
                    history.traced += n
                weights[key] = (history.last.rate if history is not None and history.last is not None
                                else self.configured.rate)
        return weights

    def requests(self, key: RateKey, total: float, now: float | None = None) -> None:
        """One poll's cumulative request count of *key*; re-estimates its rate."""
        now = self.clock() if now is None else now
        if not math.isfinite(total) or total < 0:
            return
        with self._lock:
            history = self._history(key)
            if history is None:
                return
            snaps = history.snapshots
            if snaps and total < snaps[-1][1]:  # counters restarted (model reload, pod restart)
                snaps.clear()
            snaps.append((now, total, history.traced))
            while len(snaps) > 2 and snaps[1][0] <= now - self.window_s:
                snaps.popleft()
            found = estimate([(r, t) for _, r, t in snaps], self.min_traced)
            if found is not None:
                history.last = self._decide(found, snaps[-1][2] - snaps[0][2], snaps[-1][0] - snaps[0][0],
                                            history.last)

    def _decide(self, found: tuple[float, float], traced: float, span_s: float,
                last: DetectedRate | None) -> DetectedRate | None:
        """What a fresh estimate changes: near the configured rate it confirms it (the estimate is
        biased high while traffic ramps up, as spans lag their requests); far from it, it replaces it
        only once the window holds enough traced requests over a long enough time to say (until
        then the last answer stands)."""
        rate, confidence = found
        configured = self.configured.rate
        if abs(rate - configured) <= AGREE_TOLERANCE * configured:
            return DetectedRate(configured, confidence, "confirmed")
        if traced >= SURE_TRACED_FACTOR * self.min_traced and span_s >= SURE_WINDOW_S:
            return DetectedRate(rate, confidence, "detected")
        return last

    def rate(self, key: RateKey) -> DetectedRate:
        with self._lock:
            history = self._keys.get(key)
            return history.last if history is not None and history.last is not None else self.configured

    def detected(self) -> dict[RateKey, DetectedRate]:
        with self._lock:
            return {key: h.last for key, h in self._keys.items() if h.last is not None}

    def forget(self, key: RateKey) -> None:
        with self._lock:
            self._keys.pop(key, None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["namespace", "pod", "model", "version"]
        detected_family = catalog.get("tidescale_trace_sample_rate_detected")
        confidence_family = catalog.get("tidescale_trace_sample_rate_confidence")
        detected = GaugeMetricFamily(detected_family.name, detected_family.help, labels=labels)
        confidence = GaugeMetricFamily(confidence_family.name, confidence_family.help, labels=labels)
        with self._lock:
            rows = [(key, h.last) for key, h in sorted(self._keys.items()) if h.last is not None]
        for key, found in rows:
            detected.add_metric(list(key), found.rate)
            confidence.add_metric(list(key), found.confidence)
        yield detected
        yield confidence
