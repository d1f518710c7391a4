"""The latency collector: a histogram per namespace that adds up, idle expiry, sample-rate gauge."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidescale.contracts import catalog
from tidescale.exporters.buckets import log_buckets
from tidescale.exporters.cardinality import MAX_LABEL_VALUE_CHARS, clean_label_value
from tidescale.exporters.latency import LatencyAggregator
from tidescale.exporters.selfmetrics import SelfMetrics
from tidescale.exporters.stages import StageSample


def exposition(agg: LatencyAggregator) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry()
    registry.register(agg)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_namespaces_get_histograms_that_add_up_to_the_fleet() -> None:
    bounds = log_buckets(0.001, 10, [0.1])
    agg = LatencyAggregator(bounds)
    for i in range(1, 101):
        agg.observe(StageSample("m", "1", "request", i / 1000, namespace="a" if i % 2 else "b"))
    out = exposition(agg)
    assert sorted(labels["namespace"] for labels, _ in out["tidescale_request_duration_seconds_count"]) == ["a", "b"]
    summed: dict[str, float] = {}
    for labels, value in out["tidescale_request_duration_seconds_bucket"]:
        summed[labels["le"]] = summed.get(labels["le"], 0.0) + value  # what `sum by (le)` does
    assert summed["0.1"] == 100.0 and summed["+Inf"] == 100.0  # the SLO bound is exact: 1..100 ms
    assert sum(v for _, v in out["tidescale_request_duration_seconds_sum"]) == pytest.approx(5.05)


def test_no_quantile_gauges_are_exposed_or_catalogued() -> None:
    """Per-replica quantiles cannot be aggregated: the quantiles come from the recording rules."""
    agg = LatencyAggregator(log_buckets(0.001, 10, [0.1]))
    agg.observe(StageSample("m", "1", "request", 0.05))
    families = {fam.name for fam in text_string_to_metric_families(agg.exposition())}
    assert families == {"tidescale_request_duration_seconds", "tidescale_trace_sample_rate"}
    assert 'quantile="' not in agg.exposition()
    assert "tidescale_request_duration_quantile_seconds" not in catalog.names()


def test_idle_series_disappear_and_free_their_slot() -> None:
    now = [0.0]
    metrics = SelfMetrics()
    agg = LatencyAggregator((0.1,), max_series=1, idle_ttl_s=100, clock=lambda: now[0], selfmetrics=metrics)
    assert agg.observe(StageSample("old", "1", "request", 0.01))
    assert not agg.observe(StageSample("new", "1", "request", 0.01))
    assert metrics.series_dropped["tidescale_request_duration_seconds"] == 1
    now[0] = 500.0
    assert "tidescale_request_duration_seconds_count" not in exposition(agg)
    assert agg.observe(StageSample("new", "1", "request", 0.01))


def test_a_configured_sample_rate_weights_each_traced_request() -> None:
    agg = LatencyAggregator((0.1,), sample_rate=10)
    agg.observe(StageSample("m", "2", "queue", 0.2))
    out = exposition(agg)
    assert out["tidescale_trace_sample_rate"] == [({"model": "m", "version": "2", "namespace": ""}, 0.1)]
    assert out["tidescale_request_duration_seconds_count"][0][1] == 10.0  # stands for 10 requests


def test_clean_label_value_bounds_length_and_control_characters() -> None:
    assert clean_label_value("a\nb\x00c") == "a?b?c"
    assert len(clean_label_value("x" * 10_000)) == MAX_LABEL_VALUE_CHARS
    assert clean_label_value('quote"s') == 'quote"s'


def test_series_memory_is_fixed_whatever_the_durations() -> None:
    bounds = log_buckets(0.001, 10, [0.1])
    agg = LatencyAggregator(bounds)
    for i in range(5000):
        agg.observe(StageSample("m", "1", "request", 1e-6 * 1.01 ** i))  # spans 21 decades
    [series] = agg._series.values()
    assert len(series.histogram.counts) == len(bounds) + 1
    assert series.histogram.count == 5000 and series.histogram.counts[-1] > 0  # the top lands in +Inf
