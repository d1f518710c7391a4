"""Two clusters behind one query layer (Thanos, Mimir), with the same namespace, model, Deployment and
HPA names, as the fleet board sees them with "All" clusters selected, evaluated by the real promtool:
one line per cluster, never their sum, and the HPA join never matches across clusters (without the
cluster in its `on`, it is a many-to-many error and the panel is empty)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tidescale.contracts.placeholders import CLUSTER_LABEL, DEFAULT_CLUSTER_LABEL
from tidescale.dashboards import lint
from tidescale.dashboards.registry import build_all
from tidescale.devstack import rulecheck

SERIES = [
    (f'namespace_model:nv_inference_request_success:rate5m{{cluster="{c}", namespace="ml", model="m"}}', f"{v}x20")
    for c, v in (("east", 10), ("west", 30))
] + [
    (f'kube_horizontalpodautoscaler_info{{cluster="{c}", namespace="ml", horizontalpodautoscaler="triton", '
     f'scaletargetref_kind="Deployment", scaletargetref_name="triton"}}', "1x20") for c in ("east", "west")
] + [
    (f'kube_horizontalpodautoscaler_status_desired_replicas{{cluster="{c}", namespace="ml", '
     f'horizontalpodautoscaler="triton"}}', f"{v}x20") for c, v in (("east", 2), ("west", 7))
]


def fleet_query(title: str, containing: str = "") -> str:
    [expr] = [e for t, e in lint.targets(build_all()["tidescale-fleet"]) if t == title and containing in e]
    return expr.replace("$__rate_interval", "5m").replace("$cluster", ".*").replace("$namespace", ".*") \
        .replace("$model", ".*")


def promtool_expects(tmp_path: Path, expr: str, expected: dict[str, float]) -> rulecheck.ToolRun:
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in SERIES],
        "promql_expr_test": [{"expr": expr, "eval_time": "10m", "exp_samples": [
            {"labels": labels, "value": v} for labels, v in expected.items()]}],
    }]}
    path = tmp_path / "panel.yaml"
    path.write_text(yaml.safe_dump(test))
    return rulecheck.test_rules([path])


@pytest.mark.parametrize(("title", "containing", "expected"), [
    ("Requests per second", "", {'{cluster="east", model="m"}': 10, '{cluster="west", model="m"}': 30}),
    ("Replicas: recommended, HPA desired, current, ready", "status_desired_replicas",
     {'{cluster="east", namespace="ml", deployment="triton"}': 2,
      '{cluster="west", namespace="ml", deployment="triton"}': 7}),
])
def test_the_fleet_board_shows_each_cluster_apart(tmp_path: Path, title: str, containing: str,
                                                  expected: dict[str, float]) -> None:
    run = promtool_expects(tmp_path, fleet_query(title, containing), expected)
    assert run.ok and "SUCCESS" in run.output, run.output


def test_every_grouping_of_every_board_keeps_the_cluster_label() -> None:
    """Each `by (…)` and `on (…)` of every panel query starts with the cluster label (filled in)."""
    boards = build_all()
    for name, board in boards.items():
        for title, expr in lint.targets(board):
            for grouping in expr.split(" by (")[1:] + expr.split(" on (")[1:]:
                assert grouping.startswith(DEFAULT_CLUSTER_LABEL), (name, title, expr)
    assert CLUSTER_LABEL not in yaml.safe_dump(boards)


def test_without_the_cluster_the_sum_and_the_failed_join_are_what_the_board_would_show(tmp_path: Path) -> None:
    """The checks can fail: the old groupings add the clusters up and the old join finds two matches."""
    summed = fleet_query("Requests per second").replace(f"by ({DEFAULT_CLUSTER_LABEL}, ", "by (")
    assert promtool_expects(tmp_path, summed, {'{model="m"}': 40}).ok
    join = fleet_query("Replicas: recommended, HPA desired, current, ready", "status_desired_replicas")
    old = join.replace(f"on ({DEFAULT_CLUSTER_LABEL}, ", "on (").replace(f"by ({DEFAULT_CLUSTER_LABEL}, ", "by (")
    run = promtool_expects(tmp_path, old, {'{namespace="ml", deployment="triton"}': 7})
    assert not run.ok and "many-to-many" in run.output, run.output
