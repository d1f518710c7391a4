"""Hostile OTLP input: bounded memory, rejected timestamps, honest partial success, never a 5xx."""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections import Counter
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import JSON_DOCUMENTS, LABEL_VALUES, TIMESTAMPS
from tests.unit.exporters.test_service_api import JSON, make_client, model_span, samples, span_body
from tidescale.exporters.cardinality import MAX_LABEL_VALUE_CHARS, clean_label_value, cut_label_value
from tidescale.exporters.otlp import STAGES_BYTES, Span, SpanJoiner, decode_json, span_bytes
from tidescale.exporters.stages import MAX_STAMP_NS

FOUR_MB = dict(LABEL_VALUES)["4-MB"]


@pytest.fixture
def client() -> Iterator[TestClient]:
    with make_client(max_body_bytes=8 << 20) as c:
        yield c


def queued_span(model: str, trace: int = 1, request_end: object = "5001000") -> dict[str, object]:
    """A model span with QUEUE_START: it waits in the join buffer for its compute span."""
    span = model_span(model, trace)
    span["events"] = [{"name": "REQUEST_START", "timeUnixNano": "1000"},
                      {"name": "QUEUE_START", "timeUnixNano": "2000"},
                      {"name": "REQUEST_END", "timeUnixNano": request_end}]
    return span


def partial(r: object) -> dict[str, str]:
    return r.json().get("partialSuccess", {})  # type: ignore[attr-defined, no-any-return]


# --- label length --------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "value"), LABEL_VALUES)
def test_label_values_are_cut_and_printable(name: str, value: str) -> None:
    cleaned = clean_label_value(value)
    assert len(cleaned) <= MAX_LABEL_VALUE_CHARS
    assert cleaned.isprintable()
    assert clean_label_value(cut_label_value(value)) == cleaned


def test_long_values_cut_alike_stay_apart() -> None:
    """Every distinct value of the corpus keeps a distinct label: two names equal in their first 127
    characters must not become one series."""
    values = {value for _, value in LABEL_VALUES if value.isprintable()}
    assert len({clean_label_value(v) for v in values}) == len(values)
    assert cut_label_value("\ud800" * 200) != cut_label_value("\ud801" * 200)  # JSON lets names hold these


@given(st.text(min_size=MAX_LABEL_VALUE_CHARS), st.text(min_size=1), st.text(min_size=1))
def test_fuzz_a_cut_keeps_what_follows_it_apart(prefix: str, a: str, b: str) -> None:
    cut_a, cut_b = cut_label_value(prefix + a), cut_label_value(prefix + b)
    assert len(cut_a) == MAX_LABEL_VALUE_CHARS and cut_label_value(cut_a) == cut_a
    assert (cut_a == cut_b) == (a == b)


def test_the_label_cache_keeps_no_long_strings() -> None:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(10):
            clean_label_value(f"{i}{FOUR_MB}")  # each name freed right after the call
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert retained < 1 << 20  # was 40 MB: the lru_cache kept every full-length argument


def test_parked_spans_hold_cut_names_only() -> None:
    joiner = SpanJoiner()
    joiner.add(decode_json(span_body([queued_span(FOUR_MB)])))
    assert len(joiner) == 1
    assert 0 < joiner.bytes < 4096


def test_join_buffer_has_a_byte_budget() -> None:
    drops: Counter[str] = Counter()
    one = span_bytes(decode_json(span_body([queued_span("m")]))[0])
    joiner = SpanJoiner(max_bytes=10 * one, on_drop=lambda r, n: drops.update({r: n}))
    joiner.add(decode_json(span_body([queued_span("m", trace=i + 1) for i in range(25)])))
    assert len(joiner) == 10 and joiner.bytes <= 10 * one
    assert drops == {"join_buffer_bytes": 15}


def test_a_parked_compute_span_counts_the_stages_it_keeps() -> None:
    compute = Span(b"\x01" * 16, b"\x02" * 8, b"\x03" * 8, "compute", None, None, "serving",
                   {"COMPUTE_START": 10, "COMPUTE_INPUT_END": 20, "COMPUTE_OUTPUT_START": 30, "COMPUTE_END": 40})
    joiner = SpanJoiner()
    joiner.add([compute])
    assert len(joiner) == 1 and joiner.bytes == span_bytes(compute) + STAGES_BYTES


def test_join_buffer_bytes_are_exported(client: TestClient) -> None:
    assert client.post("/v1/traces", content=span_body([queued_span("m")]), headers=JSON).status_code == 200
    [(_, held)] = samples(client, "tidescale_exporter_join_buffer_bytes")
    assert held > 0


def test_a_model_span_whose_compute_span_never_comes_is_counted() -> None:
    now = [0.0]
    drops: Counter[str] = Counter()
    joiner = SpanJoiner(ttl_s=5, on_drop=lambda r, n: drops.update({r: n}), clock=lambda: now[0])
    joiner.add(decode_json(span_body([queued_span("m")])))
    now[0] = 10.0
    joiner.flush_expired()
    assert len(joiner) == 0 and joiner.bytes == 0 and drops == {"compute_missing": 1}


# --- timestamps ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "stamp"), TIMESTAMPS)
def test_hostile_timestamps_never_give_a_5xx(client: TestClient, name: str, stamp: object) -> None:
    span = model_span("m")
    span["events"] = [{"name": "REQUEST_START", "timeUnixNano": "1000"}, {"name": "REQUEST_END", "timeUnixNano": stamp}]
    r = client.post("/v1/traces", content=span_body([span]), headers=JSON)
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        assert "timeUnixNano" in r.json()["detail"]
    span = {**model_span("m"), "startTimeUnixNano": "1000", "endTimeUnixNano": stamp}
    r = client.post("/v1/traces", content=span_body([span]), headers=JSON)
    assert r.status_code < 500, r.text


def test_a_timestamp_beyond_uint64_is_a_400_naming_the_field(client: TestClient) -> None:
    span = model_span("m")
    span["events"] = [{"name": "REQUEST_START", "timeUnixNano": "1000"},
                      {"name": "REQUEST_END", "timeUnixNano": 10**400}]
    r = client.post("/v1/traces", content=span_body([span]), headers=JSON)
    assert r.status_code == 400
    assert "spans[0].events[1].timeUnixNano" in r.json()["detail"] and "unsigned 64-bit" in r.json()["detail"]
    span["events"][1]["timeUnixNano"] = str(MAX_STAMP_NS + 1)  # type: ignore[index]
    assert client.post("/v1/traces", content=span_body([span]), headers=JSON).status_code == 400


@pytest.mark.parametrize(("events", "start_end", "reason"), [
    ((1000, MAX_STAMP_NS), None, "duration_too_long"),
    ((5000, 1000), None, "end_before_start"),
    ((1000, 5_001_000), ("9000", "1000"), "end_before_start"),
])
def test_implausible_spans_are_rejected_alone(client: TestClient, events: tuple[int, int],
                                              start_end: tuple[str, str] | None, reason: str) -> None:
    good = [model_span("m", trace=i + 1) for i in range(10)]  # 5 ms each
    bad = model_span("m", trace=99)
    bad["events"] = [{"name": "REQUEST_START", "timeUnixNano": str(events[0])},
                     {"name": "REQUEST_END", "timeUnixNano": str(events[1])}]
    if start_end:
        bad["startTimeUnixNano"], bad["endTimeUnixNano"] = start_end
    r = client.post("/v1/traces", content=span_body([*good, bad]), headers=JSON)
    assert r.status_code == 200
    assert partial(r)["rejectedSpans"] == "1" and reason in partial(r)["errorMessage"]
    [(_, count)] = samples(client, "tidescale_request_duration_seconds_count")
    [(_, total)] = samples(client, "tidescale_request_duration_seconds_sum")
    assert count == 10 and total == pytest.approx(10 * 0.005)  # one outlier used to add 3.6e6 s
    dropped = {labels["reason"]: v for labels, v in samples(client, "tidescale_exporter_spans_dropped_total")}
    assert dropped[reason] == 1


def test_a_cross_span_queue_stage_that_is_implausible_is_dropped() -> None:
    drops: Counter[str] = Counter()
    joiner = SpanJoiner(on_drop=lambda r, n: drops.update({r: n}))
    trace, model_id = b"t" * 16, b"m" * 8
    model = Span(trace, model_id, b"", "m", "m", "1", "", {"QUEUE_START": 10**18})
    compute = Span(trace, b"c" * 8, model_id, "compute", None, None, "",
                   {"COMPUTE_START": 10, "COMPUTE_INPUT_END": 20, "COMPUTE_OUTPUT_START": 30, "COMPUTE_END": 40})
    got, accepted = joiner.add([model, compute])
    assert got == [] and accepted == 2 and drops == {"end_before_start": 1}


# --- partial success ---------------------------------------------------------------------------------

def test_a_refusal_at_the_series_cap_is_a_partial_success() -> None:
    with make_client(max_series=1) as c:
        assert partial(c.post("/v1/traces", content=span_body([model_span("a")]), headers=JSON)) == {}
        r = c.post("/v1/traces", content=span_body([model_span("b", trace=2), model_span("a", trace=3)]),
                   headers=JSON)
        assert r.status_code == 200
        assert partial(r)["rejectedSpans"] == "1" and "series cap" in partial(r)["errorMessage"]


# --- the whole corpus ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "doc"), JSON_DOCUMENTS)
def test_no_hostile_json_document_gives_a_5xx(client: TestClient, name: str, doc: bytes) -> None:
    r = client.post("/v1/traces", content=doc, headers=JSON)
    assert r.status_code < 500, r.text
    if r.status_code == 200:
        assert isinstance(r.json(), dict)
    else:
        assert r.json()["detail"]


@pytest.mark.parametrize(("name", "value"), LABEL_VALUES)
def test_hostile_label_values_round_trip_through_metrics(client: TestClient, name: str, value: str) -> None:
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [model_span(value)]}]}]}).encode()
    r = client.post("/v1/traces", content=body, headers=JSON)
    assert r.status_code < 500
    assert client.get("/metrics").status_code == 200
    models = {labels["model"] for labels, _ in samples(client, "tidescale_request_duration_seconds_count")}
    assert all(len(m) <= MAX_LABEL_VALUE_CHARS for m in models)
