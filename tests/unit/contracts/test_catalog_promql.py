"""One source of truth: every metric any PromQL in the repository names is in the catalog or recorded by a rule."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.paths import REPO
from tidescale.contracts import catalog
from tidescale.contracts.promql import metric_names

PROMQL_KEYS = {"expr", "query", "seriesQuery", "metricsQuery"}


def _walk(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)


def _documents() -> Iterator[tuple[Path, Any]]:
    roots = [REPO / "alerts", REPO / "dashboards", REPO / "autoscaler", REPO / "deploy"]
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.suffix in (".yaml", ".yml") and "templates" not in path.parts and "tests" not in path.parts:
                try:
                    for doc in yaml.safe_load_all(path.read_text()):
                        yield path, doc
                except yaml.YAMLError:
                    continue
            elif path.suffix == ".json" and "schema" not in path.name:
                yield path, json.loads(path.read_text())


def recorded_names() -> set[str]:
    names = set()
    for _, doc in _documents():
        for key, value in _walk(doc):
            if key == "record" and isinstance(value, str):
                names.add(value)
    return names


LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", re.S)


def promql_in_repo(values_only: bool = False) -> list[tuple[Path, str]]:
    """PromQL in rules, adapter config, manifests and dashboards (Grafana templating queries too).
    *values_only*: the queries whose values are read, not those that only list series or label values
    (an adapter rule's seriesQuery, a dashboard variable's label_values)."""
    out = []
    keys = PROMQL_KEYS - {"seriesQuery"} if values_only else PROMQL_KEYS
    for path, doc in _documents():
        templating = doc.get("templating", {}) if isinstance(doc, dict) else {}
        for key, value in _walk({k: v for k, v in doc.items() if k != "templating"} if templating else doc):
            if key in keys and isinstance(value, str) and value.strip():
                out.append((path, value))
        for var in [] if values_only else templating.get("list", []) if isinstance(templating, dict) else []:
            if var.get("type") != "query":
                continue
            query = var.get("query")
            text = query.get("query") if isinstance(query, dict) else query
            match = LABEL_VALUES.match(text or "")
            if match:
                out.append((path, match.group(1)))
    return out


def test_catalog_names_are_unique_and_typed() -> None:
    fams = catalog.families()
    assert len({f.name for f in fams}) == len(fams)
    for fam in fams:
        assert fam.help, fam.name
        assert fam.type in ("counter", "gauge", "histogram", "summary", "info")
    assert catalog.get("nv_inference_pending_request_count").source == "triton"
    with pytest.raises(KeyError, match="not in the tidescale catalog"):
        catalog.get("nv_made_up_metric")


def test_catalog_follows_the_triton_fixture() -> None:
    import csv

    from tests.paths import FIXTURES

    rows = list(csv.DictReader((FIXTURES / "triton" / "triton_metrics_catalog.csv").open()))
    assert {r["metric_family"] for r in rows} <= catalog.names()


def test_every_promql_names_only_catalog_or_recorded_metrics() -> None:
    known = catalog.all_series_names() | recorded_names()
    problems = []
    for path, expr in promql_in_repo():
        try:
            names = metric_names(expr)
        except Exception as exc:  # an unparsable query is a failure too
            problems.append(f"{path.relative_to(REPO)}: cannot parse {expr!r}: {exc}")
            continue
        for name in sorted(names - known):
            problems.append(f"{path.relative_to(REPO)}: {name} (in {expr[:80]!r})")
    assert not problems, "metrics not in the catalog nor recorded:\n" + "\n".join(problems)


def test_the_check_catches_an_unknown_metric() -> None:
    known = catalog.all_series_names()
    assert metric_names("rate(nv_not_a_real_family[5m])") - known == {"nv_not_a_real_family"}


# --- Triton scraped twice ---------------------------------------------------------------------------
# A user's own monitor on Triton beside the chart's PodMonitor makes a second copy of every Triton
# series (another job, instance, endpoint, service): a query summing raw series would read twice the
# requests, and the recommender would ask for twice the replicas.

def recommender_queries() -> list[tuple[str, str]]:
    from tidescale.autoscaler.queries import TargetQueries
    from tidescale.autoscaler.settings import ForecastSettings, TargetSettings

    queries = TargetQueries.for_target(TargetSettings(deployment="triton", namespace="ml", model="resnet"),
                                       None, {"cluster": "east"}, forecast=ForecastSettings())
    assert queries.seasons  # the seasonal forecast's reads are checked too
    return [(f"recommender {field}", expr) for field, expr in queries.expressions().items()
            if field != "pending"]  # the bare selector the fast path discovers pods with (a `group by`)


def test_no_query_counts_a_triton_series_scraped_twice_twice() -> None:
    """Rules, dashboards, adapter rules, the KEDA trigger and the recommender read every Triton series
    through a `max`/`group` over its identity (pod, model, version, ...) before any sum."""
    from tidescale.contracts.promql import triton_reads_counted_twice

    problems = [f"{where}: {names} in {expr[:120]!r}"
                for where, expr in [*((str(p.relative_to(REPO)), e) for p, e in promql_in_repo(values_only=True)),
                                    *recommender_queries()]
                if (names := triton_reads_counted_twice(expr))]
    assert not problems, "Triton series a second scrape would count twice:\n" + "\n".join(problems)


@pytest.mark.parametrize(("expr", "twice"), [
    ("sum(rate(nv_inference_request_success[5m]))", ["nv_inference_request_success"]),
    ("sum by (pod) (nv_inference_pending_request_count) > 8", ["nv_inference_pending_request_count"]),
    ("nv_inference_pending_request_count > 8", ["nv_inference_pending_request_count"]),
    ("avg(max by (pod) (sum by (pod, job) (nv_inference_count)))", ["nv_inference_count"]),
    ("sum(max by (namespace, pod, model, version) (rate(nv_inference_request_success[5m])))", []),
    ("group by (namespace, model, pod) (nv_inference_request_success)", []),
    ("absent(nv_inference_request_success)", []),
    ("sum(rate(tidescale_request_duration_seconds_count[5m]))", []),  # the exporter's own series
])
def test_the_check_sees_a_raw_triton_sum(expr: str, twice: list[str]) -> None:
    from tidescale.contracts.promql import triton_reads_counted_twice

    assert triton_reads_counted_twice(expr) == twice
