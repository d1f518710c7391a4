"""The exporter's own health: metrics, structured logs and OpenTelemetry traces of its work.

Metrics: one small collector instead of prometheus-client's global metric objects, so every
app (and every test) owns its registry and counts start at zero; names come from the catalog.
Logs: one JSON object per line (`extra={"fields": {...}}` adds keys). Traces: only when
`OTEL_EXPORTER_OTLP_ENDPOINT` is set, via opentelemetry-sdk's OTLP/HTTP exporter.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from tidescale.contracts import catalog
from tidescale.exporters.buckets import BucketHistogram

POLL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MAX_TARGET_SERIES = 1000
MAX_REASONS = 50


def _family(name: str) -> tuple[str, str]:
    fam = catalog.get(name)
    return fam.name, fam.help


def labelled_counter(name: str, labels: list[str], values: Mapping[tuple[str, ...], float]) -> CounterMetricFamily:
    """The catalog family *name* as a counter with one sample per key of *values* (sorted)."""
    fam_name, help_ = _family(name)
    counter = CounterMetricFamily(fam_name.removesuffix("_total"), help_, labels=labels)
    for key, n in sorted(values.items()):
        counter.add_metric(list(key), n)
    return counter


class SelfMetrics(Collector):
    """Counters the service, the span joiner, the poller and the profile store update."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans_accepted = 0
        self.spans_dropped: Counter[str] = Counter()
        self.ingest_cpu_s: dict[str, float] = {}
        self.profile_bytes = 0
        self.series_dropped: Counter[str] = Counter()
        self.poll_errors: Counter[tuple[str, str]] = Counter()
        self.poll_durations: dict[str, BucketHistogram] = {}
        self.targets = 0

    def accept_spans(self, n: int) -> None:
        with self._lock:
            self.spans_accepted += n

    def add_ingest_cpu(self, source: str, seconds: float) -> None:
        """CPU seconds one thread spent ingesting traces from *source* (`otlp`, `trace_file`): the
        exporter's cost per traced request without its idle work, which a process's CPU clock mixes in."""
        with self._lock:
            self.ingest_cpu_s[source] = self.ingest_cpu_s.get(source, 0.0) + seconds

    def drop_spans(self, reason: str, n: int = 1) -> None:
        with self._lock:
            if reason in self.spans_dropped or len(self.spans_dropped) < MAX_REASONS:
                self.spans_dropped[reason] += n

    def drop_series(self, family: str, n: int = 1) -> None:
        with self._lock:
            self.series_dropped[family] += n

    def add_profile_bytes(self, n: int) -> None:
        with self._lock:
            self.profile_bytes += n

    def observe_poll(self, target: str, seconds: float, error_reason: str | None = None) -> None:
        """Record one statistics poll of *target* (for the stats poller)."""
        with self._lock:
            hist = self.poll_durations.get(target)
            if hist is None:
                if len(self.poll_durations) >= MAX_TARGET_SERIES:
                    self.series_dropped[catalog.get("tidescale_exporter_poll_duration_seconds").name] += 1
                    return
                hist = self.poll_durations[target] = BucketHistogram(POLL_BUCKETS)
            hist.observe(seconds)
            if error_reason is not None:
                self.poll_errors[(target, error_reason)] += 1

    def count_poll_error(self, target: str, reason: str, n: int = 1) -> None:
        """A failure inside a poll that did not fail the poll (a malformed model config, *n* refused entries)."""
        with self._lock:
            if target in self.poll_durations or len(self.poll_durations) < MAX_TARGET_SERIES:
                self.poll_errors[(target, reason)] += n

    def forget_target(self, target: str) -> None:
        """Remove a vanished target's series."""
        with self._lock:
            self.poll_durations.pop(target, None)
            for key in [k for k in self.poll_errors if k[0] == target]:
                del self.poll_errors[key]

    def set_targets(self, n: int) -> None:
        with self._lock:
            self.targets = n

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        with self._lock:
            name, help_ = _family("tidescale_exporter_spans_accepted_total")
            yield CounterMetricFamily(name.removesuffix("_total"), help_, value=self.spans_accepted)
            yield labelled_counter("tidescale_exporter_spans_dropped_total", ["reason"],
                                    {(r,): n for r, n in self.spans_dropped.items()})
            yield labelled_counter("tidescale_exporter_ingest_cpu_seconds_total", ["source"],
                                    {(s,): cpu for s, cpu in self.ingest_cpu_s.items()})
            name, help_ = _family("tidescale_exporter_profile_bytes_total")
            yield CounterMetricFamily(name.removesuffix("_total"), help_, value=self.profile_bytes)
            yield labelled_counter("tidescale_exporter_series_dropped_total", ["family"],
                                    {(f,): n for f, n in self.series_dropped.items()})
            yield labelled_counter("tidescale_exporter_poll_errors_total", ["target", "reason"],
                                    {key: n for key, n in self.poll_errors.items()})
            name, help_ = _family("tidescale_exporter_poll_duration_seconds")
            polls = HistogramMetricFamily(name, help_, labels=["target"])
            for target, hist in sorted(self.poll_durations.items()):
                polls.add_metric([target], hist.cumulative(), hist.total)
            yield polls
            name, help_ = _family("tidescale_exporter_targets")
            yield GaugeMetricFamily(name, help_, value=self.targets)


# --- logs and traces -------------------------------------------------------------------------------

class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message and the record's `fields`."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(fmt: str = "json", level: int = logging.INFO) -> None:
    """Route the `tidescale` loggers to stderr in *fmt* ("json" or "text"), once."""
    logger = logging.getLogger("tidescale")
    logger.setLevel(level)
    for handler in list(logger.handlers):
        if getattr(handler, "_tidescale", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler()
    handler._tidescale = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s %(fields)s", defaults={"fields": ""}))
    logger.addHandler(handler)
    logger.propagate = False


_TRACER_PROVIDER: Any = None


def self_tracer() -> trace.Tracer:
    """A tracer exporting over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set, else a no-op."""
    global _TRACER_PROVIDER
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return trace.NoOpTracer()
    if _TRACER_PROVIDER is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": "tidescale-exporter"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _TRACER_PROVIDER = provider
    return _TRACER_PROVIDER.get_tracer("tidescale.exporter")  # type: ignore[no-any-return]
