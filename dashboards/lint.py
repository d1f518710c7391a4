"""The grafana/dashboard-linter rules (and tidescale's own) as pure functions over dashboard JSON.

Each rule returns a list of problems naming the panel or variable; `lint()` runs them all.
Tests run them on every generated dashboard, and on broken copies to prove each rule bites.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from tidescale.contracts import catalog
from tidescale.contracts.promql import metric_names, substitute_templates

Dashboard = dict[str, Any]
Rule = Callable[[Dashboard], list[str]]

DATASOURCE_UID = "${datasource}"
RATE_INTERVAL = "$__rate_interval"
COUNTER_FUNCTIONS = frozenset({"rate", "irate", "increase"})
# Grafana unit ids the dashboards may use (a subset of Grafana's valueFormats registry).
VALID_UNITS = frozenset({
    "short", "none", "percent", "percentunit", "s", "ms", "µs", "ns", "dtdurations", "reqps", "ops",
    "bytes", "decbytes", "mbytes", "decmbytes", "watt", "kwatt", "celsius", "bool", "bool_on_off", "hertz",
})
RANGE = re.compile(r"\[([^\]]*)\]")
# The raw series a panel may read, and why no recording rule stands in for it. Everything else a
# panel shows comes from a recording rule (tidescale.contracts.recorded), as in kubernetes-mixin:
# dashboards, alerts and the autoscaler then agree, and no panel recomputes a rule at refresh.
# A series that a recording rule already reads must never be listed here (a unit test checks).
RAW_SERIES: dict[str, str] = {
    "ALERTS": "Prometheus' own alert state; a rule cannot record it more usefully than it is",
    "tidescale_model_reviews": "review-service gauge of open reviews, shown as is (one series per state)",
    "tidescale_desired_replicas": "the recommender's output gauge per Deployment, shown as is",
    "tidescale_recommender_failsafe": "the recommender's fail-safe gauge per Deployment and reason, shown as is",
    "tidescale_recommender_decision": "the recommender's decision gauge per Deployment and reason, shown as is",
    "tidescale_recommender_last_success_timestamp_seconds": "a timestamp gauge; `time() -` must run at query time",
    "kube_deployment_status_replicas": "kube-state-metrics replica count, shown as is",
    "kube_deployment_status_replicas_ready": "kube-state-metrics ready replica count, shown as is",
    "kube_deployment_spec_replicas": "changes() over the dashboard's own interval counts scale events",
    "kube_horizontalpodautoscaler_status_desired_replicas": "the HPA's decision, joined to its Deployment",
    "kube_horizontalpodautoscaler_info": "the join from an HPA to the Deployment it scales",
    "kube_pod_status_ready_time": "cold start = ready time - start time per pod, a one-off difference",
    "kube_pod_start_time": "cold start = ready time - start time per pod, a one-off difference",
    "tidescale_batch_size_bucket": "the heatmap needs every bucket's rate; no consumer needs a quantile of it",
    "tidescale_batching_efficiency_ratio": "exporter gauge already per model and pod, only averaged over pods",
    "tidescale_op_top_share": "exporter gauge per op of the latest profile; topk runs at query time",
    "tidescale_profile_age_seconds": "exporter gauge per model version, shown as is",
    "tidescale_trace_sample_rate": "exporter gauge of the trace rate in use per model version, shown as 1/x",
    # The exporter's own health row: per exporter pod, read by no rule (its alerts read them at evaluation).
    "tidescale_exporter_spans_accepted_total": "the exporter's own counter; its share dropped is per exporter pod",
    "tidescale_exporter_spans_dropped_total": "the exporter's own counter; its share dropped is per exporter pod",
    "tidescale_exporter_series_dropped_total": "the exporter's own counter of samples refused at a series cap",
    "tidescale_exporter_ingest_cpu_seconds_total": "the exporter's own CPU counter, per exporter pod and source",
}
UID = re.compile(r"^tidescale-[a-z]+$")


def panels(board: Dashboard) -> Iterator[dict[str, Any]]:
    """Every non-row panel, including those nested in collapsed rows."""
    for panel in board.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def targets(board: Dashboard) -> Iterator[tuple[str, str]]:
    """(panel title, expr) for every query of every panel."""
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield panel.get("title", "?"), str(target.get("expr", ""))


def _variables(board: Dashboard) -> list[dict[str, Any]]:
    return list(board.get("templating", {}).get("list", []))


def template_datasource_rule(board: Dashboard) -> list[str]:
    variables = _variables(board)
    first = variables[0] if variables else {}
    if first.get("name") != "datasource" or first.get("type") != "datasource" or first.get("query") != "prometheus":
        return ["the first variable must be `datasource` of type datasource with query prometheus"]
    return []


def template_chain_rule(board: Dashboard) -> list[str]:
    """`cluster`, `namespace` then `model`, all label_values queries, each filtered by the one before."""
    by_name = {v.get("name"): v for v in _variables(board)}
    problems = []
    for name in ("cluster", "namespace", "model"):
        var = by_name.get(name)
        if var is None:
            problems.append(f"variable {name!r} is missing")
        elif not str(var.get("query", "")).startswith("label_values("):
            problems.append(f"variable {name!r} must use label_values(...)")
    names = [v.get("name") for v in _variables(board)]
    if {"cluster", "namespace"} <= set(names):
        if names.index("cluster") > names.index("namespace"):
            problems.append("variable `cluster` must come before `namespace`")
        if "$cluster" not in str(by_name["namespace"].get("query", "")):
            problems.append("variable `namespace` must be filtered by $cluster")
    if {"namespace", "model"} <= set(names):
        if names.index("namespace") > names.index("model"):
            problems.append("variable `namespace` must come before `model`")
        if "$namespace" not in str(by_name["model"].get("query", "")):
            problems.append("variable `model` must be filtered by $namespace")
    return problems


def template_on_time_change_reload_rule(board: Dashboard) -> list[str]:
    return [f"variable {v.get('name')!r} must refresh on time range change (refresh: 2)"
            for v in _variables(board) if v.get("type") == "query" and v.get("refresh") != 2]


def template_datasource_ref_rule(board: Dashboard) -> list[str]:
    return [f"variable {v.get('name')!r} must query ${{datasource}}"
            for v in _variables(board) if v.get("type") == "query"
            and (v.get("datasource") or {}).get("uid") != DATASOURCE_UID]


def panel_datasource_rule(board: Dashboard) -> list[str]:
    problems = []
    for panel in panels(board):
        refs = [panel.get("datasource") or {}] + [t.get("datasource") or {} for t in panel.get("targets", [])
                                                  if "datasource" in t]
        if any(ref.get("uid") != DATASOURCE_UID for ref in refs):
            problems.append(f"panel {panel.get('title')!r} must use ${{datasource}}")
    return problems


def panel_title_description_rule(board: Dashboard) -> list[str]:
    return [f"panel {p.get('title')!r} needs a title and a description"
            for p in panels(board) if not str(p.get("title", "")).strip() or not str(p.get("description", "")).strip()]


def panel_units_rule(board: Dashboard) -> list[str]:
    problems = []
    for panel in panels(board):
        unit = (panel.get("fieldConfig") or {}).get("defaults", {}).get("unit")
        if unit not in VALID_UNITS:
            problems.append(f"panel {panel.get('title')!r} has no valid unit (got {unit!r})")
    return problems


def panel_no_targets_rule(board: Dashboard) -> list[str]:
    return [f"panel {p.get('title')!r} has no query"
            for p in panels(board) if not any(str(t.get("expr", "")).strip() for t in p.get("targets", []))]


def target_promql_rule(board: Dashboard) -> list[str]:
    import promql_parser

    problems = []
    for title, expr in targets(board):
        try:
            promql_parser.parse(substitute_templates(expr))
        except ValueError as exc:
            problems.append(f"panel {title!r}: invalid PromQL {expr!r}: {exc}")
    return problems


def target_rate_interval_rule(board: Dashboard) -> list[str]:
    """Every range in a panel query is `$__rate_interval` (windows follow the scrape interval)."""
    return [f"panel {title!r}: range [{rng}] must be [{RATE_INTERVAL}]"
            for title, expr in targets(board) for rng in RANGE.findall(expr) if rng != RATE_INTERVAL]


def _unaggregated_counter_calls(node: object, aggregated: bool) -> Iterator[str]:
    kind = type(node).__name__
    if kind == "Call" and node.func.name in COUNTER_FUNCTIONS and not aggregated:  # type: ignore[attr-defined]
        yield node.func.name  # type: ignore[attr-defined]
    aggregated = aggregated or kind == "AggregateExpr"
    for attr in ("lhs", "rhs", "expr", "args", "param", "vector_selector"):
        child = getattr(node, attr, None)
        for c in child if isinstance(child, list) else [child]:
            if c is not None and not isinstance(c, str | int | float):
                yield from _unaggregated_counter_calls(c, aggregated)


def target_counter_agg_rule(board: Dashboard) -> list[str]:
    """rate()/increase() must sit inside an aggregation (per-pod series are not what on-call reads)."""
    import promql_parser

    problems = []
    for title, expr in targets(board):
        try:
            tree = promql_parser.parse(substitute_templates(expr))
        except ValueError:
            continue  # reported by target_promql_rule
        problems += [f"panel {title!r}: {fn}() is not aggregated in {expr!r}"
                     for fn in _unaggregated_counter_calls(tree, False)]
    return problems


def known_metrics() -> frozenset[str]:
    """Catalog series plus the recording rules of alerts/."""
    from tidescale.contracts import recorded as names

    return catalog.all_series_names() | frozenset(names.all_names())


def target_catalog_rule(board: Dashboard) -> list[str]:
    known = known_metrics()
    problems = []
    for title, expr in targets(board):
        try:
            unknown = metric_names(expr) - known
        except ValueError:
            continue
        problems += [f"panel {title!r}: {name} is neither a catalog metric nor a recording rule"
                     for name in sorted(unknown)]
    return problems


def target_recorded_rule(board: Dashboard) -> list[str]:
    """Panels read recording rules: a raw series outside RAW_SERIES means a panel recomputes (or
    should have) a rule, and would drift from the alerts and the autoscaler that read the rule."""
    from tidescale.contracts import recorded as names

    recorded = frozenset(names.all_names())
    problems = []
    for title, expr in targets(board):
        try:
            raw = metric_names(expr) - recorded
        except ValueError:
            continue  # reported by target_promql_rule
        problems += [f"panel {title!r}: reads the raw series {name}; read its recording rule "
                     "(tidescale.contracts.recorded) or list it in dashboards.lint.RAW_SERIES with the reason"
                     for name in sorted(raw - RAW_SERIES.keys())]
    return problems


def dashboard_identity_rule(board: Dashboard) -> list[str]:
    problems = []
    if not UID.match(str(board.get("uid", ""))):
        problems.append(f"uid {board.get('uid')!r} must match {UID.pattern}")
    if board.get("editable", True):
        problems.append("dashboard must not be editable (it is generated; edit the Python)")
    if "tidescale" not in board.get("tags", []):
        problems.append("dashboard must carry the `tidescale` tag")
    return problems


RULES: tuple[Rule, ...] = (
    template_datasource_rule, template_chain_rule, template_on_time_change_reload_rule,
    template_datasource_ref_rule, panel_datasource_rule, panel_title_description_rule, panel_units_rule,
    panel_no_targets_rule, target_promql_rule, target_rate_interval_rule, target_counter_agg_rule,
    target_catalog_rule, target_recorded_rule, dashboard_identity_rule,
)


def lint(board: Dashboard) -> list[str]:
    """Every problem every rule finds in *board*."""
    return [problem for rule in RULES for problem in rule(board)]


def link_problems(boards: dict[str, Dashboard]) -> list[str]:
    """Each dashboard links to every other one by uid."""
    problems = []
    for uid, board in boards.items():
        linked = {str(link.get("url", "")).removeprefix("/d/") for link in board.get("links", [])}
        problems += [f"{uid} does not link to {other}" for other in boards if other != uid and other not in linked]
    return problems
