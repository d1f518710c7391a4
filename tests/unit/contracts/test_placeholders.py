"""The chart's placeholders: the generated files carry them, and filling them is a whole-token swap."""

from __future__ import annotations

import yaml

from tidescale.contracts import placeholders
from tidescale.contracts.promql import LABEL_NAME
from tidescale.devstack.artifacts import collect
from tidescale.devstack.chart import PLACEHOLDERS


def test_every_token_is_a_label_name_or_value_so_unfilled_files_still_parse() -> None:
    assert LABEL_NAME.match(placeholders.CLUSTER_LABEL)
    assert placeholders.CLUSTER.replace("-", "_").isidentifier()


def test_the_chart_reads_the_same_tokens() -> None:
    committed = yaml.safe_load(collect()[PLACEHOLDERS])
    assert committed == placeholders.chart_tokens() == {"clusterLabel": placeholders.CLUSTER_LABEL,
                                                         "cluster": placeholders.CLUSTER}


def test_fill_swaps_whole_tokens_only() -> None:
    expr = f"sum by ({placeholders.CLUSTER_LABEL}, namespace) (x{{cluster=\"a\"}})"
    assert placeholders.fill(expr) == 'sum by (cluster, namespace) (x{cluster="a"})'
    assert placeholders.fill(expr, "k8s_cluster") == 'sum by (k8s_cluster, namespace) (x{cluster="a"})'


def test_the_generated_rules_and_dashboards_name_no_cluster_label_but_the_token() -> None:
    """The chart never has to find `cluster` in PromQL: every place the label belongs holds the token."""
    produced = collect()
    chart_files = {p: c for p, c in produced.items() if "/files/rules/" in p or "/files/dashboards/" in p}
    assert chart_files
    for path, content in chart_files.items():
        filled_away = content.replace(placeholders.CLUSTER_LABEL, "")
        for shape in ("by (cluster", "on (cluster", ", cluster)", "cluster=~"):
            assert shape not in filled_away, (path, shape)
