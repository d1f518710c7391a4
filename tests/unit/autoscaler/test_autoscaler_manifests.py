"""Rendered manifests validate against Kubernetes/KEDA schemas; adapter rules do correct math."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import kubernetes_validate
import promql_parser
import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.crds import openapi_schema
from tests.paths import REPO
from tidescale import cli
from tidescale.autoscaler import adapter, generate
from tidescale.autoscaler.manifests import (
    PreScale,
    Target,
    desired_path,
    hpa_manifest,
    keda_manifest,
    keda_query,
    render,
    tidescale_hpa_spec,
)
from tidescale.contracts import catalog
from tidescale.contracts import recorded as names
from tidescale.contracts.errors import UsageError
from tidescale.contracts.promql import metric_names, substitute_templates

TARGET = Target("triton-resnet", "ml-serving", "resnet50", 2, 30, 0.25)


def keda_schema() -> dict[str, Any]:
    return openapi_schema("ScaledObject", "v1alpha1")


def test_hpa_takes_a_flash_crowd_in_one_sync() -> None:
    """The recommender already looked ahead: a 10x step in its answer reaches the Deployment in one
    15 s sync, not over several (the scale-up policy allows 11x or +8 pods)."""
    from tidescale.sim.hpa_controller import HpaEmulator, Pod

    target = Target("triton", "ml", "m", 1, 100)
    hpa = HpaEmulator(tidescale_hpa_spec(target), 3)
    pods = [Pod(f"p{i}", "Running", True) for i in range(3)]
    assert hpa.step(0.0, {adapter.DESIRED_REPLICAS: 30.0}, pods) == 30


def test_hpa_validates_against_kubernetes_1_35_strict() -> None:
    kubernetes_validate.validate(hpa_manifest(TARGET), "1.35.0", strict=True)


def test_legacy_hpa_validates_on_1_29_and_has_no_tolerance() -> None:
    doc = hpa_manifest(TARGET, legacy=True)
    kubernetes_validate.validate(doc, "1.29.0", strict=True)
    assert "tolerance" not in yaml.safe_dump(doc)


def test_hpa_is_autoscaling_v2_with_exact_target() -> None:
    doc = hpa_manifest(TARGET)
    assert doc["apiVersion"] == "autoscaling/v2"
    (metric,) = doc["spec"]["metrics"]
    assert metric["type"] == "External"
    assert metric["external"]["metric"]["selector"]["matchLabels"] == {"deployment": "triton-resnet"}
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    beh = doc["spec"]["behavior"]
    assert beh["scaleUp"]["tolerance"] == "0" and beh["scaleDown"]["tolerance"] == "0"
    assert beh["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert (doc["spec"]["minReplicas"], doc["spec"]["maxReplicas"]) == (2, 30)


@pytest.mark.parametrize("legacy", [False, True])
def test_keda_scaled_object_validates_against_the_crd(legacy: bool) -> None:
    doc = keda_manifest(TARGET, "http://prometheus:9090", legacy)
    jsonschema.validate(doc, keda_schema())
    trigger = doc["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["threshold"] == "1"
    assert trigger["metadata"]["ignoreNullValues"] == "false"


@pytest.mark.parametrize("legacy", [False, True])
def test_keda_reads_the_recommender_through_a_metrics_api_trigger_the_crd_accepts(legacy: bool) -> None:
    url = "http://tidescale-recommender.monitoring.svc:9106"
    doc = keda_manifest(TARGET, "http://prometheus:9090", legacy, recommender_url=url)
    jsonschema.validate(doc, keda_schema())
    [trigger] = doc["spec"]["triggers"]
    assert trigger["type"] == "metrics-api" and trigger["metricType"] == "AverageValue"
    meta = trigger["metadata"]
    assert meta["url"] == f"{url}{desired_path(TARGET.namespace, TARGET.deployment)}"
    assert (meta["format"], meta["valueLocation"], meta["targetValue"]) == ("json", "desired_replicas", "1")
    # every recommender behind the Service, the max: what max() reads from Prometheus
    assert (meta["aggregateFromKubeServiceEndpoints"], meta["aggregationType"]) == ("true", "max")


@pytest.mark.parametrize("url", ["http://recommender:9106", "ftp://r.ns.svc", "http://r.ns.svc/x", "http://R.ns"])
def test_a_recommender_url_keda_cannot_resolve_to_a_service_is_refused(url: str) -> None:
    with pytest.raises(UsageError, match="SERVICE.NAMESPACE"):
        keda_manifest(TARGET, "http://prometheus:9090", recommender_url=url)


def test_prescale_adds_a_cron_trigger_the_crd_accepts() -> None:
    """A known peak raises the floor through a KEDA cron trigger; the prometheus trigger stays first."""
    peak = PreScale.parse("Europe/Berlin;50 8 * * 1-5;0 11 * * 1-5;12")
    target = Target("triton-resnet", "ml-serving", "resnet50", 2, 30, 0.25, (peak,))
    doc = yaml.safe_load(render(target, keda=True))
    jsonschema.validate(doc, keda_schema())
    assert [t["type"] for t in doc["spec"]["triggers"]] == ["prometheus", "cron"]
    assert doc["spec"]["triggers"][1]["metadata"] == {"timezone": "Europe/Berlin", "start": "50 8 * * 1-5",
                                                      "end": "0 11 * * 1-5", "desiredReplicas": "12"}


@settings(max_examples=300, deadline=None)
@example("America;0 8 * * *;0 9 * * *;2")  # a directory of the zone database, not a zone
@given(st.text(max_size=120) | st.lists(st.text(max_size=25), min_size=4, max_size=4).map(";".join))
def test_prescale_parser_never_fails_other_than_with_a_usage_error(text: str) -> None:
    try:
        peak = PreScale.parse(text)
    except UsageError:
        return
    assert peak.replicas >= 1 and len(peak.start.split()) == len(peak.end.split()) == 5


def test_keda_query_returns_one_series() -> None:
    q = keda_query(TARGET)
    tree = promql_parser.parse(q)
    assert isinstance(tree, promql_parser.AggregateExpr) and not tree.modifier  # max() without by: one series
    assert 'namespace="ml-serving"' in q and 'deployment="triton-resnet"' in q


def test_render_prints_valid_documents() -> None:
    docs = list(yaml.safe_load_all(render(TARGET)))
    assert [d["kind"] for d in docs] == ["HorizontalPodAutoscaler", "ConfigMap"]
    for d in docs:
        kubernetes_validate.validate(d, "1.35.0", strict=True)
    config = yaml.safe_load(docs[1]["data"]["config.yaml"])
    assert config == adapter.adapter_config()
    keda_docs = list(yaml.safe_load_all(render(TARGET, keda=True)))
    assert [d["kind"] for d in keda_docs] == ["ScaledObject"]
    # a comment says how to shed what cannot meet the SLO (Triton's queue policy): the fragment itself
    # with the largest batch's execution time, else what to give for it
    assert "timeout = SLO (250000 µs) minus" in render(TARGET) and "default_queue_policy" not in render(TARGET)
    assert "default_timeout_microseconds: 166000" in render(TARGET, max_batch_exec_s=0.084)
    no_slo = Target("triton-resnet", "ml-serving", "resnet50", 2, 30)
    assert "timeout = SLO (500000 µs) minus" in render(no_slo)  # the default SLO


def all_rules() -> list[dict[str, Any]]:
    return adapter.custom_rules() + adapter.external_rules()


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r["name"]["as"])
def test_adapter_rule_math_and_names(rule: dict[str, Any]) -> None:
    q = rule["metricsQuery"]
    promql_parser.parse(substitute_templates(q))
    promql_parser.parse(rule["seriesQuery"])
    known = catalog.names() | set(names.all_names())
    assert metric_names(q) <= known, metric_names(q) - known
    assert "<<.LabelMatchers>>" in q                      # selectors and namespace come from the HPA
    assert not re.search(r"namespace\s*=\s*\"", q)          # never a hard-coded namespace
    assert "1 +" not in q and "1+" not in q                  # no biased denominators
    assert "avg(" not in q                                   # no average of per-pod ratios
    for m in re.finditer(r"rate\(", q):
        assert q[:m.start()].rstrip().endswith("(") and "sum by" in q[:m.start()]  # every rate is summed


def test_adapter_exposes_the_documented_metrics() -> None:
    exposed = {r["name"]["as"] for r in all_rules()}
    assert exposed == {adapter.QUEUE_DEPTH, adapter.INFLIGHT, adapter.QUEUE_TO_COMPUTE, adapter.GPU_UTILIZATION,
                       adapter.P99_SECONDS, adapter.DESIRED_REPLICAS}


def test_generated_artifacts_are_committed_and_fresh() -> None:
    produced = generate.artifacts()
    assert set(produced) == {generate.ADAPTER_CONFIG, generate.CHART_OBJECTS}
    stale = [p for p, text in produced.items() if not (REPO / p).is_file() or (REPO / p).read_text() != text]
    assert not stale, f"run `tidescale generate`: {stale}"
    assert yaml.safe_load(produced[generate.ADAPTER_CONFIG]) == adapter.adapter_config()


@pytest.mark.parametrize(("argv", "message"), [
    (["--min-replicas", "5", "--max-replicas", "2"], "must not exceed"),
    (["--min-replicas", "0"], ">= 1"),
    (["--slo-p99", "0"], "--slo-latency-threshold must be a finite number > 0"),
    (["--slo-p99", "nan"], "--slo-latency-threshold must be a finite number > 0"),
    (["--slo-p99", "inf"], "--slo-latency-threshold must be a finite number > 0"),
    (["--deployment", "Bad_Name"], "not a valid Kubernetes name"),
    (["--prescale", "UTC;0 8 * * *;0 9 * * *;4"], "--prescale needs --keda"),
    (["--keda", "--prescale", "Mars/Olympus;0 8 * * *;0 9 * * *;4"], "unknown IANA time zone"),
    (["--keda", "--prescale", "UTC;0 8 * *;0 9 * * *;4"], "not a 5-field cron expression"),
    (["--keda", "--prescale", "UTC;0 8 * * *;0 8 * * *;4"], "start and end must differ"),
    (["--keda", "--prescale", "UTC;0 8 * * *;0 9 * * *;four"], "not a whole number"),
    (["--keda", "--prescale", "UTC;0 8 * * *;0 9 * * *;99"], "exceed --max-replicas"),
    (["--keda", "--prescale", "UTC;0 8 * * *"], "expected TIMEZONE;START CRON;END CRON;REPLICAS"),
    (["--recommender-url", "http://r.ns.svc:9106"], "--recommender-url needs --keda"),
    (["--keda", "--recommender-url", "http://localhost:9106"], "SERVICE.NAMESPACE"),
    (["--keda", "--prometheus-url", "prometheus.monitoring:9090"], "must be an http(s):// URL"),
    (["--keda", "--prometheus-url", "http://"], "must be an http(s):// URL"),
    # A line break ended the header's comment: the rest of the name was YAML of its own.
    (["--model", "m\nkind: Secret"], "contains control characters"),
])
def test_render_bad_input_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = {"--deployment": "triton", "--namespace": "ml", "--model": "m"}
    args = ["autoscale", "render"]
    for k, v in base.items():
        if k not in argv:
            args += [k, v]
    with pytest.raises(SystemExit) as exc:
        cli.main([*args, *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_render_cli_prints_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["autoscale", "render", "--deployment", "triton", "--namespace", "ml", "--model", "m", "--keda"])
    assert exc.value.code == 0
    (doc,) = list(yaml.safe_load_all(capsys.readouterr().out))
    assert doc["kind"] == "ScaledObject"
