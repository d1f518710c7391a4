"""Triton scraped twice: every promtool test of the rules passes unchanged when each Triton input
series also arrives under a second job, as it does where the platform team's own monitor scrapes
Triton beside the chart's PodMonitor (another job, instance, endpoint, service and container, and a
target label of its own)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tidescale.contracts import catalog
from tidescale.devstack import rulecheck

TRITON = {name for fam in catalog.families("triton") for name in catalog.series_names(fam)}
# What a ServiceMonitor of the user's adds to each target, beside the namespace and pod both set.
SECOND_SCRAPE = {"instance": "10.244.1.7:8002", "endpoint": "metrics", "service": "triton", "container": "triton",
                 "team": "ml-platform"}
SERIES = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{(.*)\})?\s*$", re.S)
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def scraped_twice(series: str) -> str | None:
    """The second scrape's copy of an input series, or None when it is not Triton's: the labels that
    monitor sets replace the first's, and its job is another (distinct per first job, so that a suite
    that already scrapes twice gets a third copy of each, never two equal ones)."""
    match = SERIES.match(series)
    if not match or match.group(1) not in TRITON:
        return None
    labels = dict(LABEL.findall(match.group(3) or ""))
    labels = {**labels, **SECOND_SCRAPE, "job": f"second-scrape/{labels.get('job', '')}"}
    return match.group(1) + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def duplicated(doc: dict[str, Any], source: Path) -> tuple[dict[str, Any], int]:
    """*doc* (a promtool test file) with every Triton input series doubled; and how many were."""
    out = dict(doc, rule_files=[str((source.parent / f).resolve()) for f in doc["rule_files"]])
    copies = 0
    tests = []
    for test in doc["tests"]:
        inputs = []
        for item in test.get("input_series", []):
            inputs.append(item)
            copy = scraped_twice(item["series"])
            if copy is not None:
                inputs.append(dict(item, series=copy))
                copies += 1
        tests.append(dict(test, input_series=inputs))
    out["tests"] = tests
    return out, copies


def run_duplicated(sources: list[Path], tmp: Path) -> tuple[rulecheck.ToolRun, int]:
    """One promtool run over the doubled copies of *sources* (promtool names each failing file)."""
    paths, copies = [], 0
    for source in sources:
        doc, n = duplicated(yaml.safe_load(source.read_text()), source)
        paths.append(tmp / source.name)
        paths[-1].write_text(yaml.safe_dump(doc, sort_keys=False))
        copies += n
    return rulecheck.test_rules(paths), copies


def test_every_promtool_test_holds_with_triton_scraped_twice(tmp_path: Path) -> None:
    run, _ = run_duplicated(rulecheck.test_files(), tmp_path)
    assert run.ok and "FAILED" not in run.output, run.output


def test_the_suites_that_read_triton_are_the_ones_doubled(tmp_path: Path) -> None:
    """The transformation reaches the request-rate and queue tests (a check that cannot pass vacuously)."""
    copies = {p.stem: duplicated(yaml.safe_load(p.read_text()), p)[1] for p in rulecheck.test_files()}
    assert copies["recording"] >= 10
    assert copies["tritonqueuebacklog"] > 0


def test_a_rule_that_sums_raw_series_fails_the_same_check(tmp_path: Path) -> None:
    """The control: a naive rule reads twice the requests on the same doubled input."""
    rules = tmp_path / "naive.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "naive", "rules": [
        {"record": "naive:requests:rate5m", "expr": "sum(rate(nv_inference_request_success[5m]))"}]}]}))
    source = tmp_path / "src" / "naive-test.yaml"
    source.parent.mkdir()
    source.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": 'nv_inference_request_success{namespace="ml", pod="p", model="m", version="1"}',
                          "values": "0+60x10"}],
        "promql_expr_test": [{"expr": "naive:requests:rate5m", "eval_time": "10m",
                              "exp_samples": [{"labels": "naive:requests:rate5m", "value": 1}]}]}]}))
    assert rulecheck.test_rules([source]).ok
    run, copies = run_duplicated([source], tmp_path)
    assert copies == 1
    assert not run.ok and "naive:requests:rate5m" in run.output
