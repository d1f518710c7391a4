"""Generated artifacts of the dashboards package (see tidescale.artifacts).

Each dashboard is written twice with the same content: `dashboards/json/<uid>.json` (import
into any Grafana) and `deploy/helm/tidescale/files/dashboards/<uid>.json` (the Helm chart
turns them into ConfigMaps with `.Files.Glob`). Both come from the same build, so they
cannot drift.
"""

from __future__ import annotations

JSON_DIR = "dashboards/json"
CHART_DIR = "deploy/helm/tidescale/files/dashboards"


def artifacts() -> dict[str, str]:
    """Repository-relative path -> full file content."""
    from dashboards.base import to_json
    from dashboards.registry import build_all

    out: dict[str, str] = {}
    for uid, data in build_all().items():
        text = to_json(data)
        out[f"{JSON_DIR}/{uid}.json"] = text
        out[f"{CHART_DIR}/{uid}.json"] = text
    return out
