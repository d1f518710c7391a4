"""All dashboards by uid, built as plain JSON data (what Grafana imports)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash_b

from tidescale.contracts.placeholders import DEFAULT_CLUSTER_LABEL, fill
from tidescale.dashboards.base import AUTOSCALING, FLEET, GPU, MODEL, PROFILER, DashboardInfo, to_dict
from tidescale.dashboards.boards import autoscaling, fleet, gpu, model, profiler

BUILDERS: tuple[tuple[DashboardInfo, Callable[[], dash_b.Dashboard]], ...] = (
    (FLEET, fleet.build),
    (MODEL, model.build),
    (GPU, gpu.build),
    (AUTOSCALING, autoscaling.build),
    (PROFILER, profiler.build),
)


def build_all(cluster_label: str = DEFAULT_CLUSTER_LABEL) -> dict[str, dict[str, Any]]:
    """uid -> dashboard JSON data, in the order on-call reads them, with *cluster_label* as the label
    that tells clusters apart (the chart's files keep the placeholder, which the chart fills)."""
    return {info.uid: json.loads(fill(json.dumps(to_dict(build())), cluster_label)) for info, build in BUILDERS}
