"""Fleet overview: the 3 a.m. entry point — is every model inside its SLO, and if not, which one."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash_b

from tidescale.alerts.config import default_config
from tidescale.contracts import recorded as rules
from tidescale.contracts.placeholders import CLUSTER_LABEL
from tidescale.contracts.promql import sum_rate
from tidescale.dashboards.base import FLEET, new_dashboard
from tidescale.dashboards.boards.autoscaling import replica_queries
from tidescale.dashboards.panels import Query, Threshold, graph, row, single_stat, table_of
from tidescale.dashboards.queries import (
    CLUSTER,
    NS,
    QUANTILES,
    RATE_INTERVAL,
    STAGE_REQUEST,
    agg,
    ratio,
    sel,
    stage_quantile,
)

FIRING = sel("ALERTS", f'{CLUSTER}, alertstate="firing"')
OPEN_REVIEWS = sel("tidescale_model_reviews", f'{CLUSTER}, state="open"')
# The exporter's own series, by the job name the chart gives it whatever the release is called.
EXPORTER = f'{CLUSTER}, job="{default_config().exporter_job}"'


def own_slow_ratio(window: str) -> str:
    """Each model's slow ratio at its own SLO threshold (the `le` of its SLO series)."""
    return (f"max without (le) ({sel(rules.SLOW_RATIO[window])} and on ({CLUSTER_LABEL}, namespace, model, le) "
            f"{sel(rules.SLO_LATENCY_THRESHOLD)})")


def burn(window: str) -> str:
    """Slow ratio over the model's own latency budget (1 - its objective), worst namespace per model."""
    return (f"max by (model) ({own_slow_ratio(window)} / on ({CLUSTER_LABEL}, namespace, model) "
            f"(1 - {sel(rules.SLO_LATENCY_OBJECTIVE)}))")


def per_exporter(name: str, by: str = "instance") -> str:
    return sum_rate(sel(name, EXPORTER), by, RATE_INTERVAL)


def or_zero(expr: str) -> str:
    """*expr*, or 0 for every exporter where it has no sample (a counter with no label set yet, or a
    share of nothing): a flat line at zero says "nothing lost", where no data would say nothing."""
    return f"({expr} or {per_exporter('tidescale_exporter_spans_accepted_total')} * 0)"


def build() -> dash_b.Dashboard:
    default_objective = default_config().latency_slo_target
    return (
        new_dashboard(FLEET)
        .with_row(row("SLO"))
        .with_panel(single_stat(
            "Requests within SLO (5m)",
            "Share of requests faster than each model's own SLO threshold (chart values `slo`), from the "
            f"aggregatable tidescale histogram. Red below the default {default_objective:.3g} objective; "
            "each model's own objective is in the table beside.",
            "percentunit", [Query(f"1 - max by (model) ({own_slow_ratio('5m')})", "{{model}}")],
            span=6, thresholds=[Threshold(default_objective, "green")], base_color="red"))
        .with_panel(single_stat(
            "Error budget left (1d)",
            "1 - (slow ratio over 1d / the model's latency budget, 1 - its objective): how much of the "
            "latency error budget is left at the current day's pace. Below zero the SLO is already missed.",
            "percentunit", [Query(f"1 - {burn('1d')}", "{{model}}")],
            span=6, thresholds=[Threshold(0.25, "orange"), Threshold(0.5, "green")], base_color="red"))
        .with_panel(table_of(
            "SLO per model",
            "The SLO each model is held to: its group (`slo`, first match of the chart's `slo.models`, else "
            "default), latency threshold and objectives. Alerts, this board and the recommender read these.",
            "short", [Query(f"max by (model, slo, le) ({sel(name)})", instant=True)
                      for name in (rules.SLO_LATENCY_THRESHOLD, rules.SLO_LATENCY_OBJECTIVE,
                                   rules.SLO_AVAILABILITY_OBJECTIVE)], span=12))
        .with_panel(graph(
            "Error-budget burn rate (5m, 1h, 6h)",
            "Slow-request ratio divided by the model's latency budget: 1 spends the budget exactly over the "
            "SLO window, 14.4 over 1h pages (multi-window, multi-burn-rate alerts).",
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
            "s", [*(Query(stage_quantile(name, STAGE_REQUEST), f"{{{{model}}}} p{round(q * 100)}")
                    for q, name in QUANTILES),
                  Query(agg("max", "model", rules.SLO_LATENCY_THRESHOLD), "{{model}} SLO threshold")],
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
            "short", [Query(f"sum by ({CLUSTER_LABEL}, alertname, severity, namespace, model) ({FIRING})",
                            instant=True)], span=16))
        .with_panel(single_stat(
            "Open model reviews",
            "Model reviews the review service holds open (opened by Alertmanager when a model's op-time "
            "share or a version regression needs an owner's look).",
            "short", [Query(f"sum({OPEN_REVIEWS})")], span=8,
            thresholds=[Threshold(1, "orange")]))
        .with_row(row("Exporter: is the latency data whole?"))
        .with_panel(graph(
            "Trace data dropped",
            "Share of the spans (OTLP) or trace entries (trace files) each exporter received that it dropped: "
            "requests missing from the latency histograms. TidescaleSpansDropped fires above the dashed line "
            "for 15m; tidescale_exporter_spans_dropped_total{reason} says why. A trace-file exporter counts "
            "no accepted spans, so there any drop reads 100 %.",
            "percentunit",
            [Query(or_zero(ratio(per_exporter("tidescale_exporter_spans_dropped_total"),
                                 f"{per_exporter('tidescale_exporter_spans_accepted_total')} + "
                                 f"{per_exporter('tidescale_exporter_spans_dropped_total')}")),
                   "{{instance}}")],
            span=8, min_value=0, thresholds=[Threshold(default_config().spans_dropped_max_ratio)]))
        .with_panel(graph(
            "Samples refused at a series cap",
            "Samples per second each exporter refused because a cardinality cap was full: the model "
            "versions or pods behind them have no series (TidescaleSeriesCapped; "
            "tidescale_exporter_series_dropped_total{family} names the family). Zero is healthy.",
            "short", [Query(or_zero(per_exporter("tidescale_exporter_series_dropped_total")), "{{instance}}")],
            span=8, min_value=0))
        .with_panel(graph(
            "Exporter ingest CPU",
            "CPU each exporter spends turning traces into latency samples, as a share of one core, by source: "
            "otlp from a body's decompression to the histograms (not the HTTP server's work), trace_file "
            "every poll of the trace files. Divided by the traced request rate, it is the cost per traced "
            "request (docs/exporter.md, the price of P99).",
            "percentunit", [Query(per_exporter("tidescale_exporter_ingest_cpu_seconds_total", "instance, source"),
                                  "{{instance}} {{source}}")],
            span=8, min_value=0))
    )
