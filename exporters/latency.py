"""`LatencyAggregator`, the collector the exporter registers: one histogram per (model, version, stage,
namespace, pod, deployment) of the stage samples (`exporters/stages.py`), in the bucket layout of
`exporters/buckets.py`, with the series capped and idle ones dropped.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from tidescale.contracts import catalog
from tidescale.exporters.buckets import BucketHistogram
from tidescale.exporters.cardinality import SeriesCap, clean_label_value
from tidescale.exporters.sample_rate import RateKey, SampleRateDetector
from tidescale.exporters.stages import StageSample


class SeriesDrops(Protocol):
    """Where a capped family reports the samples of a series it refused (the exporter's self-metrics)."""

    def drop_series(self, family: str, n: int = 1) -> None: ...


SeriesKey = tuple[str, str, str, str, str, str]  # model, version, stage, namespace, pod, deployment
SERIES_LABELS = ("model", "version", "stage", "namespace", "pod", "deployment")
EXPOSITION_CHUNK_SERIES = 100  # ~1.6 MB of text per chunk at 128-character model names


@dataclass
class _Series:
    histogram: BucketHistogram
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
    """Per (model, version, stage, namespace, pod, deployment): a classic histogram (quantiles are Prometheus's job).

    Histogram counts are *requests*, not traced requests: with Triton `rate=N` each traced request
    counts N times (the same weight for every bucket, so `histogram_quantile` is unaffected), N being
    what the SampleRateDetector found for its pod and model version, else the configured
    `sample_rate`. `tidescale_trace_sample_rate` shows 1/N in use. Series idle for `idle_ttl_s` are
    removed (their cap slot is freed).
    """

    def __init__(self, bounds: Sequence[float], *, max_series: int = 2000, sample_rate: int = 1,
                 idle_ttl_s: float = 3600.0, selfmetrics: SeriesDrops | None = None,
                 clock: Callable[[], float] = time.monotonic, rates: SampleRateDetector | None = None) -> None:
        self.bounds = tuple(bounds)
        self.cap = SeriesCap(max_series)
        self.sample_rate = sample_rate
        self.rates = rates
        self.idle_ttl_s = idle_ttl_s
        self.selfmetrics = selfmetrics
        self.clock = clock
        self._series: dict[SeriesKey, _Series] = {}
        self._lock = threading.Lock()
        self._hist_family = catalog.get("tidescale_request_duration_seconds")
        self._rate_family = catalog.get("tidescale_trace_sample_rate")

    def observe(self, sample: StageSample) -> bool:
        """Add one stage duration; False when the series cap refused a new series."""
        return self.observe_batch([sample])[0]

    def observe_batch(self, samples: Sequence[StageSample]) -> list[bool]:
        """Add the samples of one body; per sample, False when the series cap refused its series.

        A body holds hundreds of requests of a few models from one pod, so the label values are
        cleaned once per distinct set, the trace rates are weighed in one hold of the detector's
        lock, and the histograms are updated in one hold of ours, series by series (each series'
        samples in their order, so the sums are those of one sample at a time)."""
        cleaned: dict[tuple[str, str, str, str, str], tuple[str, str, str, str, str]] = {}
        traced: Counter[RateKey] = Counter()
        by_series: dict[SeriesKey, list[int]] = {}  # the indices of each series' samples, in order
        for i, s in enumerate(samples):
            raw = (s.model, s.version, s.namespace, s.pod, s.deployment)
            prefix = cleaned.get(raw)
            if prefix is None:
                prefix = cleaned[raw] = (clean_label_value(s.model), clean_label_value(s.version),
                                         clean_label_value(s.namespace), clean_label_value(s.pod),
                                         clean_label_value(s.deployment))
            model, version, namespace, pod, deployment = prefix
            key = (model, version, s.stage, namespace, pod, deployment)
            members = by_series.get(key)
            if members is None:
                by_series[key] = [i]
            else:
                members.append(i)
            if s.stage == "request":
                traced[(namespace, pod, model, version)] += 1
        rate_keys = {(p[2], p[3], p[0], p[1]) for p in cleaned.values()}
        weights = (dict.fromkeys(rate_keys, float(self.sample_rate)) if self.rates is None
                   else self.rates.weigh_batch(traced, rate_keys))
        now = self.clock()
        accepted = [True] * len(samples)
        with self._lock:
            for key, members in by_series.items():
                series = self._series.get(key)
                if series is None:
                    if not self.cap.admit(key):
                        if self.selfmetrics is not None:
                            self.selfmetrics.drop_series(self._hist_family.name, len(members))
                        for i in members:
                            accepted[i] = False
                        continue
                    series = self._series[key] = _Series(BucketHistogram(self.bounds), now,
                                                         label_text(SERIES_LABELS, key))
                model, version, _stage, namespace, pod, _deployment = key
                series.histogram.observe_each([samples[i].seconds for i in members],
                                              weights[(namespace, pod, model, version)])
                series.last_seen = now
        return accepted

    def _rates_in_use(self) -> dict[tuple[str, str, str], float]:
        """(model, version, namespace) -> the N of its most confidently detected pod."""
        if self.rates is None:
            return {}
        best: dict[tuple[str, str, str], tuple[float, float]] = {}
        for (namespace, _pod, model, version), found in self.rates.detected().items():
            key = (model, version, namespace)
            if key not in best or found.confidence > best[key][1]:
                best[key] = (found.rate, found.confidence)
        return {key: rate for key, (rate, _) in best.items()}

    def observe_all(self, samples: Iterable[StageSample]) -> int:
        """Observe every sample; returns how many were refused by the cap."""
        return self.observe_batch(list(samples)).count(False)

    def _expire_idle(self, now: float) -> None:
        for key in [k for k, s in self._series.items() if now - s.last_seen > self.idle_ttl_s]:
            del self._series[key]
            self.cap.release(key)

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
        hist = HistogramMetricFamily(self._hist_family.name, self._hist_family.help, labels=list(SERIES_LABELS))
        rate = GaugeMetricFamily(self._rate_family.name, self._rate_family.help,
                                 labels=["model", "version", "namespace"])
        models: set[tuple[str, str, str]] = set()
        for key, series in self._snapshot():
            with self._lock:  # per series, so ingest never waits for a whole scrape
                cumulative, total = series.histogram.cumulative(), series.histogram.total
            hist.add_metric(list(key), cumulative, total)
            models.add((key[0], key[1], key[3]))
        in_use = self._rates_in_use()
        for model, version, namespace in sorted(models):
            n = in_use.get((model, version, namespace), self.sample_rate)
            rate.add_metric([model, version, namespace], 1.0 / n)
        yield hist
        yield rate

    def exposition(self) -> str:
        """The two families in Prometheus text format (the samples `collect` yields)."""
        return b"".join(self.exposition_chunks()).decode()

    def exposition_chunks(self, series_per_chunk: int = EXPOSITION_CHUNK_SERIES) -> Iterator[bytes]:
        """`exposition` as UTF-8 chunks of about *series_per_chunk* series' histogram lines each.

        Written directly: each series' label text is escaped once when the series is created and
        the bucket bounds once here, so a scrape costs one f-string per line instead of
        prometheus-client's per-sample objects, label dicts and escaping (10x at 2,000 series).
        Chunks, not one string: no single join, encode or socket write of the whole scrape holds
        the GIL (or the event loop) for long. The lock is taken per series, so ingest waits at
        most one series' copy of its counts.
        """
        hist_name, rate_name = self._hist_family.name, self._rate_family.name
        les = [f'le="{"+Inf" if math.isinf(b) else repr(b)}"' for b in (*self.bounds, math.inf)]
        hist = [_header(hist_name, self._hist_family.help, "histogram")]
        models: set[tuple[str, str, str]] = set()
        for n, (key, series) in enumerate(self._snapshot(), start=1):
            with self._lock:
                counts, total, count = list(series.histogram.counts), series.histogram.total, series.histogram.count
            lab = series.labels
            running = 0.0
            for le, c in zip(les, counts, strict=True):
                running += c
                hist.append(f"{hist_name}_bucket{{{lab},{le}}} {floatToGoString(running)}\n")
            hist.append(f"{hist_name}_count{{{lab}}} {floatToGoString(count)}\n"
                        f"{hist_name}_sum{{{lab}}} {floatToGoString(total)}\n")
            models.add((key[0], key[1], key[3]))
            if n % series_per_chunk == 0:
                yield "".join(hist).encode()
                hist = []
        yield "".join(hist).encode()
        in_use = self._rates_in_use()
        rate = [_header(rate_name, self._rate_family.help, "gauge")]
        rate += [f"{rate_name}{{{label_text(('model', 'version', 'namespace'), model_key)}}} "
                 f"{floatToGoString(1.0 / in_use.get(model_key, self.sample_rate))}\n"
                 for model_key in sorted(models)]
        yield "".join(rate).encode()
