"""PromQL escaping and metric-name extraction."""

import promql_parser
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.contracts.promql import escape_label_value, matcher, metric_names, selector, substitute_templates


@given(st.text(max_size=200))
@settings(max_examples=200)
def test_escaped_values_always_parse_and_round_trip(value: str) -> None:
    expr = selector("nv_inference_count", model=value)
    parsed = promql_parser.parse(expr)
    got = [m.value for m in parsed.matchers.matchers if m.name == "model"]
    assert got == [value]


def test_hostile_value_cannot_break_out_of_the_matcher() -> None:
    evil = 'x"} or vector(1) or up{a="'
    expr = selector("up", job=evil)
    assert metric_names(expr) == {"up"}
    assert escape_label_value('a"b\\c\n') == 'a\\"b\\\\c\\n'


def test_invalid_label_name_rejected() -> None:
    with pytest.raises(ValueError, match="invalid label name"):
        matcher("bad-name", "v")


def test_metric_names_walks_every_node_kind() -> None:
    expr = (
        'sum by (model) (rate(a{model="m"}[5m])) / on(model) group_left b + label_replace(c, "x", "$1", "y", "(.*)")'
        ' + {__name__="d"} + max_over_time(e[10m:1m]) + -f + (g) + topk(3, h) + vector(1)'
    )
    assert metric_names(expr) == set("abcdefgh")


def test_templates_are_substituted() -> None:
    assert "5m" in substitute_templates("rate(x[$__rate_interval])")
    assert metric_names('sum(rate(x{namespace="$namespace", model=~"${model:regex}"}[$__rate_interval]))') == {"x"}
    assert metric_names("sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)") == set()


def test_keep_labels_adds_the_cluster_to_every_grouping_and_join_once() -> None:
    from tidescale.contracts.promql import keep_labels

    expr = ('sum by (namespace, model) (rate(x[5m])) / on (namespace) group_left () max without (le) (y)'
            ' and on () z > ignoring (le) w + count by(cluster, pod) (v)')
    assert keep_labels(expr, ["cluster"]) == (
        'sum by (cluster, namespace, model) (rate(x[5m])) / on (cluster, namespace) group_left () '
        'max without (le) (y) and on (cluster) z > ignoring (le) w + count by (cluster, pod) (v)')
    assert keep_labels(expr, []) == expr
