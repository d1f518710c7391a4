"""Profiler: where each model version spends its op time, and how fresh that knowledge is."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash_b

from tidescale.contracts import recorded as rules
from tidescale.dashboards.base import PROFILER, new_dashboard
from tidescale.dashboards.panels import Query, Threshold, graph, row, single_stat, table_of
from tidescale.dashboards.queries import MODEL_ONLY, agg

TOP_OPS = 10
TOP_OPS_QUERY = f"topk({TOP_OPS}, {agg('max', 'model, version, op, op_class', 'tidescale_op_top_share', MODEL_ONLY)})"
DAY = 86400.0


def build() -> dash_b.Dashboard:
    return (
        new_dashboard(PROFILER)
        .with_row(row("Op classes"))
        .with_panel(graph(
            "Op-class share by model version",
            "Share of op self time per op class (string, parse, matmul, ...) in the latest profile, over "
            "time: a new version or input change shows up as a step.",
            "percentunit", [Query(agg("max", "model, version, op_class", rules.OP_TIME_SHARE, MODEL_ONLY),
                                  "{{model}} v{{version}} {{op_class}}")], span=24, stacked=True, min_value=0))
        .with_row(row("Top ops and freshness"))
        .with_panel(table_of(
            "Top ops",
            f"The {TOP_OPS} op types with the largest share of self time in the latest profiles, with their "
            "op class.",
            "percentunit", [Query(TOP_OPS_QUERY, instant=True)], span=16))
        .with_panel(single_stat(
            "Profile age",
            "Age of the latest profile per model version. Older than a day (yellow) or a week (red): the "
            "shares above may describe code that no longer runs.",
            "s", [Query(agg("max", "model, version", "tidescale_profile_age_seconds", MODEL_ONLY),
                        "{{model}} v{{version}}")],
            span=8, thresholds=[Threshold(DAY, "yellow"), Threshold(7 * DAY, "red")]))
    )
