"""The shape of one catalog entry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

MetricType = Literal["counter", "gauge", "histogram", "summary", "info"]
Source = Literal["triton", "dcgm", "kube-state-metrics", "tidescale", "prometheus"]


@dataclass(frozen=True)
class MetricFamily:
    """One metric family: what it is called, what it measures, which labels it carries."""

    name: str
    type: MetricType
    unit: str
    help: str
    source: Source
    labels: tuple[str, ...] = ()
    # Labels that only some deployments carry (e.g. dcgm pod mapping, Triton namespacing).
    optional_labels: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class DcgmRename:
    """A dcgm-exporter field that 4.9 renamed to its DCGM 4.7 name, possibly in another unit.

    A 4.x value times *factor* is the 4.9 value (1.0 where only the name changed)."""

    legacy: str  # the 4.x metric name
    current: str  # the 4.9 metric name
    factor: float = 1.0
