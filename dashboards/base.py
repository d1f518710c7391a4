"""What every tidescale dashboard shares: uid, variables, links, refresh, serialisation.

Variables follow the kubernetes-mixin convention: a `datasource` variable first, then
`cluster`, `namespace` and `model` chained with `label_values`, refreshed when the time range changes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dash_m

from tidescale.contracts.placeholders import CLUSTER_LABEL
from tidescale.contracts.promql import metric
from tidescale.dashboards.panels import DATASOURCE
from tidescale.dashboards.queries import CLUSTER, NS

TAG = "tidescale"


@dataclass(frozen=True)
class DashboardInfo:
    """A dashboard's stable identity: links and the Helm ConfigMaps refer to the uid."""

    uid: str
    title: str
    description: str


FLEET = DashboardInfo("tidescale-fleet", "tidescale / Fleet overview",
                      "Is every model inside its latency SLO? Traffic, errors, percentiles, replicas, alerts.")
MODEL = DashboardInfo("tidescale-model", "tidescale / Model",
                      "Why is a model slow? Queue vs compute, batching, op-time share, versions.")
GPU = DashboardInfo("tidescale-gpu", "tidescale / GPU",
                    "dcgm-exporter per serving pod: utilisation, SM/tensor activity, memory, power, XID.")
AUTOSCALING = DashboardInfo("tidescale-autoscaling", "tidescale / Autoscaling",
                            "Do we have the right number of replicas? Recommender vs HPA vs pods.")
PROFILER = DashboardInfo("tidescale-profiler", "tidescale / Profiler",
                         "Where does a model spend its op time? Op classes, top ops, profile age.")
ALL_INFOS = (FLEET, MODEL, GPU, AUTOSCALING, PROFILER)

# The variable queries: namespaces that serve Triton models, then the models in them.
MODEL_SOURCE = "nv_inference_request_success"


def query_variable(name: str, label: str, query: str, description: str) -> dash_b.QueryVariable:
    return (dash_b.QueryVariable(name).label(label).description(description).datasource(DATASOURCE)
            .query(query).definition(query)
            .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dash_m.VariableSort.ALPHABETICAL_ASC)
            .include_all(True).all_value(".*").multi(True))


def variables() -> list[dash_b.DatasourceVariable | dash_b.QueryVariable]:
    """datasource, then cluster, namespace and model chained with label_values."""
    return [
        dash_b.DatasourceVariable("datasource").label("Data source").type("prometheus")
        .description("Prometheus that scrapes Triton, dcgm-exporter and the tidescale exporter."),
        query_variable("cluster", "Cluster", f"label_values({metric(MODEL_SOURCE)}, {CLUSTER_LABEL})",
                       "The `cluster` external label of a Thanos or Mimir holding several clusters "
                       "(All also matches series without it)."),
        query_variable("namespace", "Namespace", f"label_values({metric(MODEL_SOURCE)}{{{CLUSTER}}}, namespace)",
                       "Kubernetes namespaces with Triton serving pods."),
        query_variable("model", "Model", f"label_values({metric(MODEL_SOURCE)}{{{NS}}}, model)",
                       "Triton models served in the selected namespaces."),
    ]


def links(current: DashboardInfo) -> list[dash_b.DashboardLink]:
    """A link to every other tidescale dashboard, carrying the variables and the time range."""
    return [
        dash_b.DashboardLink(info.title.split(" / ")[-1]).type(dash_m.DashboardLinkType.LINK)
        .url(f"/d/{info.uid}").tooltip(info.description).icon("dashboard")
        .include_vars(True).keep_time(True).target_blank(False)
        for info in ALL_INFOS if info.uid != current.uid
    ]


def new_dashboard(info: DashboardInfo, extra_variables: Sequence[dash_b.QueryVariable] = ()) -> dash_b.Dashboard:
    """An empty dashboard with the shared settings; callers add rows and panels."""
    board = (dash_b.Dashboard(info.title).uid(info.uid).description(info.description).tags([TAG])
             .time("now-1h", "now").refresh("30s").timezone("utc").readonly()
             .tooltip(dash_m.DashboardCursorSync.CROSSHAIR).variables([*variables(), *extra_variables]))
    for link in links(info):
        board = board.link(link)
    return board


def to_dict(board: dash_b.Dashboard) -> dict[str, Any]:
    """The built dashboard as plain JSON data, with unique panel ids (Grafana needs them)."""
    data: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    next_id = 1
    for panel in data.get("panels", []):
        panel["id"] = next_id
        next_id += 1
        for inner in panel.get("panels", []):
            inner["id"] = next_id
            next_id += 1
    return data


def to_json(data: dict[str, Any]) -> str:
    """Stable serialisation (sorted keys, 2-space indent, trailing newline) so diffs stay small."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
