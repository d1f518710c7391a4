"""Generated artifacts of the dashboards package (see tidescale.devstack.artifacts).

Each dashboard is written once, to `deploy/helm/tidescale/files/dashboards/<uid>.json`: the chart
turns them into ConfigMaps with `.Files.Glob`, filling in the cluster label's placeholder
(tidescale.contracts.placeholders). For another Grafana, `tidescale dashboards export` writes them filled.
"""

from __future__ import annotations

CHART_DIR = "deploy/helm/tidescale/files/dashboards"


def artifacts() -> dict[str, str]:
    """Repository-relative path -> full file content."""
    from tidescale.contracts.placeholders import CLUSTER_LABEL
    from tidescale.dashboards.base import to_json
    from tidescale.dashboards.registry import build_all

    return {f"{CHART_DIR}/{uid}.json": to_json(data) for uid, data in build_all(CLUSTER_LABEL).items()}
