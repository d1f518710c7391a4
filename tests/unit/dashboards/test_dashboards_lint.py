"""The dashboard-linter rules hold for every generated dashboard, and each rule catches a broken one."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.paths import REPO
from tidescale.dashboards import lint
from tidescale.dashboards.generate import CHART_DIR, JSON_DIR, artifacts
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
    for uid in UIDS:
        assert artifacts()[f"{JSON_DIR}/{uid}.json"] == artifacts()[f"{CHART_DIR}/{uid}.json"]


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


def test_variables_chain_datasource_namespace_model(boards: dict[str, dict[str, Any]]) -> None:
    for board in boards.values():
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[:3] == ["datasource", "namespace", "model"]
        namespace, model = board["templating"]["list"][1:3]
        assert namespace["query"].startswith("label_values(") and "$namespace" in model["query"]
        assert namespace["refresh"] == model["refresh"] == 2


def test_the_issue_panels_exist(boards: dict[str, dict[str, Any]]) -> None:
    """The panels the issue asks for, by the metric each one must show."""
    wanted = {
        "tidescale-fleet": ["slow_ratio_rate5m", "nv_inference_request_success", "nv_inference_request_failure",
                            "0.99, sum by (le", "tidescale_desired_replicas", "kube_deployment_status_replicas_ready",
                            "ALERTS", "tidescale_model_reviews"],
        "tidescale-model": ['stage="queue"', 'stage="compute_infer"', "nv_inference_pending_request_count",
                            "tidescale_batch_size_bucket", "tidescale_batching_efficiency_ratio",
                            "tidescale_op_time_share", "model, version"],
        "tidescale-gpu": ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                          "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
                          "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "exported_pod"],
        "tidescale-autoscaling": ["tidescale_desired_replicas", "kube_horizontalpodautoscaler_status_desired_replicas",
                                  "changes(kube_deployment_spec_replicas", "kube_pod_status_ready_time",
                                  "tidescale_recommender_failsafe"],
        "tidescale-profiler": ["tidescale_op_time_share", "tidescale_op_top_share", "tidescale_profile_age_seconds"],
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

    from tidescale.exporters.latency import STAGES

    used = {m for board in boards.values() for _, expr in lint.targets(board)
            for m in re.findall(r'stage="([^"]+)"', expr)}
    assert used and used <= set(STAGES)
