"""The fleet board's exporter row, evaluated by the real promtool: what it shows for an OTLP exporter
that drops spans, a trace-file exporter that drops nothing (its accepted counter stays 0) and one
that drops entries. The live-stack test only shows that the panels have data; this one, which values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tidescale.dashboards import lint
from tidescale.dashboards.registry import build_all
from tidescale.devstack import rulecheck

# Three exporters over 20 minutes, one sample a minute. a: OTLP, 990 spans accepted and 10 dropped a
# minute. b: a trace-file exporter that drops nothing. c: a trace-file exporter dropping 2 entries and
# refusing 6 samples at a series cap a minute. a and b have no series_dropped series at all.
SERIES = [
    ('tidescale_exporter_spans_accepted_total{job="tidescale-exporter", instance="a"}', "0+990x20"),
    ('tidescale_exporter_spans_dropped_total{job="tidescale-exporter", instance="a", reason="join_timeout"}',
     "0+10x20"),
    ('tidescale_exporter_spans_accepted_total{job="tidescale-exporter", instance="b"}', "0x20"),
    ('tidescale_exporter_spans_accepted_total{job="tidescale-exporter", instance="c"}', "0x20"),
    ('tidescale_exporter_spans_dropped_total{job="tidescale-exporter", instance="c", reason="malformed_entry"}',
     "0+2x20"),
    ('tidescale_exporter_series_dropped_total{job="tidescale-exporter", instance="c", '
     'family="tidescale_request_duration_seconds"}', "0+6x20"),
    # another job's counters are not an exporter's
    ('tidescale_exporter_spans_accepted_total{job="other", instance="d"}', "0x20"),
    ('tidescale_exporter_spans_dropped_total{job="other", instance="d", reason="join_timeout"}', "0+50x20"),
]


def _query(title: str) -> str:
    [expr] = [e for t, e in lint.targets(build_all()["tidescale-fleet"]) if t == title]
    return expr.replace("$__rate_interval", "5m").replace("$cluster", ".*")


def _promtool_expects(tmp_path: Path, expr: str, expected: dict[str, float]) -> rulecheck.ToolRun:
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in SERIES],
        "promql_expr_test": [{"expr": expr, "eval_time": "15m", "exp_samples": [
            {"labels": f'{{instance="{i}"}}', "value": v} for i, v in expected.items()]}],
    }]}
    path = tmp_path / "panel.yaml"
    path.write_text(yaml.safe_dump(test))
    return rulecheck.test_rules([path])


@pytest.mark.parametrize(("title", "expected"), [
    # a: 10 of 1,000 received; b: nothing dropped reads 0, not no data; c: every entry it counts is a drop
    ("Trace data dropped", {"a": 0.01, "b": 0.0, "c": 1.0}),
    # 6 a minute at c; 0 for the exporters that never refused one
    ("Samples refused at a series cap", {"a": 0.0, "b": 0.0, "c": 0.1}),
])
def test_the_exporter_row_reads_each_exporter_exactly(tmp_path: Path, title: str, expected: dict[str, float]) -> None:
    run = _promtool_expects(tmp_path, _query(title), expected)
    assert run.ok and "SUCCESS" in run.output, run.output


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    run = _promtool_expects(tmp_path, _query("Trace data dropped"), {"a": 0.01, "c": 1.0})  # b's 0 left out
    assert not run.ok
