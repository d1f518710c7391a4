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
