"""The latest profile report per model version, exported as op-share gauges.

Uploads (`POST /v1/profiles`) land here through `ingest`. Everything is bounded: the body
(`max_bytes`), what it may inflate to, the number of model versions (`max_models`), the
bytes of the reports held (`max_store_bytes`, measured as their JSON), and the series per
report (op classes plus the top-N ops). When a new version would pass a cap, the least
recently updated versions are evicted (counted as dropped series), so the store never fills
for good; `DELETE /v1/profiles/{model}/{version}` frees a slot at once. Only reports are
kept, never the profiles themselves.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import BinaryIO

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tidescale.contracts import catalog
from tidescale.exporters.cardinality import clean_label_value
from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles.ingest import parse_profile
from tidescale.exporters.profiles.report import ProfileReport
from tidescale.exporters.selfmetrics import SelfMetrics

DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_MAX_INFLATED_BYTES = 1 << 30  # what a gzip upload may inflate to (the rest is a bomb)
DEFAULT_MAX_MODELS = 500
DEFAULT_MAX_STORE_BYTES = 16 << 20  # ~4 KB per report: about 4,000 reports, far above max_models
MAX_NAME_CHARS = 200


def check_label(kind: str, value: str) -> str:
    """A model or version name fit to be a label value; BadInput (400) names the problem."""
    if not value:
        raise BadInput(400, f"{kind} is required")
    if len(value) > MAX_NAME_CHARS:
        raise BadInput(400, f"{kind} is longer than {MAX_NAME_CHARS} characters")
    if not value.isprintable():
        raise BadInput(400, f"{kind} contains control characters (newlines, tabs, …)")
    return value


class ProfileStore(Collector):
    """Latest ProfileReport per (model, version), least recently updated first; a Collector."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, max_models: int = DEFAULT_MAX_MODELS, *,
                 max_inflated_bytes: int | None = None, max_store_bytes: int = DEFAULT_MAX_STORE_BYTES,
                 self_metrics: SelfMetrics | None = None, clock: Callable[[], float] = time.time,
                 namespace: str | None = None) -> None:
        self.max_bytes = max_bytes
        # The serving namespace the profiled models run in (the exporter's kube_namespace): every
        # profile series carries it, so a review alert names the namespace its route is scoped to.
        self.namespace = namespace
        self.max_models = max_models
        self.max_store_bytes = max_store_bytes
        self.max_inflated_bytes = max_inflated_bytes or max(max_bytes, DEFAULT_MAX_INFLATED_BYTES)
        self.self_metrics = self_metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._reports: OrderedDict[tuple[str, str], tuple[ProfileReport, float, int]] = OrderedDict()
        self._bytes = 0
        self.evicted = 0

    def ingest(self, body: bytes | BinaryIO, *, filename: str = "", content_type: str = "", model: str,
               version: str, size: int | None = None) -> ProfileReport:
        """Parse one upload (bytes, or a file of *size* bytes) and make it its version's latest report."""
        check_label("model", model)
        check_label("version", version)
        if isinstance(body, bytes):
            size, body = len(body), io.BytesIO(body)
        if size is not None and size > self.max_bytes:
            raise BadInput(413, f"profile upload of {size} bytes exceeds the {self.max_bytes}-byte limit")
        report = parse_profile(body, filename or _name_hint(content_type), self.max_inflated_bytes)
        report.model, report.version = model, version
        now = self._clock()
        if report.captured_at is None:
            report.captured_at = now
        cost = report_bytes(report)
        if cost > self.max_store_bytes:
            raise BadInput(413, f"the report of {cost} bytes exceeds the store's {self.max_store_bytes}-byte budget")
        with self._lock:
            self._remove((model, version))
            self._evict_for(cost)
            self._reports[(model, version)] = (report, now, cost)
            self._bytes += cost
        if self.self_metrics is not None and size is not None:
            self.self_metrics.add_profile_bytes(size)
        return report

    def _remove(self, key: tuple[str, str]) -> bool:
        entry = self._reports.pop(key, None)
        if entry is not None:
            self._bytes -= entry[2]
        return entry is not None

    def _evict_for(self, cost: int) -> None:
        """Drop the least recently updated versions until one more report of *cost* bytes fits."""
        while self._reports and (len(self._reports) >= self.max_models
                                 or self._bytes + cost > self.max_store_bytes):
            _, (_, _, old_cost) = self._reports.popitem(last=False)
            self._bytes -= old_cost
            self.evicted += 1
            if self.self_metrics is not None:
                self.self_metrics.drop_series(catalog.get("tidescale_op_time_share").name)

    def report(self, model: str, version: str) -> ProfileReport | None:
        with self._lock:
            entry = self._reports.get((model, version))
        return entry[0] if entry else None

    def forget(self, model: str, version: str) -> bool:
        """Delete a version's report; False when there was none."""
        with self._lock:
            return self._remove((model, version))

    @property
    def stored_bytes(self) -> int:
        return self._bytes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            entries = sorted(self._reports.items())
        now = self._clock()
        scope = ["namespace"] if self.namespace else []
        ns = [self.namespace] if self.namespace else []
        share = _gauge("tidescale_op_time_share", [*scope, "model", "version", "op_class"])
        top = _gauge("tidescale_op_top_share", [*scope, "model", "version", "op", "op_class"])
        stamp = _gauge("tidescale_profile_timestamp_seconds", [*scope, "model", "version"])
        age = _gauge("tidescale_profile_age_seconds", [*scope, "model", "version"])
        for (model, version), (report, ingested_at, _) in entries:
            for op_class, value in report.op_class_share.items():
                share.add_metric([*ns, model, version, op_class], value)
            for op in report.top_ops:
                top.add_metric([*ns, model, version, clean_label_value(op.op), op.op_class], op.share)
            stamp.add_metric([*ns, model, version], ingested_at)
            captured = report.captured_at if report.captured_at is not None else ingested_at
            age.add_metric([*ns, model, version], max(0.0, now - captured))
        held = catalog.get("tidescale_exporter_profile_store_bytes")
        yield from (share, top, stamp, age, GaugeMetricFamily(held.name, held.help, value=self._bytes))


def report_bytes(report: ProfileReport) -> int:
    """What a report costs the store: the length of its JSON (strings dominate what it holds)."""
    return len(json.dumps(report.to_json(), allow_nan=False))


def _gauge(name: str, labels: list[str]) -> GaugeMetricFamily:
    fam = catalog.get(name)
    return GaugeMetricFamily(fam.name, fam.help, labels=labels)


def _name_hint(content_type: str) -> str:
    """A file-name hint from the content type (only protobuf needs one; the rest is sniffed)."""
    return "upload.xplane.pb" if "protobuf" in content_type or "octet-stream" in content_type else ""
