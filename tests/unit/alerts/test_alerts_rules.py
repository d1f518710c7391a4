"""The generated rules: promtool-clean, unit-tested with the real promtool, every alert documented."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO
from tidescale.alerts.alerting import alert_names
from tidescale.alerts.config import DEFAULT_SLO_THRESHOLDS_S, AlertsConfig, default_config, le_value
from tidescale.alerts.generate import ALERTING, RECORDING, artifacts, rendered
from tidescale.contracts import recorded as names
from tidescale.devstack import rulecheck

SEVERITIES = {"critical", "warning", "info", "none"}


def committed(rel: str) -> dict:
    return yaml.safe_load((REPO / rel).read_text())


def alert_rules() -> list[dict]:
    return [r for g in committed(ALERTING)["groups"] for r in g["rules"]]


def test_committed_artifacts_match_the_generator() -> None:
    for rel, content in artifacts().items():
        assert (REPO / rel).read_text() == content, f"{rel} is stale: run `tidescale generate`"


def test_promtool_check_rules_is_clean() -> None:
    run = rulecheck.check_rules([REPO / RECORDING, REPO / ALERTING])
    assert run.ok, run.output
    assert "SUCCESS" in run.output


def test_promtool_unit_tests_pass() -> None:
    files = rulecheck.test_files()
    assert len(files) >= len(alert_names(default_config())) + 1
    with ThreadPoolExecutor(max_workers=2) as pool:  # one promtool per file, two at a time
        runs = dict(zip(files, pool.map(lambda f: rulecheck.test_rules([f]), files), strict=True))
    failed = {f.name: run.output for f, run in runs.items() if not run.ok or "SUCCESS" not in run.output}
    assert not failed, "\n".join(failed.values())


@pytest.mark.parametrize("alertname", alert_names(default_config()))
def test_every_alert_has_a_promtool_test_with_firing_silent_and_negative_cases(alertname: str) -> None:
    path = rulecheck.TESTS_DIR / f"{alertname.lower()}.yaml"
    assert path.exists(), f"no promtool test {path}"
    doc = yaml.safe_load(path.read_text())
    checks = [c for t in doc["tests"] for c in t.get("alert_rule_test", []) if c["alertname"] == alertname]
    firing = [c for c in checks if c.get("exp_alerts")]
    silent = [c for c in checks if not c.get("exp_alerts")]
    assert firing, f"{alertname}: no firing case"
    for case in firing:
        for alert in case["exp_alerts"]:
            assert set(alert["exp_annotations"]) >= {"summary", "description", "runbook_url"}
    if alertname != "Watchdog":  # always firing by design
        assert silent, f"{alertname}: no silent/negative case"


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: f"{r['alert']}-{r['labels']['severity']}")
def test_every_alert_carries_severity_summary_description_and_an_existing_runbook(rule: dict) -> None:
    assert rule["labels"]["severity"] in SEVERITIES
    ann = rule["annotations"]
    assert ann["summary"] and ann["description"]
    assert ann["runbook_url"].endswith(f"/docs/runbooks/{rule['alert'].lower()}.md")
    runbook = REPO / "docs" / "runbooks" / f"{rule['alert'].lower()}.md"
    text = runbook.read_text()
    assert "What to check" in text and "What to do" in text, runbook


def test_recording_rule_names_are_exactly_the_published_constants() -> None:
    recorded = {r["record"] for g in committed(RECORDING)["groups"] for r in g["rules"]}
    assert recorded == set(names.all_names())
    for name in recorded:
        level, metric, operation = name.split(":")
        assert level and metric and operation, name


def test_review_alert_routes_on_profile_data_alone() -> None:
    """TritonModelReviewRequired must not depend on profile freshness (that is its own alert)."""
    reviews = [r for r in alert_rules() if r["alert"] == "TritonModelReviewRequired"]
    assert {r["labels"]["trigger"] for r in reviews} == {"op_share", "p99_regression"}
    op_share = next(r for r in reviews if r["labels"]["trigger"] == "op_share")
    assert names.OP_TIME_SHARE in op_share["expr"]
    assert "timestamp" not in op_share["expr"] and "age" not in op_share["expr"]


def test_default_thresholds_are_prometheus_client_bucket_labels() -> None:
    assert DEFAULT_SLO_THRESHOLDS_S == (0.1, 0.25, 0.5, 1.0)
    assert [le_value(t) for t in DEFAULT_SLO_THRESHOLDS_S] == ["0.1", "0.25", "0.5", "1.0"]


PER_MODEL = {"slos": [
    {"name": "rankers", "model": "ctr_.*", "latency_threshold_s": 0.25, "latency_objective": 0.999},
    {"name": "batch", "model": "ctr_ranker|embedder", "namespace": "offline", "availability_objective": 0.99},
]}


def _model_series(namespace: str, model: str, fast_per_min: int, le: str = "0.25") -> list[dict]:
    """A model whose requests (100 a minute) take 0.3 s except *fast_per_min* under *le*."""
    labels = f'namespace="{namespace}", model="{model}", version="1", stage="request"'
    return [
        {"series": f'tidescale_request_duration_seconds_bucket{{{labels}, le="{le}"}}',
         "values": f"0+{fast_per_min}x60"},
        {"series": f'tidescale_request_duration_seconds_bucket{{{labels}, le="0.5"}}', "values": "0+100x60"},
        {"series": f"tidescale_request_duration_seconds_count{{{labels}}}", "values": "0+100x60"},
        {"series": f'nv_inference_request_success{{namespace="{namespace}", pod="{model}-7d9c8b-x1x2z", '
                   f'model="{model}", version="1"}}', "values": "0+100x60"},
    ]


def _burn_annotations(namespace: str, burn: str) -> dict[str, str]:
    rule = next(r for r in alert_rules() if r["alert"] == "TritonLatencyBudgetBurn")
    description = rule["annotations"]["description"].replace("{{ $labels.namespace }}", namespace)
    description = description.replace("{{ $labels.model }}", "ctr_ranker")
    return {"summary": "Model ctr_ranker is burning its latency SLO budget fast.",
            "runbook_url": rule["annotations"]["runbook_url"],
            "description": description.replace('{{ $value | printf "%.1f" }}', burn)}


def test_each_model_burns_against_its_own_slo_group(tmp_path: Path) -> None:
    """Every request takes 0.3 s: over the 0.25 s threshold of the `rankers` group (ctr_ranker pages),
    inside the default 0.5 s (embedder stays quiet). The SLO series name each model's group, first
    match wins (ctr_ranker in `offline` is a ranker, not `batch`), and the objective sets the budget."""
    cfg = AlertsConfig.model_validate(PER_MODEL)
    for name, content in rendered(cfg).items():
        (tmp_path / name).write_text(content)
    series = [*_model_series("ml", "ctr_ranker", 0), *_model_series("ml", "embedder", 0),
              *_model_series("offline", "ctr_ranker", 99), *_model_series("offline", "embedder", 100)]
    threshold, objective = names.SLO_LATENCY_THRESHOLD, names.SLO_AVAILABILITY_OBJECTIVE
    suite = {
        "rule_files": ["tidescale-recording.yaml", "tidescale-alerts.yaml"],
        "evaluation_interval": "30s",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {"expr": threshold, "eval_time": "5m", "exp_samples": [
                    {"labels": f'{threshold}{{namespace="{ns}", model="{m}", slo="{slo}", le="{le}"}}', "value": v}
                    for ns, m, slo, le, v in (("ml", "ctr_ranker", "rankers", "0.25", 0.25),
                                              ("ml", "embedder", "default", "0.5", 0.5),
                                              ("offline", "ctr_ranker", "rankers", "0.25", 0.25),
                                              ("offline", "embedder", "batch", "0.5", 0.5))]},
                {"expr": f'{objective}{{model="embedder"}}', "eval_time": "5m", "exp_samples": [
                    {"labels": f'{objective}{{namespace="ml", model="embedder", slo="default"}}', "value": 0.999},
                    {"labels": f'{objective}{{namespace="offline", model="embedder", slo="batch"}}', "value": 0.99}]},
            ],
            "alert_rule_test": [{
                "eval_time": "10m", "alertname": "TritonLatencyBudgetBurn",
                # 100 % slow at a 0.1 % budget is a 1000x burn; 1 % slow at the same budget is 10x.
                "exp_alerts": [{"exp_labels": {"severity": "critical", "namespace": ns, "model": "ctr_ranker"},
                                "exp_annotations": _burn_annotations(ns, burn)}
                               for ns, burn in (("ml", "1000.0"), ("offline", "10.0"))],
            }],
        }],
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    run = rulecheck.test_rules([tmp_path / "suite.yaml"])
    assert run.ok, run.output


def test_slo_group_patterns_are_escaped_and_promtool_clean(tmp_path: Path) -> None:
    cfg = AlertsConfig.model_validate({"slos": [{"name": "q", "model": 'a"b|c\\d', "latency_threshold_s": 1.0}]})
    text = rendered(cfg)["tidescale-recording.yaml"]
    assert 'model=~"a\\"b|c\\\\d"' in text
    for name, content in rendered(cfg).items():
        (tmp_path / name).write_text(content)
    run = rulecheck.check_rules([tmp_path / "tidescale-recording.yaml", tmp_path / "tidescale-alerts.yaml"])
    assert run.ok, run.output


@pytest.mark.parametrize("bad", [
    {"slos": [{"name": "default", "model": "x"}]},
    {"slos": [{"name": "Upper Case", "model": "x"}]},
    {"slos": [{"name": "a", "model": "(x"}]},
    {"slos": [{"name": "a", "model": "x", "latency_objective": 1.0}]},
    {"slos": [{"name": "a", "model": "x"}, {"name": "a", "model": "y"}]},
    {"slos": [{"name": "a", "model": "x", "latency_threshold_s": 0.3}]},
])
def test_bad_slo_groups_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        AlertsConfig.model_validate(bad)


def test_a_threshold_that_is_not_a_bucket_boundary_is_refused() -> None:
    with pytest.raises(ValueError, match="not a bucket boundary"):
        AlertsConfig.model_validate({"slo_latency_threshold_s": 0.3})


@pytest.mark.parametrize(
    "bad",
    [{"op_class_limits": {"String Ops": 0.1}}, {"op_class_limits": {"string": 1.5}},
     {"for": {"model_review": "15 minutes"}}, {"extra_labels": {"severity": "x"}},
     {"triton_container_regex": "(unclosed"}, {"exporter_job": "x{{ $value }}"},
     {"spans_dropped_max_ratio": 1.5}, {"spans_dropped_max_ratio": 0}, {"spans_dropped_min": 0}],
)
def test_bad_config_values_are_refused_with_the_field_named(bad: dict) -> None:
    with pytest.raises(ValueError):
        AlertsConfig.model_validate(bad)


def test_the_span_drop_alert_takes_its_share_and_count_from_the_config() -> None:
    cfg = AlertsConfig.model_validate({"spans_dropped_max_ratio": 0.05, "spans_dropped_min": 100,
                                       "exporter_job": "edge-exporter"})
    groups = yaml.safe_load(rendered(cfg)["tidescale-alerts.yaml"])["groups"]
    rule = next(r for g in groups for r in g["rules"] if r["alert"] == "TidescaleSpansDropped")
    assert ">= 100\nand" in rule["expr"] and rule["expr"].endswith("> 0.05")
    assert rule["expr"].count('{job="edge-exporter"}') == 4
    assert "over 5% of what it received" in rule["annotations"]["description"]


def test_short_for_durations_render_for_fast_end_to_end_runs() -> None:
    cfg = AlertsConfig.model_validate({"for": {"model_review": "5s"}, "evaluation_interval": "1s"})
    groups = yaml.safe_load(rendered(cfg)["tidescale-alerts.yaml"])["groups"]
    review = next(r for g in groups for r in g["rules"] if r["alert"] == "TritonModelReviewRequired")
    assert review["for"] == "5s"
    assert {g["interval"] for g in groups} == {"1s"}


def test_committed_rules_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDESCALE_ALERTS_QUEUE_DEPTH_PER_REPLICA_LIMIT", "3")
    assert default_config().queue_depth_per_replica_limit == 8.0
    assert default_config().model_dump() == AlertsConfig.model_validate({}).model_dump() | {
        "queue_depth_per_replica_limit": 8.0}
    assert artifacts()[ALERTING] == (REPO / ALERTING).read_text()


def test_configured_strings_reaching_promql_are_escaped(tmp_path: Path) -> None:
    cfg = AlertsConfig.model_validate({"triton_container_regex": 'triton"|x\\d', "pod_deployment_regex": '(.+)-"x"'})
    files = rendered(cfg)
    assert 'container=~"triton\\"|x\\\\d"' in files["tidescale-alerts.yaml"]
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    run = rulecheck.check_rules([tmp_path / "tidescale-recording.yaml", tmp_path / "tidescale-alerts.yaml"])
    assert run.ok, run.output
