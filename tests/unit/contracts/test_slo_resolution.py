"""One SLO path: the alert rules' SLO group and the recommender's per-target threshold resolve alike."""

from __future__ import annotations

import pytest

from tidescale.alerts.config import AlertsConfig
from tidescale.autoscaler.settings import RecommenderSettings
from tidescale.contracts.slo import DEFAULT_SLO_NAME, SloValues, slo_of

CHART_SLO = {"latency": {"thresholdSeconds": 1.0, "objective": 0.95}, "models": [
    {"name": "rankers", "model": "ctr_.*|rank", "latency": {"thresholdSeconds": 0.25, "objective": 0.995}},
    {"name": "offline", "model": "embedder", "namespace": "batch-.*", "availability": {"objective": 0.99}},
    {"name": "late", "model": "ctr_ranker", "latency": {"thresholdSeconds": 0.1}},  # shadowed: first match wins
]}
SAME_AS_ALERTS = {"slo_latency_threshold_s": 1.0, "latency_slo_target": 0.95, "slos": [
    {"name": "rankers", "model": "ctr_.*|rank", "latency_threshold_s": 0.25, "latency_objective": 0.995},
    {"name": "offline", "model": "embedder", "namespace": "batch-.*", "availability_objective": 0.99},
    {"name": "late", "model": "ctr_ranker", "latency_threshold_s": 0.1},
]}


def test_the_charts_values_and_the_alerts_config_resolve_to_the_same_slos() -> None:
    assert SloValues.model_validate(CHART_SLO).resolved() == AlertsConfig.model_validate(SAME_AS_ALERTS).resolved_slos()


@pytest.mark.parametrize(("namespace", "model", "expected"), [
    ("ml", "ctr_ranker", "rankers"),        # first match wins over the later `late`
    ("ml", "rank", "rankers"),
    ("ml", "ranker", DEFAULT_SLO_NAME),     # anchored as PromQL's =~: `rank` does not cover `ranker`
    ("ml", "xctr_a", DEFAULT_SLO_NAME),
    ("batch-eu", "embedder", "offline"),
    ("ml", "embedder", DEFAULT_SLO_NAME),   # the namespace pattern must match too
])
def test_a_model_gets_the_first_slo_that_covers_it(namespace: str, model: str, expected: str) -> None:
    assert slo_of(SloValues.model_validate(CHART_SLO).resolved(), namespace, model).name == expected


def test_the_recommender_sizes_each_target_for_its_models_slo() -> None:
    settings = RecommenderSettings.model_validate({"slo": CHART_SLO, "slo_latency_threshold_s": 0.5, "targets": [
        {"deployment": "a", "namespace": "ml", "model": "ctr_ranker"},
        {"deployment": "b", "namespace": "ml", "model": "other"},
        {"deployment": "c", "namespace": "ml", "model": "ctr_x",
         "slo_latency_threshold_s": 0.1},  # set on the target: kept
    ]})
    assert [settings.slo_for(t) for t in settings.targets] == [0.25, 1.0, 0.1]
    without = RecommenderSettings.model_validate({"slo_latency_threshold_s": 0.5, "targets": [
        {"deployment": "a", "namespace": "ml", "model": "ctr_ranker"}]})
    assert without.slo_for(without.targets[0]) == 0.5  # no `slo`: the default threshold


@pytest.mark.parametrize("bad", [
    {"models": [{"name": "x", "model": "("}]},                       # not a regular expression
    {"models": [{"name": "default", "model": "m"}]},                 # the default's name
    {"latency": {"thresholdSeconds": -1}},
    {"models": [{"name": "x", "model": "m", "latencee": {}}]},       # a misspelt key
    {"latency": {"thresholdSeconds": 0.3}},                          # not a bucket boundary
    {"models": [{"name": "x", "model": "m", "latency": {"thresholdSeconds": 2.0}}]},
    {"latency": {"thresholdSeconds": None}},                         # the default SLO has every value
    {"models": [{"name": "x", "model": ""}]},                        # a group matches some model
    {"models": [{"name": "x", "model": "m" * 1025}]},
    {"models": [{"name": "Upper", "model": "m"}]},
    {"models": [{"name": "a", "model": "m"}, {"name": "a", "model": "n"}]},
])
def test_bad_slo_values_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SloValues.model_validate(bad)


def test_a_group_value_set_to_null_is_the_defaults() -> None:
    """Helm keeps a null inside a list item; the template and Python both read it as left out."""
    [group, _] = SloValues.model_validate({"latency": {"thresholdSeconds": 1.0, "objective": 0.95}, "models": [
        {"name": "x", "model": "m", "latency": {"thresholdSeconds": None, "objective": None}}]}).resolved()
    assert (group.latency_threshold_s, group.latency_objective) == (1.0, 0.95)


def test_the_charts_slo_schema_is_generated_from_slo_values() -> None:
    """values.schema.json's `slo` is generated from SloValues (the drift check holds the file to it)."""
    import json

    from tidescale.devstack.chart import SCHEMA, schema_text
    from tidescale.devstack.tools import REPO_ROOT

    committed = json.loads((REPO_ROOT / SCHEMA).read_text())["properties"]["slo"]
    assert committed == json.loads(schema_text((REPO_ROOT / SCHEMA).read_text()))["properties"]["slo"]
    assert committed["required"] == ["latency", "availability", "models"]
    assert committed["properties"]["models"]["items"]["properties"]["name"]["not"] == {"const": "default"}
