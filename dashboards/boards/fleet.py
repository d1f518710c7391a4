"""Fleet overview: the 3 a.m. entry point — is every model inside its SLO, and if not, which one."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash_b

from tidescale.alerts.config import default_config, le_value
from tidescale.contracts import recorded as rules
from tidescale.dashboards.base import FLEET, new_dashboard
from tidescale.dashboards.boards.autoscaling import replica_queries
from tidescale.dashboards.panels import Query, Threshold, graph, row, single_stat, table_of
from tidescale.dashboards.queries import CLUSTER, NS, NS_MODEL, QUANTILES, STAGE_REQUEST, agg, sel, stage_quantile

FIRING = sel("ALERTS", f'{CLUSTER}, alertstate="firing"')
OPEN_REVIEWS = sel("tidescale_model_reviews", f'{CLUSTER}, state="open"')


def build() -> dash_b.Dashboard:
    cfg = default_config()
    at_threshold = f'{NS_MODEL}, le="{le_value(cfg.slo_latency_threshold_s)}"'
    budget = 1 - cfg.latency_slo_target

    def burn(window: str) -> str:
        return f"{agg('max', 'model', rules.SLOW_RATIO[window], at_threshold)} / {budget:g}"

    return (
        new_dashboard(FLEET)
        .with_row(row("SLO"))
        .with_panel(single_stat(
            "Requests within SLO (5m)",
            f"Share of requests faster than the SLO threshold ({cfg.slo_latency_threshold_s:g}s) per model, from "
            f"the aggregatable tidescale histogram. Red below the {cfg.latency_slo_target:.3g} objective.",
            "percentunit", [Query(f"1 - {agg('max', 'model', rules.SLOW_RATIO_RATE5M, at_threshold)}", "{{model}}")],
            span=6, thresholds=[Threshold(cfg.latency_slo_target, "green")], base_color="red"))
        .with_panel(single_stat(
            "Error budget left (1d)",
            f"1 - (slow ratio over 1d / error budget {budget:g}): how much of the latency error budget is "
            "left at the current day's pace. Below zero the SLO is already missed.",
            "percentunit", [Query(f"1 - {burn('1d')}", "{{model}}")],
            span=6, thresholds=[Threshold(0.25, "orange"), Threshold(0.5, "green")], base_color="red"))
        .with_panel(graph(
            "Error-budget burn rate (5m, 1h, 6h)",
            "Slow-request ratio divided by the error budget: 1 spends the budget exactly over the SLO "
            "window, 14.4 over 1h pages (multi-window, multi-burn-rate alerts).",
            "short", [Query(burn(w), f"{{{{model}}}} {w}") for w in ("5m", "1h", "6h")],
            span=12, min_value=0, thresholds=[Threshold(1, "orange"), Threshold(14.4, "red")]))
        .with_row(row("Traffic and latency"))
        .with_panel(graph(
            "Requests per second", "Successful inference requests per second per model, summed over pods.",
            "reqps", [Query(agg("sum", "model", rules.REQUEST_SUCCESS_RATE5M), "{{model}}")],
            span=8, min_value=0))
        .with_panel(graph(
            "Error ratio",
            "Failed / all inference requests per model over 5m (Triton nv_inference_request_failure; 0, not "
            "'no data', for a model that never failed); the worst namespace when several match.",
            "percentunit", [Query(agg("max", "model", rules.ERROR_RATIO_RATE5M), "{{model}}")], span=8, min_value=0,
            thresholds=[Threshold(0.01)]))
        .with_panel(graph(
            "Latency P50 / P95 / P99",
            "End-to-end request latency quantiles per model over 5m from tidescale_request_duration_seconds "
            "(histogram summed over pods before the quantile, so it aggregates correctly).",
            "s", [Query(stage_quantile(name, STAGE_REQUEST), f"{{{{model}}}} p{round(q * 100)}")
                  for q, name in QUANTILES],
            span=8, min_value=0))
        .with_row(row("Replicas"))
        .with_panel(graph(
            "Replicas: recommended, HPA desired, current, ready",
            "Per serving Deployment: what the tidescale recommender wants, what the HPA decided, pods that "
            "exist and pods that are Ready. A gap between current and ready is a cold start or a crash.",
            "short", replica_queries(NS, ".*"), span=24, min_value=0))
        .with_row(row("Alerts and reviews"))
        .with_panel(table_of(
            "Firing alerts", "Alerts firing now in Prometheus (ALERTS), by name, severity and model.",
            "short", [Query(f"sum by (cluster, alertname, severity, namespace, model) ({FIRING})",
                            instant=True)], span=16))
        .with_panel(single_stat(
            "Open model reviews",
            "Model reviews the review service holds open (opened by Alertmanager when a model's op-time "
            "share or a version regression needs an owner's look).",
            "short", [Query(f"sum({OPEN_REVIEWS})")], span=8,
            thresholds=[Threshold(1, "orange")]))
    )
