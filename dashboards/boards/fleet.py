"""Fleet overview: the 3 a.m. entry point — is every model inside its SLO, and if not, which one."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash_b

from alerts import names as rules
from dashboards.base import FLEET, new_dashboard
from dashboards.panels import Query, Threshold, graph, row, single_stat, table_of
from dashboards.queries import (
    NS,
    NS_MODEL,
    QUANTILES,
    STAGE_REQUEST,
    hpa_by_deployment,
    ratio,
    sel,
    stage_quantile,
    sum_rate,
)

FIRING = sel("ALERTS", 'alertstate="firing"')
OPEN_REVIEWS = sel("tidescale_model_reviews", 'state="open"')


def _error_ratio(by: str) -> str:
    """failure / (success + failure); a model without failure series reads 0, not 'no data'."""
    success = sum_rate(sel("nv_inference_request_success"), by)
    failures = f"({sum_rate(sel('nv_inference_request_failure'), by)} or 0 * {success})"
    total = f"{success} + {failures}"
    return ratio(failures, total)


def build() -> dash_b.Dashboard:
    slow = f"{rules.SLOW_RATIO_RATE5M}{{{NS_MODEL}}}"
    slow_1h = f"{rules.SLOW_RATIO['1h']}{{{NS_MODEL}}}"
    return (
        new_dashboard(FLEET)
        .with_row(row("SLO"))
        .with_panel(single_stat(
            "Requests within SLO (5m)",
            "Share of requests (stage=request) faster than each SLO threshold `le`, per model, from the "
            "aggregatable tidescale histogram. Red below 99 %.",
            "percentunit", [Query(f"1 - max by (model, le) ({slow})", "{{model}} ≤ {{le}}s")],
            span=8, thresholds=[Threshold(0.99, "green")], base_color="red"))
        .with_panel(graph(
            "Slow-request ratio (5m vs 1h)",
            "Fraction of requests slower than the SLO threshold: the error budget burns while this is above "
            "1 - objective. The 5m window reacts, the 1h window confirms (multi-window burn-rate alerts).",
            "percentunit", [Query(f"max by (model, le) ({slow})", "{{model}} 5m"),
                            Query(f"max by (model, le) ({slow_1h})", "{{model}} 1h")], span=16, min_value=0))
        .with_row(row("Traffic and latency"))
        .with_panel(graph(
            "Requests per second", "Successful inference requests per second per model, summed over pods.",
            "reqps", [Query(sum_rate(sel("nv_inference_request_success"), "model"), "{{model}}")],
            span=8, min_value=0))
        .with_panel(graph(
            "Error ratio", "Failed / all inference requests per model (Triton nv_inference_request_failure).",
            "percentunit", [Query(_error_ratio("model"), "{{model}}")], span=8, min_value=0,
            thresholds=[Threshold(0.01)]))
        .with_panel(graph(
            "Latency P50 / P95 / P99",
            "End-to-end request latency quantiles per model from tidescale_request_duration_seconds "
            "(histogram summed over pods before the quantile, so it aggregates correctly).",
            "s", [Query(stage_quantile(q, STAGE_REQUEST), f"{{{{model}}}} p{round(q * 100)}") for q in QUANTILES],
            span=8, min_value=0))
        .with_row(row("Replicas"))
        .with_panel(graph(
            "Replicas: recommended, HPA desired, current, ready",
            "Per serving Deployment: what the tidescale recommender wants, what the HPA decided, pods that "
            "exist and pods that are Ready. A gap between current and ready is a cold start or a crash.",
            "short", [
                Query(f"max by (deployment) ({sel('tidescale_desired_replicas', NS)})", "{{deployment}} recommended"),
                Query(hpa_by_deployment("kube_horizontalpodautoscaler_status_desired_replicas"),
                      "{{deployment}} HPA desired"),
                Query(f"max by (deployment) ({sel('kube_deployment_status_replicas', NS)})",
                      "{{deployment}} current"),
                Query(f"max by (deployment) ({sel('kube_deployment_status_replicas_ready', NS)})",
                      "{{deployment}} ready"),
            ], span=24, min_value=0))
        .with_row(row("Alerts and reviews"))
        .with_panel(table_of(
            "Firing alerts", "Alerts firing now in Prometheus (ALERTS), by name, severity and model.",
            "short", [Query(f"sum by (alertname, severity, namespace, model) ({FIRING})",
                            instant=True)], span=16))
        .with_panel(single_stat(
            "Open model reviews",
            "Model reviews the review service holds open (opened by Alertmanager when a model's op-time "
            "share or a version regression needs an owner's look).",
            "short", [Query(f"sum({OPEN_REVIEWS})")], span=8,
            thresholds=[Threshold(1, "orange")]))
    )
