"""Model: why is this model slow — waiting in the queue, computing, batching badly, or its ops."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash_b

from tidescale.alerts.config import default_config
from tidescale.contracts import recorded as rules
from tidescale.contracts.promql import bucket, sum_rate
from tidescale.dashboards.base import MODEL, new_dashboard
from tidescale.dashboards.panels import Query, Threshold, graph, heatmap_of, row
from tidescale.dashboards.queries import (
    MODEL_ONLY,
    NS_MODEL,
    QUANTILES,
    RATE_INTERVAL,
    STAGE_COMPUTE,
    STAGE_QUEUE,
    agg,
    sel,
    stage_quantile,
)


def _percentiles(stage: str) -> list[Query]:
    return [Query(stage_quantile(name, stage), f"{{{{model}}}} {stage} p{round(q * 100)}") for q, name in QUANTILES]


def _stage_mean(stage: str) -> str:
    return agg("max", "model", rules.STAGE_AVG_SECONDS_RATE5M, f'{NS_MODEL}, stage="{stage}"')


def build() -> dash_b.Dashboard:
    # Op-class shares above which the alerts open a model review (drawn as threshold lines).
    review_limits = sorted(set(default_config().op_class_limits.values()))
    return (
        new_dashboard(MODEL)
        .with_row(row("Latency by stage"))
        .with_panel(graph(
            "Queue time percentiles",
            "Time requests wait in Triton's scheduler queue (QUEUE_START to COMPUTE_START), from traces. "
            "Queue growing while compute is flat means too few replicas or instances.",
            "s", _percentiles(STAGE_QUEUE), min_value=0))
        .with_panel(graph(
            "Compute time percentiles",
            "Time the backend runs the model (COMPUTE_INPUT_END to COMPUTE_OUTPUT_START), from traces. "
            "Compute growing means the model itself got slower (new version, bigger batches, a slow op).",
            "s", _percentiles(STAGE_COMPUTE), min_value=0))
        .with_panel(graph(
            "Mean queue vs compute time (Triton counters)",
            "Per-request averages over 5m from Triton's always-on cumulative µs counters, summed over pods "
            "before dividing: available even without tracing, but averages only.",
            "s", [Query(_stage_mean(STAGE_QUEUE), "{{model}} queue"),
                  Query(_stage_mean(STAGE_COMPUTE), "{{model}} compute")],
            span=12, min_value=0))
        .with_panel(graph(
            "Trace sample rate: 1 request in N traced",
            "The N each traced request counts for in the latency histograms (1 / tidescale_trace_sample_rate): "
            "the rate the exporter detected from Triton's request counters where known, else the "
            "configured one. Higher N, cheaper tracing and noisier tails (docs/exporter.md, choosing the "
            "trace rate).",
            "short", [Query(f"max by (model) (1 / {sel('tidescale_trace_sample_rate')})", "{{model}}")],
            span=12, min_value=0))
        .with_row(row("Queue and batching"))
        .with_panel(graph(
            "Queue depth per replica",
            "Requests waiting for execution in each serving pod (nv_inference_pending_request_count). "
            "The autoscaler's best signal: it rises before latency does.",
            "short", [Query(agg("sum", "pod", rules.MODEL_POD_QUEUE_DEPTH), "{{pod}}")],
            min_value=0))
        .with_panel(heatmap_of(
            "Batch size distribution",
            "Executions per batch size (tidescale_batch_size from /v2/models/stats batch_stats): mass at 1 "
            "means the dynamic batcher is not batching.",
            "short", Query(sum_rate(sel(bucket("tidescale_batch_size")), "le", RATE_INTERVAL), "{{le}}", heatmap=True)))
        .with_panel(graph(
            "Average batch size",
            "Inferences per execution over 5m (nv_inference_count / nv_inference_exec_count, summed over "
            "pods): 1.0 means every request ran alone.",
            "short", [Query(agg("max", "model", rules.INFERENCES_PER_EXEC_RATE5M), "{{model}}")],
            min_value=0))
        .with_panel(graph(
            "Batching efficiency",
            "Average batch size divided by max_batch_size, per pod (exporter, per poll interval). Low "
            "efficiency under load: raise max_queue_delay_microseconds or preferred_batch_size.",
            "percentunit", [Query(f"avg by (model) ({sel('tidescale_batching_efficiency_ratio')})", "{{model}}")],
            min_value=0))
        .with_row(row("Profile and versions"))
        .with_panel(graph(
            "Op-time share by op class",
            "Share of op self time per op class in the latest profile of each version. Above the dashed "
            "line the alerts open a model review (e.g. string ops in a CTR model).",
            "percentunit", [Query(agg("max", "version, op_class", rules.OP_TIME_SHARE, MODEL_ONLY),
                                  "v{{version}} {{op_class}}")],
            thresholds=[Threshold(limit) for limit in review_limits], min_value=0))
        .with_panel(graph(
            "Requests per second by version",
            "Successful requests per second per model version over 5m: shows rollouts and which version "
            "serves traffic.",
            "reqps", [Query(agg("sum", "model, version", rules.VERSION_REQUEST_SUCCESS_RATE5M),
                            "{{model}} v{{version}}")], stacked=True, min_value=0))
    )
