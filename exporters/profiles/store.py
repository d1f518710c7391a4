"""The latest profile report per model version, exported as op-share gauges.

Uploads (`POST /v1/profiles`) land here through `ingest`. Everything is bounded: the body
(`max_bytes`), what it may inflate to, the number of model versions (`max_models`; a new
one beyond the cap is refused with 429 and counted), and the series per report (op classes
plus the top-N ops). Only reports are kept, never the profiles themselves.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterator

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
    """Latest ProfileReport per (model, version); a prometheus-client Collector."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, max_models: int = DEFAULT_MAX_MODELS, *,
                 max_inflated_bytes: int | None = None, self_metrics: SelfMetrics | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.max_bytes = max_bytes
        self.max_models = max_models
        self.max_inflated_bytes = max_inflated_bytes or max(max_bytes, DEFAULT_MAX_INFLATED_BYTES)
        self.self_metrics = self_metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._reports: dict[tuple[str, str], tuple[ProfileReport, float]] = {}

    def ingest(self, body: bytes, *, filename: str = "", content_type: str = "", model: str,
               version: str) -> ProfileReport:
        """Parse one upload and make it the latest report of its model version."""
        check_label("model", model)
        check_label("version", version)
        if len(body) > self.max_bytes:
            raise BadInput(413, f"profile upload of {len(body)} bytes exceeds the {self.max_bytes}-byte limit")
        key = (model, version)
        with self._lock:
            if key not in self._reports and len(self._reports) >= self.max_models:
                if self.self_metrics is not None:
                    self.self_metrics.drop_series(catalog.get("tidescale_op_time_share").name)
                raise BadInput(429, f"the profile store already holds {self.max_models} model versions")
        report = parse_profile(io.BytesIO(body), filename or _name_hint(content_type), self.max_inflated_bytes)
        report.model, report.version = model, version
        now = self._clock()
        if report.captured_at is None:
            report.captured_at = now
        with self._lock:
            self._reports[key] = (report, now)
        if self.self_metrics is not None:
            self.self_metrics.add_profile_bytes(len(body))
        return report

    def report(self, model: str, version: str) -> ProfileReport | None:
        with self._lock:
            entry = self._reports.get((model, version))
        return entry[0] if entry else None

    def forget(self, model: str, version: str) -> None:
        with self._lock:
            self._reports.pop((model, version), None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            entries = sorted(self._reports.items())
        now = self._clock()
        share = _gauge("tidescale_op_time_share", ["model", "version", "op_class"])
        top = _gauge("tidescale_op_top_share", ["model", "version", "op", "op_class"])
        stamp = _gauge("tidescale_profile_timestamp_seconds", ["model", "version"])
        age = _gauge("tidescale_profile_age_seconds", ["model", "version"])
        for (model, version), (report, ingested_at) in entries:
            for op_class, value in report.op_class_share.items():
                share.add_metric([model, version, op_class], value)
            for op in report.top_ops:
                top.add_metric([model, version, clean_label_value(op.op), op.op_class], op.share)
            stamp.add_metric([model, version], ingested_at)
            captured = report.captured_at if report.captured_at is not None else ingested_at
            age.add_metric([model, version], max(0.0, now - captured))
        yield from (share, top, stamp, age)


def _gauge(name: str, labels: list[str]) -> GaugeMetricFamily:
    fam = catalog.get(name)
    return GaugeMetricFamily(fam.name, fam.help, labels=labels)


def _name_hint(content_type: str) -> str:
    """A file-name hint from the content type (only protobuf needs one; the rest is sniffed)."""
    return "upload.xplane.pb" if "protobuf" in content_type or "octet-stream" in content_type else ""
