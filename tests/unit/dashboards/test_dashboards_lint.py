"""The dashboard-linter rules hold for every generated dashboard, and each rule catches a broken one."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.paths import REPO
from tidescale.contracts import recorded as rules
from tidescale.dashboards import lint
from tidescale.dashboards.generate import CHART_DIR, artifacts
from tidescale.dashboards.registry import build_all

UIDS = ["tidescale-fleet", "tidescale-model", "tidescale-gpu", "tidescale-autoscaling", "tidescale-profiler"]


@pytest.fixture(scope="module")
def boards() -> dict[str, dict[str, Any]]:
    return build_all()


def test_five_dashboards_with_stable_uids(boards: dict[str, dict[str, Any]]) -> None:
    assert list(boards) == UIDS
    assert [b["uid"] for b in boards.values()] == UIDS


@pytest.mark.parametrize("uid", UIDS)
def test_every_dashboard_passes_every_rule(boards: dict[str, dict[str, Any]], uid: str) -> None:
    assert lint.lint(boards[uid]) == []


def test_dashboards_link_to_each_other(boards: dict[str, dict[str, Any]]) -> None:
    assert lint.link_problems(boards) == []
    assert lint.link_problems({**boards, "tidescale-extra": {"links": []}})  # a new, unlinked one is caught


def test_panel_ids_are_unique(boards: dict[str, dict[str, Any]]) -> None:
    for board in boards.values():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)) and 0 not in ids


def test_committed_json_matches_the_builders() -> None:
    for rel, text in artifacts().items():
        assert (REPO / rel).read_text() == text, f"{rel} is stale: run `tidescale generate`"
    uids = {rel.rsplit("/", 1)[1].removesuffix(".json") for rel in artifacts() if rel.endswith(".json")}
    assert uids == set(UIDS)
    assert sorted(artifacts()) == sorted(f"{CHART_DIR}/{uid}.json" for uid in UIDS)  # written once


def _first_panel(board: dict[str, Any]) -> dict[str, Any]:
    return next(lint.panels(board))


def _set_expr(expr: str) -> Callable[[dict[str, Any]], None]:
    def mutate(board: dict[str, Any]) -> None:
        _first_panel(board)["targets"][0]["expr"] = expr
    return mutate


def _drop_datasource_variable(board: dict[str, Any]) -> None:
    board["templating"]["list"].pop(0)


def _swap_variables(board: dict[str, Any]) -> None:
    variables = board["templating"]["list"]
    variables[1], variables[2] = variables[2], variables[1]


def _refresh_on_load(board: dict[str, Any]) -> None:
    board["templating"]["list"][1]["refresh"] = 1


def _hardcoded_datasource(board: dict[str, Any]) -> None:
    _first_panel(board)["datasource"] = {"type": "prometheus", "uid": "prometheus"}


def _no_description(board: dict[str, Any]) -> None:
    _first_panel(board)["description"] = ""


def _bad_unit(board: dict[str, Any]) -> None:
    _first_panel(board)["fieldConfig"]["defaults"]["unit"] = "furlongs"


def _no_targets(board: dict[str, Any]) -> None:
    _first_panel(board)["targets"] = []


def _editable(board: dict[str, Any]) -> None:
    board["editable"] = True


# What every panel did before it read the recording rules: recompute a recorded aggregation.
RAW_REQUEST_RATE = ('sum by (model) (rate(nv_inference_request_success{namespace=~"$namespace", model=~"$model"}'
                    "[$__rate_interval]))")


MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], Callable[[dict[str, Any]], list[str]]]] = {
    "no datasource variable": (_drop_datasource_variable, lint.template_datasource_rule),
    "model before namespace": (_swap_variables, lint.template_chain_rule),
    "refresh on load": (_refresh_on_load, lint.template_on_time_change_reload_rule),
    "hard-coded datasource": (_hardcoded_datasource, lint.panel_datasource_rule),
    "no description": (_no_description, lint.panel_title_description_rule),
    "bad unit": (_bad_unit, lint.panel_units_rule),
    "no targets": (_no_targets, lint.panel_no_targets_rule),
    "invalid PromQL": (_set_expr("sum(rate(x[$__rate_interval])"), lint.target_promql_rule),
    "fixed range": (_set_expr("sum(rate(nv_inference_count[5m]))"), lint.target_rate_interval_rule),
    "bare rate": (_set_expr("rate(nv_inference_count[$__rate_interval])"), lint.target_counter_agg_rule),
    "unknown metric": (_set_expr("sum(nv_not_in_the_catalog)"), lint.target_catalog_rule),
    "raw rate instead of the recording rule": (_set_expr(RAW_REQUEST_RATE), lint.target_recorded_rule),
    "editable": (_editable, lint.dashboard_identity_rule),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_rule_catches_its_defect(boards: dict[str, dict[str, Any]], name: str) -> None:
    mutate, rule = MUTATIONS[name]
    broken = copy.deepcopy(boards["tidescale-fleet"])
    assert rule(broken) == []
    mutate(broken)
    problems = rule(broken)
    assert problems, f"{rule.__name__} missed: {name}"
    assert problems == [p for p in lint.lint(broken) if p in problems]


def test_rate_in_an_aggregation_inside_a_binary_expression_is_fine() -> None:
    board = {"panels": [{"title": "t", "targets": [{"expr": "sum(rate(nv_inference_count[$__rate_interval])) / 2"}]}]}
    assert lint.target_counter_agg_rule(board) == []
    assert lint.target_rate_interval_rule(board) == []


def test_every_query_parses_with_promql_parser(boards: dict[str, dict[str, Any]]) -> None:
    import promql_parser

    from tidescale.contracts.promql import substitute_templates

    exprs = [expr for board in boards.values() for _, expr in lint.targets(board)]
    assert len(exprs) > 40
    for expr in exprs:
        promql_parser.parse(substitute_templates(expr))
        assert "$__rate_interval" in expr or "rate(" not in expr


def test_every_panel_has_a_unit_and_a_description(boards: dict[str, dict[str, Any]]) -> None:
    for board in boards.values():
        for panel in lint.panels(board):
            assert panel["fieldConfig"]["defaults"]["unit"] in lint.VALID_UNITS
            assert len(panel["description"]) > 20


def test_variables_chain_datasource_cluster_namespace_model(boards: dict[str, dict[str, Any]]) -> None:
    for board in boards.values():
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[:4] == ["datasource", "cluster", "namespace", "model"]
        cluster, namespace, model = board["templating"]["list"][1:4]
        assert cluster["query"] == "label_values(nv_inference_request_success, cluster)"
        assert "$cluster" in namespace["query"] and "$namespace" in model["query"]
        assert cluster["refresh"] == namespace["refresh"] == model["refresh"] == 2


def test_every_query_filters_on_the_cluster(boards: dict[str, dict[str, Any]]) -> None:
    """A Thanos or Mimir with several clusters: no panel mixes them when one is chosen."""
    for board in boards.values():
        for panel in lint.panels(board):
            for target in panel.get("targets", []):
                assert 'cluster=~"$cluster"' in target["expr"], (panel["title"], target["expr"])


def test_the_issue_panels_exist(boards: dict[str, dict[str, Any]]) -> None:
    """The panels the issue asks for, by the metric each one must show."""
    wanted = {
        "tidescale-fleet": [rules.SLOW_RATIO_RATE5M, rules.REQUEST_SUCCESS_RATE5M, rules.ERROR_RATIO_RATE5M,
                            rules.P50, rules.P95, rules.P99, "tidescale_desired_replicas",
                            "kube_deployment_status_replicas_ready", "ALERTS", "tidescale_model_reviews"],
        "tidescale-model": ['stage="queue"', 'stage="compute_infer"', rules.MODEL_POD_QUEUE_DEPTH,
                            rules.STAGE_AVG_SECONDS_RATE5M, rules.INFERENCES_PER_EXEC_RATE5M,
                            "tidescale_batch_size_bucket", "tidescale_batching_efficiency_ratio",
                            rules.OP_TIME_SHARE, rules.VERSION_REQUEST_SUCCESS_RATE5M, "model, version"],
        "tidescale-gpu": [rules.GPU_UTILIZATION, rules.POD_GPU_SM_ACTIVE, rules.POD_GPU_TENSOR_ACTIVE,
                          rules.GPU_FB_USED_BYTES, rules.GPU_FB_FREE_BYTES, rules.POD_GPU_POWER_WATTS,
                          rules.GPU_TEMP_CELSIUS, rules.GPU_XID_ERRORS, rules.MODEL_POD_SERVING],
        "tidescale-autoscaling": ["tidescale_desired_replicas", "kube_horizontalpodautoscaler_status_desired_replicas",
                                  "changes(kube_deployment_spec_replicas", "kube_pod_status_ready_time",
                                  "tidescale_recommender_failsafe"],
        "tidescale-profiler": [rules.OP_TIME_SHARE, "tidescale_op_top_share", "tidescale_profile_age_seconds"],
    }
    for uid, needles in wanted.items():
        text = json.dumps([expr for _, expr in lint.targets(boards[uid])])
        for needle in needles:
            assert needle.replace('"', '\\"') in text, f"{uid} lacks {needle}"


def test_op_share_panel_draws_the_review_threshold(boards: dict[str, dict[str, Any]]) -> None:
    from tidescale.alerts.config import default_config

    panel = next(p for p in lint.panels(boards["tidescale-model"]) if p["title"] == "Op-time share by op class")
    steps = [s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    assert set(default_config().op_class_limits.values()) <= set(steps)


def test_stage_labels_are_the_exporters_stages(boards: dict[str, dict[str, Any]]) -> None:
    import re

    from tidescale.exporters.stages import STAGES

    used = {m for board in boards.values() for _, expr in lint.targets(board)
            for m in re.findall(r'stage="([^"]+)"', expr)}
    assert used and used <= set(STAGES)


def _board(*exprs: str) -> dict[str, Any]:
    return {"panels": [{"title": "t", "targets": [{"expr": expr} for expr in exprs]}]}


def test_a_raw_query_of_a_recorded_aggregation_fails_the_lint() -> None:
    problems = lint.lint(_board(RAW_REQUEST_RATE))
    assert [p for p in problems if "nv_inference_request_success" in p and "RAW_SERIES" in p]


def test_a_recorded_series_joined_to_another_raw_one_still_fails() -> None:
    mixed = f'{rules.REQUEST_SUCCESS_RATE5M} / on (namespace, model) sum by (namespace, model) (nv_inference_count)'
    assert lint.target_recorded_rule(_board(mixed)) == [
        "panel 't': reads the raw series nv_inference_count; read its recording rule "
        "(tidescale.contracts.recorded) or list it in dashboards.lint.RAW_SERIES with the reason"]


def test_recorded_and_allow_listed_series_pass() -> None:
    assert lint.target_recorded_rule(_board(f'sum by (model) ({rules.REQUEST_SUCCESS_RATE5M}{{model=~"$model"}})',
                                            'sum(ALERTS{alertstate="firing"})')) == []


def test_the_lint_command_fails_on_a_raw_query(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from tidescale.cli import main
    from tidescale.dashboards import registry

    built = build_all()
    _first_panel(built["tidescale-fleet"])["targets"][0]["expr"] = RAW_REQUEST_RATE
    monkeypatch.setattr(registry, "build_all", lambda: built)
    with pytest.raises(SystemExit) as exit_info:
        main(["dashboards", "lint"])
    assert exit_info.value.code != 0
    assert "raw series nv_inference_request_success" in capsys.readouterr().err


def _recording_rule_inputs() -> set[str]:
    from tidescale.alerts.config import default_config
    from tidescale.alerts.recording import recording_groups
    from tidescale.contracts.promql import metric_names

    return {name for group in recording_groups(default_config()) for rule in group["rules"]
            for name in metric_names(rule["expr"])}


def test_no_allow_listed_series_is_aggregated_by_a_recording_rule() -> None:
    """An allow-listed series a rule already reads would let a panel recompute that rule."""
    inputs = _recording_rule_inputs()
    assert "nv_inference_request_success" in inputs  # the check sees the rules' inputs
    assert set(lint.RAW_SERIES) & inputs == set()


def test_every_allow_listed_series_is_read_by_a_panel_and_has_a_reason(boards: dict[str, dict[str, Any]]) -> None:
    from tidescale.contracts.promql import metric_names

    read = {name for board in boards.values() for _, expr in lint.targets(board) for name in metric_names(expr)}
    assert set(lint.RAW_SERIES) <= read, "stale RAW_SERIES entries"
    assert all(len(reason) > 20 for reason in lint.RAW_SERIES.values())


def test_most_queries_read_recorded_series(boards: dict[str, dict[str, Any]]) -> None:
    """Every query of a latency, traffic, batching, GPU or op-share panel reads a recording rule."""
    from tidescale.contracts.promql import metric_names

    recorded = set(rules.all_names())
    exprs = [expr for board in boards.values() for _, expr in lint.targets(board)]
    reading = [expr for expr in exprs if metric_names(expr) & recorded]
    assert len(reading) >= 31
    gpu = [expr for _, expr in lint.targets(boards["tidescale-gpu"])]
    assert gpu and all(metric_names(expr) & recorded for expr in gpu)


def test_selectors_take_recorded_and_catalog_names_and_refuse_unknown_ones() -> None:
    from tidescale.dashboards.queries import sel

    assert sel(rules.P99, 'model=~"$model"') == f'{rules.P99}{{model=~"$model"}}'
    assert sel("tidescale_batch_size_bucket", "") == "tidescale_batch_size_bucket"
    with pytest.raises(KeyError, match="nv_not_in_the_catalog"):
        sel("nv_not_in_the_catalog")
