"""Mergeable latency structures: a relative-error sketch, SLO-aware log buckets, a sliding window.

Why two structures: Prometheus can only add histograms across pods (`sum by (le)`), so the
classic histogram is what dashboards and alerts aggregate; its quantiles are only as good as
the buckets. The sketch (DDSketch-style, relative error α) merges exactly across pods and
intervals, so the exporter can publish fleet quantiles with ≤ α error without any buckets.
The pure structures come first; `LatencyAggregator` (the Prometheus collector the service
registers) keeps one histogram and one sliding sketch per (model, version, stage, namespace).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from tidescale.contracts import catalog
from tidescale.exporters.cardinality import SeriesCap, clean_label_value


class SeriesDrops(Protocol):
    """Where a capped family reports a series it refused (the exporter's self-metrics)."""

    def drop_series(self, family: str) -> None: ...

DEFAULT_RELATIVE_ACCURACY = 0.005
DEFAULT_MAX_BINS = 2048
# Durations at or below this are counted as "zero" (1 ns: Triton's clock resolution).
MIN_TRACKED_SECONDS = 1e-9


def _zeros(n: int) -> array[float]:
    return array("d", bytes(8 * n))


def _view(counts: array[float]) -> np.ndarray:
    """A numpy view sharing *counts*' memory (for vectorised reads and in-place adds)."""
    return np.frombuffer(counts, dtype=np.float64)


class DDSketch:
    """Log-bucketed quantile sketch: every quantile within `relative_accuracy` of a true value.

    Bucket i holds values in (γ^(i-1), γ^i] with γ = (1+α)/(1-α); the estimate 2γ^i/(γ+1) is
    within α of every value in the bucket. Merging adds bucket counts, so a merge of per-pod
    sketches equals the sketch of all values. Buckets live in a dense array of at most
    `max_bins` consecutive keys (8 bytes each: 2048 bins at α = 0.5 % span a 10^8 range); when
    values need a wider span the lowest buckets collapse into one (tail quantiles keep their
    accuracy; latency SLOs care about the top, not the bottom). Counts are floats so sampled
    data can be weighted.
    """

    __slots__ = ("_counts", "_log_gamma", "_offset", "count", "max_bins", "relative_accuracy", "zero_count")

    def __init__(self, relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
                 max_bins: int = DEFAULT_MAX_BINS) -> None:
        if not 0.0 < relative_accuracy < 1.0:
            raise ValueError(f"relative_accuracy must be in (0, 1), got {relative_accuracy}")
        if max_bins < 2:
            raise ValueError(f"max_bins must be at least 2, got {max_bins}")
        self.relative_accuracy = relative_accuracy
        self.max_bins = max_bins
        gamma = (1.0 + relative_accuracy) / (1.0 - relative_accuracy)
        self._log_gamma = math.log(gamma)
        self._counts = _zeros(0)
        self._offset = 0  # key of _counts[0]
        self.zero_count = 0.0
        self.count = 0.0

    @property
    def bins(self) -> dict[int, float]:
        """Non-empty buckets as {key: count} (for inspection and tests)."""
        return {i + self._offset: c for i, c in enumerate(self._counts) if c}

    @property
    def span(self) -> int:
        """Buckets held in memory (the dense array's length, ≤ max_bins)."""
        return len(self._counts)

    def key(self, value: float) -> int:
        """The bucket index of a positive value."""
        return math.ceil(math.log(value) / self._log_gamma)

    def value_of(self, key: int) -> float:
        """The representative value of bucket *key* (relative error ≤ α for its members)."""
        gamma = math.exp(self._log_gamma)
        return 2.0 * math.exp(key * self._log_gamma) / (gamma + 1.0)

    def _cover(self, low: int, high: int) -> None:
        """Grow the array to hold keys low..high, collapsing the lowest keys beyond max_bins."""
        if not self._counts:
            high = max(high, low)
            low = max(low, high - self.max_bins + 1)
            self._offset, self._counts = low, _zeros(high - low + 1)
            return
        cur_low, cur_high = self._offset, self._offset + len(self._counts) - 1
        new_low, new_high = min(low, cur_low), max(high, cur_high)
        if new_low == cur_low and new_high == cur_high:
            return
        grown = _zeros(new_high - new_low + 1)
        grown[cur_low - new_low: cur_low - new_low + len(self._counts)] = self._counts
        if len(grown) > self.max_bins:
            cut = len(grown) - self.max_bins
            moved = sum(grown[:cut])
            grown = grown[cut:]
            grown[0] += moved
            new_low += cut
        self._offset, self._counts = new_low, grown

    def _index(self, key: int) -> int:
        """Array index of *key*, clamped into the lowest bucket when it was collapsed away."""
        return max(key - self._offset, 0)

    def add(self, value: float, weight: float = 1.0) -> None:
        if not math.isfinite(value) or value < 0.0 or weight <= 0.0:
            return
        if value <= MIN_TRACKED_SECONDS:
            self.zero_count += weight
        else:
            k = math.ceil(math.log(value) / self._log_gamma)
            if not 0 <= k - self._offset < len(self._counts):
                self._cover(k, k)
            self._counts[self._index(k)] += weight
        self.count += weight

    def add_many(self, values: np.ndarray) -> None:
        """Vectorised `add` of unit-weight values (benchmarks feed millions)."""
        arr = np.asarray(values, dtype=np.float64)
        arr = arr[np.isfinite(arr) & (arr >= 0.0)]
        zero = arr <= MIN_TRACKED_SECONDS
        self.zero_count += float(zero.sum())
        self.count += float(arr.size)
        keys = np.ceil(np.log(arr[~zero]) / self._log_gamma).astype(np.int64)
        if keys.size:
            self._cover(int(keys.min()), int(keys.max()))
            idx = np.maximum(keys - self._offset, 0)
            _view(self._counts)[:] += np.bincount(idx, minlength=len(self._counts))

    def merge(self, other: DDSketch) -> None:
        if other._log_gamma != self._log_gamma:
            raise ValueError("cannot merge sketches with different relative accuracy")
        if other._counts:
            other_high = other._offset + len(other._counts) - 1
            self._cover(other._offset, other_high)
            idx = np.maximum(np.arange(other._offset, other_high + 1) - self._offset, 0)
            np.add.at(_view(self._counts), idx, _view(other._counts))
        self.zero_count += other.zero_count
        self.count += other.count

    def quantile(self, q: float) -> float | None:
        """The q-quantile estimate (0 ≤ q ≤ 1), or None for an empty sketch."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {q}")
        if self.count <= 0.0:
            return None
        return self.quantiles_of(_view(self._counts), self._offset, self.zero_count, self.count, (q,))[0]

    def quantiles_of(self, counts: np.ndarray, offset: int, zero_count: float, count: float,
                     qs: Sequence[float]) -> list[float]:
        """Quantiles of dense *counts* (key of counts[0] = *offset*) with this sketch's γ, one cumsum
        for all of *qs* (the scrape path merges a window without building a DDSketch)."""
        cumulative = np.cumsum(counts) + zero_count
        nonzero = np.flatnonzero(counts)
        last = int(nonzero[-1]) if nonzero.size else None
        out = []
        for q in qs:
            rank = q * (count - 1.0)
            if zero_count > rank:
                out.append(0.0)
                continue
            i = int(np.searchsorted(cumulative, rank, side="right"))
            out.append(self.value_of((i if last is None else min(i, last)) + offset))
        return out

    def copy(self) -> DDSketch:
        out = DDSketch(self.relative_accuracy, self.max_bins)
        out._counts = array("d", self._counts)
        out._offset = self._offset
        out.zero_count = self.zero_count
        out.count = self.count
        return out


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


class SlidingSketch:
    """Sketches over a sliding window: a ring of per-interval sketches merged on read.

    Each interval (window / slots seconds) gets its own sketch; reading merges those whose
    interval started within the window, so old data leaves in steps of one interval.
    """

    def __init__(self, window_s: float = 60.0, slots: int = 12,
                 relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
                 max_bins: int = DEFAULT_MAX_BINS) -> None:
        if window_s <= 0 or slots < 1:
            raise ValueError("window_s must be positive and slots at least 1")
        self.interval_s = window_s / slots
        self.slots = slots
        self.relative_accuracy = relative_accuracy
        self.max_bins = max_bins
        self._ring: dict[int, DDSketch] = {}

    def _slot(self, now: float) -> int:
        return math.floor(now / self.interval_s)

    def _expire(self, current: int) -> None:
        for idx in [i for i in self._ring if i <= current - self.slots]:
            del self._ring[idx]

    def add(self, value: float, now: float, weight: float = 1.0) -> None:
        current = self._slot(now)
        sketch = self._ring.get(current)
        if sketch is None:
            self._expire(current)
            sketch = self._ring[current] = DDSketch(self.relative_accuracy, self.max_bins)
        sketch.add(value, weight)

    def quantiles(self, now: float, qs: Sequence[float]) -> list[float] | None:
        """The *qs* quantiles of the last window, equal to `merged(now).quantile(q)` for each q, but
        with one dense sum of the live intervals instead of a DDSketch per merge (the scrape path)."""
        current = self._slot(now)
        self._expire(current)
        live = [s for i, s in self._ring.items() if i <= current and s.count > 0.0]
        if not live:
            return None
        zero = sum(s.zero_count for s in live)
        count = sum(s.count for s in live)
        filled = [s for s in live if s.span]
        if not filled:
            return [0.0 for _ in qs]
        low = min(s._offset for s in filled)
        high = max(s._offset + s.span - 1 for s in filled)
        dense = np.zeros(high - low + 1)
        for s in filled:
            dense[s._offset - low: s._offset - low + s.span] += _view(s._counts)
        if dense.size > self.max_bins:  # as DDSketch._cover: the lowest keys collapse into one
            cut = dense.size - self.max_bins
            dense[cut] += dense[:cut].sum()
            dense, low = dense[cut:], low + cut
        return live[0].quantiles_of(dense, low, zero, count, qs)

    def merged(self, now: float) -> DDSketch:
        """All values of the last window, in one sketch."""
        current = self._slot(now)
        self._expire(current)
        out = DDSketch(self.relative_accuracy, self.max_bins)
        for idx, sketch in self._ring.items():
            if idx <= current:
                out.merge(sketch)
        return out

    def empty(self, now: float) -> bool:
        self._expire(self._slot(now))
        return not self._ring


def merge_all(sketches: Iterable[DDSketch]) -> DDSketch | None:
    """One sketch holding every value of *sketches* (None if there are none)."""
    out: DDSketch | None = None
    for s in sketches:
        if out is None:
            out = s.copy()
        else:
            out.merge(s)
    return out


# --- Triton timestamps → stage durations ------------------------------------------------------

STAGES: tuple[str, ...] = ("request", "queue", "compute_input", "compute_infer", "compute_output")
# stage → (start stamp, end stamp), Triton's TIMESTAMPS names (mode=triton and OTLP events alike).
STAGE_STAMPS: dict[str, tuple[str, str]] = {
    "request": ("REQUEST_START", "REQUEST_END"),
    "queue": ("QUEUE_START", "COMPUTE_START"),
    "compute_input": ("COMPUTE_START", "COMPUTE_INPUT_END"),
    "compute_infer": ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"),
    "compute_output": ("COMPUTE_OUTPUT_START", "COMPUTE_END"),
}


@dataclass(frozen=True, slots=True)
class StageSample:
    """One request's duration in one stage of one model version."""

    model: str
    version: str
    stage: str
    seconds: float
    namespace: str = ""


# A stage longer than this is a broken clock or a forged stamp, never a request: it is not
# measured (the OTLP path rejects and counts such spans before they get here).
MAX_STAGE_SECONDS = 3600
_MAX_STAGE_NS = MAX_STAGE_SECONDS * 1_000_000_000


def stage_durations(stamps: dict[str, int]) -> dict[str, float]:
    """Stage → seconds for every stage whose two stamps (ns) are present, ordered and at most
    MAX_STAGE_SECONDS apart (an integer difference first: a 400-digit stamp never meets a float)."""
    out: dict[str, float] = {}
    for stage, (start, end) in STAGE_STAMPS.items():
        t0 = stamps.get(start)
        t1 = stamps.get(end)
        if t0 is not None and t1 is not None and 0 <= t1 - t0 <= _MAX_STAGE_NS:
            out[stage] = (t1 - t0) / 1e9
    return out


def samples_for(model: str, version: str, stamps: dict[str, int], namespace: str = "") -> list[StageSample]:
    return [StageSample(model, version, stage, secs, namespace)
            for stage, secs in stage_durations(stamps).items()]


# --- the collector -----------------------------------------------------------------------------

QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)
# Per-interval sketch bins: 1024 dense bins (8 KiB) at α = 0.5 % span a 28,000× range at full
# accuracy (lower values collapse), and bound memory at max_series × slots × 8 KiB.
WINDOW_SKETCH_MAX_BINS = 1024
SeriesKey = tuple[str, str, str, str]  # model, version, stage, namespace
SERIES_LABELS = ("model", "version", "stage", "namespace")
EXPOSITION_CHUNK_SERIES = 100  # ~1.6 MB of text per chunk at 128-character model names


@dataclass
class _Series:
    histogram: BucketHistogram
    window: SlidingSketch
    last_seen: float
    labels: str = ""  # the escaped `k="v",…` text of the key, built once for the exposition


def escape_label_value(value: str) -> str:
    """As prometheus-client's text exposition escapes a label value."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def label_text(names: Sequence[str], values: Sequence[str]) -> str:
    return ",".join(f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True))


def _header(name: str, help_: str, kind: str) -> str:
    escaped = help_.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {escaped}\n# TYPE {name} {kind}\n"


class LatencyAggregator(Collector):
    """Per (model, version, stage, namespace): a classic histogram and a sliding-window sketch.

    Histogram counts are *traced* requests: with Triton `rate=N` they are a 1-in-N sample and
    are not scaled (counters stay integers and `histogram_quantile` is unaffected);
    `tidescale_trace_sample_rate` carries 1/N so `rate()` can be scaled when absolute counts
    matter. Series idle for `idle_ttl_s` are removed (their cap slot is freed).
    """

    def __init__(self, bounds: Sequence[float], *, window_s: float = 60.0, slots: int = 12,
                 max_series: int = 2000, sample_rate: int = 1, idle_ttl_s: float = 3600.0,
                 sketch_max_bins: int = WINDOW_SKETCH_MAX_BINS,
                 selfmetrics: SeriesDrops | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bounds = tuple(bounds)
        self.window_s = window_s
        self.slots = slots
        self.sketch_max_bins = sketch_max_bins
        self.cap = SeriesCap(max_series)
        self.sample_rate = sample_rate
        self.idle_ttl_s = idle_ttl_s
        self.selfmetrics = selfmetrics
        self.clock = clock
        self._series: dict[SeriesKey, _Series] = {}
        self._lock = threading.Lock()
        self._hist_family = catalog.get("tidescale_request_duration_seconds")
        self._quantile_family = catalog.get("tidescale_request_duration_quantile_seconds")
        self._rate_family = catalog.get("tidescale_trace_sample_rate")

    def observe(self, sample: StageSample) -> bool:
        """Add one stage duration; False when the series cap refused a new series."""
        key = (clean_label_value(sample.model), clean_label_value(sample.version), sample.stage,
               clean_label_value(sample.namespace))
        now = self.clock()
        with self._lock:
            series = self._series.get(key)
            if series is None:
                if not self.cap.admit(key):
                    if self.selfmetrics is not None:
                        self.selfmetrics.drop_series(self._hist_family.name)
                    return False
                window = SlidingSketch(self.window_s, self.slots, max_bins=self.sketch_max_bins)
                series = self._series[key] = _Series(BucketHistogram(self.bounds), window, now,
                                                     label_text(SERIES_LABELS, key))
            series.histogram.observe(sample.seconds)
            series.window.add(sample.seconds, now)
            series.last_seen = now
        return True

    def observe_all(self, samples: Iterable[StageSample]) -> int:
        """Observe every sample; returns how many were refused by the cap."""
        return sum(0 if self.observe(s) else 1 for s in samples)

    def _expire_idle(self, now: float) -> None:
        for key in [k for k, s in self._series.items() if now - s.last_seen > self.idle_ttl_s]:
            del self._series[key]
            self.cap.release(key)

    def fleet_quantiles(self, model: str, version: str, stage: str) -> dict[float, float]:
        """Quantiles over the window, merged across namespaces (for tests and the CLI)."""
        now = self.clock()
        with self._lock:
            sketches = [s.window.merged(now) for k, s in self._series.items() if k[:3] == (model, version, stage)]
        merged = merge_all(sketches)
        if merged is None:
            return {}
        return {q: v for q in QUANTILES if (v := merged.quantile(q)) is not None}

    def series_count(self) -> int:
        with self._lock:
            return len(self._series)

    def _snapshot(self) -> list[tuple[SeriesKey, _Series]]:
        """The live series, sorted, after idle ones expired (the one long hold of the lock)."""
        with self._lock:
            self._expire_idle(self.clock())
            return sorted(self._series.items())

    def collect(self) -> Iterator[HistogramMetricFamily | GaugeMetricFamily]:
        """The families as prometheus-client objects (for registries and tests); the service's
        /metrics uses `exposition`, which writes the same samples as text far faster."""
        labels = list(SERIES_LABELS)
        hist = HistogramMetricFamily(self._hist_family.name, self._hist_family.help, labels=labels)
        quant = GaugeMetricFamily(self._quantile_family.name, self._quantile_family.help,
                                  labels=[*labels, "quantile"])
        rate = GaugeMetricFamily(self._rate_family.name, self._rate_family.help,
                                 labels=["model", "version", "namespace"])
        now = self.clock()
        models: set[tuple[str, str, str]] = set()
        for key, series in self._snapshot():
            with self._lock:  # per series, so ingest never waits for a whole scrape
                cumulative, total = series.histogram.cumulative(), series.histogram.total
                values = series.window.quantiles(now, QUANTILES)
            hist.add_metric(list(key), cumulative, total)
            for q, value in zip(QUANTILES, values or (), strict=False):
                quant.add_metric([*key, str(q)], value)
            models.add((key[0], key[1], key[3]))
        for model, version, namespace in sorted(models):
            rate.add_metric([model, version, namespace], 1.0 / self.sample_rate)
        yield hist
        yield quant
        yield rate

    def exposition(self) -> str:
        """The three families in Prometheus text format (the samples `collect` yields)."""
        return b"".join(self.exposition_chunks()).decode()

    def exposition_chunks(self, series_per_chunk: int = EXPOSITION_CHUNK_SERIES) -> Iterator[bytes]:
        """`exposition` as UTF-8 chunks of about *series_per_chunk* series' histogram lines each.

        Written directly: each series' label text is escaped once when the series is created and
        the bucket bounds once here, so a scrape costs one f-string per line instead of
        prometheus-client's per-sample objects, label dicts and escaping (10x at 2,000 series).
        Chunks, not one string: no single join, encode or socket write of the whole scrape holds
        the GIL (or the event loop) for long. The lock is taken per series, so ingest waits at
        most one series' quantile merge.
        """
        now = self.clock()
        hist_name, quant_name, rate_name = (self._hist_family.name, self._quantile_family.name,
                                            self._rate_family.name)
        les = [f'le="{"+Inf" if math.isinf(b) else repr(b)}"' for b in (*self.bounds, math.inf)]
        qlabels = [f'quantile="{q}"' for q in QUANTILES]
        hist = [_header(hist_name, self._hist_family.help, "histogram")]
        quant = [_header(quant_name, self._quantile_family.help, "gauge")]
        models: set[tuple[str, str, str]] = set()
        for n, (key, series) in enumerate(self._snapshot(), start=1):
            with self._lock:
                counts, total, count = list(series.histogram.counts), series.histogram.total, series.histogram.count
                values = series.window.quantiles(now, QUANTILES)
            lab = series.labels
            running = 0.0
            for le, c in zip(les, counts, strict=True):
                running += c
                hist.append(f"{hist_name}_bucket{{{lab},{le}}} {floatToGoString(running)}\n")
            hist.append(f"{hist_name}_count{{{lab}}} {floatToGoString(count)}\n"
                        f"{hist_name}_sum{{{lab}}} {floatToGoString(total)}\n")
            for ql, value in zip(qlabels, values or (), strict=False):
                quant.append(f"{quant_name}{{{lab},{ql}}} {floatToGoString(value)}\n")
            models.add((key[0], key[1], key[3]))
            if n % series_per_chunk == 0:
                yield "".join(hist).encode()
                hist = []
        yield "".join(hist).encode()
        yield "".join(quant).encode()
        per_model = floatToGoString(1.0 / self.sample_rate)
        rate = [_header(rate_name, self._rate_family.help, "gauge")]
        rate += [f"{rate_name}{{{label_text(('model', 'version', 'namespace'), model_key)}}} {per_model}\n"
                 for model_key in sorted(models)]
        yield "".join(rate).encode()
