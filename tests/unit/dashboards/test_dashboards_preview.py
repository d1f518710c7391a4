"""Previews: Prometheus answers parsed defensively, variables substituted, one PNG per dashboard."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.contracts.errors import TidescaleError, UsageError
from tidescale.contracts.prometheus import PrometheusClient
from tidescale.dashboards.registry import build_all
from tidescale.devstack import preview

END = 1_700_000_000.0


def _matrix(*series: tuple[dict[str, str], list[float]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[END - 10 * (len(vals) - i), str(v)] for i, v in enumerate(vals)]}
        for labels, vals in series]}}


def test_parse_matrix_reads_series() -> None:
    [s] = preview.parse_matrix(_matrix(({"model": "resnet"}, [1.0, 2.0, 3.0])))
    assert s.labels == {"model": "resnet"} and s.values == (1.0, 2.0, 3.0)
    assert s.times == (END - 30, END - 20, END - 10)


@pytest.mark.parametrize("payload", [
    None, [], {"status": "error", "error": "bad"},
    {"status": "success", "data": {"resultType": "vector", "result": []}},
    {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[None, "1"]]}]}},
    {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1]]}]}},
    {"status": "success", "data": {"resultType": "matrix", "result": [{"values": []}]}},
])
def test_parse_matrix_rejects_malformed_answers(payload: Any) -> None:
    with pytest.raises(ValueError):
        preview.parse_matrix(payload)


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=12))
def test_parse_matrix_fuzz_only_raises_value_error(payload: Any) -> None:
    with contextlib.suppress(ValueError):
        preview.parse_matrix(payload)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(allow_nan=True) | st.none() | st.text(max_size=4),
                          st.text(max_size=6) | st.none() | st.lists(st.integers(), max_size=2)), max_size=5))
def test_parse_matrix_fuzz_samples(points: list[tuple[Any, Any]]) -> None:
    payload = {"status": "success", "data": {"resultType": "matrix",
                                             "result": [{"metric": {"a": "b"}, "values": [list(p) for p in points]}]}}
    try:
        [s] = preview.parse_matrix(payload)
    except ValueError:
        return
    assert len(s.times) == len(s.values) <= len(points)


def test_series_per_query_are_capped() -> None:
    many = _matrix(*[({"pod": str(i)}, [1.0]) for i in range(preview.MAX_SERIES_PER_QUERY + 20)])
    assert len(preview.parse_matrix(many)) == preview.MAX_SERIES_PER_QUERY


def test_substitute_and_legend() -> None:
    expr = 'sum(rate(x{namespace=~"$namespace", model=~"${model}"}[$__rate_interval]))'
    assert preview.substitute(expr, "30s") == 'sum(rate(x{namespace=~".*", model=~".*"}[30s]))'
    assert preview.substitute(expr, "1m", {"model": "resnet"}).count("resnet") == 1
    with pytest.raises(UsageError, match="rate interval"):
        preview.substitute(expr, "30 s; drop")
    assert preview.legend("{{model}} p{{ q }}", {"model": "m", "q": "99"}) == "m p99"
    assert preview.legend("", {"b": "2", "a": "1"}) == "a=1, b=2"


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40), st.dictionaries(st.from_regex(r"[a-z_]{1,6}", fullmatch=True), st.text(max_size=6)))
def test_legend_fuzz(fmt: str, labels: dict[str, str]) -> None:
    assert isinstance(preview.legend(fmt, labels), str)


def _fake_prometheus(seen: list[str]) -> PrometheusClient:
    """Answers every query with one series, except queries on ALERTS (no data) and `broken` (error)."""
    def handler(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        seen.append(query)
        if "ALERTS" in query:
            return httpx.Response(200, json=_matrix())
        return httpx.Response(200, json=_matrix(({"model": "resnet", "pod": "p-0"}, [1.0, 2.0, 4.0])))
    return PrometheusClient("http://prom", transport=httpx.MockTransport(handler))


def test_fetch_and_render_every_dashboard(tmp_path: Path) -> None:
    seen: list[str] = []
    boards = build_all()
    with _fake_prometheus(seen) as client:
        data = {uid: preview.fetch_panels(client, b, end=END, window_s=600, rate_interval="30s")
                for uid, b in boards.items()}
    assert seen and not [q for q in seen if re.search(r"\$\{?[a-zA-Z_]", q)]  # `$1` of label_replace stays
    fleet = {p.title: p for p in data["tidescale-fleet"]}
    assert not fleet["Firing alerts"].has_data and fleet["Requests per second"].has_data
    paths = [preview.render_dashboard(uid, panels, tmp_path / f"{uid}.png", END) for uid, panels in data.items()]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 10_000


def test_unreachable_prometheus_is_a_clear_error(tmp_path: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")
    with PrometheusClient("http://prom", transport=httpx.MockTransport(refuse)) as client, \
            pytest.raises(TidescaleError, match="cannot reach Prometheus"):
        preview.fetch_panels(client, build_all()["tidescale-gpu"], end=END, window_s=60, rate_interval="30s")


def test_query_errors_are_shown_not_raised() -> None:
    def bad(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"status": "error", "error": "parse error"})
    with PrometheusClient("http://prom", transport=httpx.MockTransport(bad)) as client:
        panels = preview.fetch_panels(client, build_all()["tidescale-profiler"], end=END, window_s=60,
                                      rate_interval="30s")
    assert all(not p.has_data and p.results[0].error for p in panels)
    assert "parse error" in json.dumps([r.error for p in panels for r in p.results])


def test_render_previews_rejects_a_bad_window(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="window"):
        preview.render_previews("http://127.0.0.1:1", tmp_path, window_s=0)


def test_bucket_counts_decumulate_histogram_buckets() -> None:
    times = (1.0, 2.0)
    cumulative = [preview.Series({"le": le}, times, vals) for le, vals in
                  (("+Inf", (10.0, 12.0)), ("1.0", (4.0, 4.0)), ("2.0", (4.0, 4.0)), ("4.0", (9.0, 12.0)))]
    counts = {s.labels["le"]: s.values for s in preview.bucket_counts(cumulative)}
    assert counts == {"1.0": (4.0, 4.0), "4.0": (5.0, 8.0), "+Inf": (1.0, 0.0)}  # le=2.0 is empty: dropped
