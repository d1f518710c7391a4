"""The exporter's cheap ingest path reads exactly what the checked path reads.

`decode_json` takes Triton's usual bodies through msgspec and `_usual_spans`; anything unusual is
read again by the standard library and `_checked_spans`. These tests hold the two readings equal
on real and mutated bodies, and the batched histogram update equal to one update per sample.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.paths import FIXTURES
from tidescale.contracts import jsonio
from tidescale.exporters import otlp
from tidescale.exporters.buckets import log_buckets
from tidescale.exporters.errors import BadInput
from tidescale.exporters.latency import LatencyAggregator
from tidescale.exporters.otlp import Span, SpanJoiner, decode_json, measure_stages
from tidescale.exporters.sample_rate import SampleRateDetector
from tidescale.exporters.stages import MAX_STAGE_NS, StageSample

OTLP = FIXTURES / "triton" / "real-2.51" / "otlp"
REAL_DOCS = [json.loads(p.read_bytes()) for p in sorted(OTLP.glob("*.json"))]


def outcome(body: bytes) -> tuple[Any, ...]:
    try:
        return ("spans", decode_json(body))
    except BadInput as exc:
        return ("refused", exc.status_code, exc.message)


def checked_outcome(body: bytes) -> tuple[Any, ...]:
    """What the checked reading alone answers (the contract the fast reading must keep)."""
    try:
        doc = jsonio.loads(body)
    except ValueError as exc:
        return ("refused", 400, f"body is not valid JSON: {exc}")
    try:
        return ("spans", otlp._checked_spans(doc))
    except BadInput as exc:
        return ("refused", exc.status_code, exc.message)


def test_real_triton_bodies_take_the_fast_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = [otlp._checked_spans(doc) for doc in REAL_DOCS]
    monkeypatch.setattr(otlp, "_checked_spans", lambda doc: pytest.fail("fell back to the checked reading"))
    got = [decode_json(json.dumps(doc).encode()) for doc in REAL_DOCS]
    assert got == expected
    assert sum(len(spans) for spans in got) == 96


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every dict key and list item of a JSON document."""
    out = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _leaves(value, (*path, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return doc


def _rename(doc: Any, path: tuple[Any, ...], new_key: str) -> Any:
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if isinstance(parent, dict) and path:
        parent[new_key] = parent.pop(path[-1])
    return doc


# What a hostile or unusual sender puts where Triton puts strings: numbers beyond 64 bits, floats,
# 20-digit stamps, base64 ids, spaced or upper-case hex, non-ASCII digits, long names, nested values.
odd_values = (st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False)
              | st.booleans() | st.none()
              | st.sampled_from(["", "18446744073709551615", "18446744073709551616", "99999999999999999999",
                                 "١٢٣", "AAAAAAAAAAAAAAAAAAAAAA==", "AAAAAAAAAAA=", "zz" * 8, "a" * 200,
                                 "0" * 19, "COMPUTE_START", "REQUEST_END", "InferRequest", "compute",
                                 # hex that bytes.fromhex reads to the right size though it is not plain hex
                                 "0" * 16 + " " + "0" * 16, "00000000 00000000", "ABCDEF0123456789"])
              | st.text(max_size=12) | st.lists(st.integers(), max_size=2) | st.dictionaries(
                  st.sampled_from(["stringValue", "intValue", "doubleValue"]), st.text(max_size=4), max_size=2))
renames = st.sampled_from(["trace_id", "span_id", "parent_span_id", "time_unix_nano", "start_time_unix_nano",
                           "end_time_unix_nano", "resource_spans", "scope_spans", "extra"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(REAL_DOCS))), st.data())
def test_mutated_real_bodies_read_as_the_checked_reading_reads_them(which: int, data: st.DataObject) -> None:
    doc = copy.deepcopy(REAL_DOCS[which])
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(_leaves(doc)))
        if path and data.draw(st.booleans()):
            doc = _rename(doc, path, data.draw(renames))
        else:
            doc = _set(doc, path, data.draw(odd_values))
    body = json.dumps(doc).encode()
    assert outcome(body) == checked_outcome(body)


@pytest.mark.parametrize(("field", "value"), [
    ("traceId", "0" * 16 + " " + "0" * 16),  # bytes.fromhex reads 16 bytes from these 33 characters
    ("spanId", "00000000 00000000"),
    ("parentSpanId", "00 00 00 00 00 00 00 00"),
    ("startTimeUnixNano", None),
    ("parentSpanId", None),
    ("kind", True),
    ("schemaUrl", ""),
])
def test_ids_and_fields_the_fast_reading_would_misread_go_to_the_checked_reading(field: str, value: Any) -> None:
    doc = copy.deepcopy(REAL_DOCS[0])
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0][field] = value
    body = json.dumps(doc).encode()
    assert outcome(body) == checked_outcome(body)


@pytest.mark.parametrize(("key", "value", "fast"), [
    ("triton.model_name", {"stringValue": "m"}, True),
    ("triton.model_version", {"intValue": "7"}, True),
    ("triton.trace_id", {"boolValue": True}, True),  # a kind Triton may write, on a key not read
    ("triton.trace_id", {"doubleValue": 1.5}, True),
    ("triton.trace_id", {"arrayValue": {"values": []}}, False),  # a kind the fast reading does not declare
    ("triton.model_name", {"stringValue": "m", "intValue": "1"}, False),  # two values for one label
    ("triton.model_name", {"boolValue": True}, False),  # a label that is not text
    ("triton.model_name", {}, False),
    ("triton.model_version", {"intValue": 7}, False),  # a number, not OTLP/JSON's string
])
def test_attribute_values_read_alike_whichever_reading_takes_them(
        key: str, value: dict[str, Any], fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = copy.deepcopy(REAL_DOCS[0])
    span = next(s for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"] if s.get("attributes"))
    span["attributes"].append({"key": key, "value": value})
    body = json.dumps(doc).encode()
    expected = checked_outcome(body)
    fell_back: list[bool] = []
    checked = otlp._checked_spans
    monkeypatch.setattr(otlp, "_checked_spans", lambda d: fell_back.append(True) or checked(d))
    assert outcome(body) == expected
    assert not fell_back if fast else fell_back


def test_a_version_beyond_64_bits_reads_as_the_standard_library_reads_it() -> None:
    doc = copy.deepcopy(REAL_DOCS[0])
    span = next(s for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"] if s.get("attributes"))
    span["attributes"][1]["value"] = {"intValue": 2**64}  # a number, not OTLP/JSON's string: the checked reading
    [got] = [s for s in decode_json(json.dumps(doc).encode()) if s.span_id.hex() == span["spanId"]]
    assert got.version == str(2**64)


@pytest.mark.parametrize(("stamps", "expected"), [
    ({"REQUEST_START": 10, "REQUEST_END": 30}, {"request": 20e-9}),
    ({"REQUEST_START": 30, "REQUEST_END": 10}, "end_before_start"),
    ({"COMPUTE_START": 0, "COMPUTE_INPUT_END": MAX_STAGE_NS + 1}, "duration_too_long"),
    ({"QUEUE_START": 5}, {}),
])
def test_measure_stages_measures_or_names_the_problem(stamps: dict[str, int], expected: object) -> None:
    assert measure_stages(stamps) == expected


def test_joined_stages_equal_the_one_pass_measurement() -> None:
    spans = [s for doc in REAL_DOCS for s in otlp._checked_spans(doc)]
    samples, accepted = SpanJoiner().add(spans)
    assert accepted == len(spans)
    stages = Counter(s.stage for s in samples)
    assert stages["request"] == stages["queue"] == stages["compute_infer"] == 32


stamp_sets = st.dictionaries(st.sampled_from(sorted(otlp.STAMP_NAMES)),
                             st.integers(min_value=0, max_value=MAX_STAGE_NS * 2), max_size=7)


@settings(max_examples=400, deadline=None)
@given(stamp_sets, stamp_sets, st.booleans())
def test_a_join_measures_what_one_pass_over_both_spans_stamps_measures(
        model_stamps: dict[str, int], compute_stamps: dict[str, int], compute_first: bool) -> None:
    """The joiner measures a compute span's stages when it arrives and only the queue stage at the
    join; that must equal `measure_stages` over both spans' stamps (the model's QUEUE_START winning),
    forged stamps included, in either arrival order."""
    model = Span(b"\x01" * 16, b"\x02" * 8, b"\x03" * 8, "m", "m", "1", "serving", model_stamps)
    compute = Span(b"\x01" * 16, b"\x04" * 8, b"\x02" * 8, "compute", None, None, "serving", compute_stamps)
    on_its_own = [measure_stages(model_stamps), measure_stages(compute_stamps)]
    drops: Counter[str] = Counter()
    joiner = SpanJoiner(on_drop=lambda reason, n: drops.update({reason: n}))
    samples, accepted = joiner.add([compute, model] if compute_first else [model, compute])

    expected: list[tuple[str, float]] = []
    model_ok, compute_ok = (not isinstance(m, str) for m in on_its_own)
    if model_ok:
        expected += [("request", s) for stage, s in on_its_own[0].items() if stage == "request"]  # type: ignore[union-attr]
    joins = model_ok and compute_ok and (compute_first or "QUEUE_START" in model_stamps)
    together = measure_stages({**compute_stamps, **{k: v for k, v in model_stamps.items() if k == "QUEUE_START"}})
    if joins and not isinstance(together, str):
        expected += list(together.items())
    assert accepted == model_ok + compute_ok
    assert [(s.stage, s.seconds) for s in samples] == expected
    assert drops.get("end_before_start", 0) + drops.get("duration_too_long", 0) == (
        (not model_ok) + (not compute_ok) + (joins and isinstance(together, str)))


def _exposition(agg: LatencyAggregator) -> str:
    return agg.exposition()


def test_a_batch_updates_the_histograms_as_one_sample_at_a_time_does() -> None:
    bounds = log_buckets(0.001, 10, [0.5])
    samples = [StageSample(f"m{i % 3}", "1", stage, 0.001 * (i + 1), "serving", f"pod-{i % 2}", "triton")
               for i in range(60) for stage in ("request", "queue")]
    samples.append(StageSample("m\x00bad", "1", "request", 0.2, "serving", "pod-0", "triton"))

    def fed(batched: bool) -> tuple[LatencyAggregator, list[bool], SampleRateDetector]:
        rates = SampleRateDetector(configured=4)
        agg = LatencyAggregator(bounds, max_series=8, rates=rates, clock=lambda: 0.0)
        ok = agg.observe_batch(samples) if batched else [agg.observe(s) for s in samples]
        return agg, ok, rates

    one, ok_one, rates_one = fed(False)
    batch, ok_batch, rates_batch = fed(True)
    assert ok_batch == ok_one
    assert ok_batch.count(False) > 0  # the cap of 8 series refused some, the same ones
    assert _exposition(batch) == _exposition(one)
    assert "4.0" in _exposition(batch)  # counts weighted by the configured rate
    key = ("serving", "pod-0", "m0", "1")
    assert rates_batch._keys[key].traced == rates_one._keys[key].traced == 10


def test_weigh_batch_counts_traced_requests_and_answers_the_detected_rate() -> None:
    detector = SampleRateDetector(configured=1, min_traced=5)
    key, other = ("ns", "pod", "m", "1"), ("ns", "pod", "m", "2")
    for t, served in enumerate((0, 100, 200, 300)):
        detector.weigh_batch({key: 10}, [key, other])
        detector.requests(key, served + 100, now=30.0 * t)  # polls over 90 s: a far rate needs a minute
    weights = detector.weigh_batch({}, [key, other])
    assert weights == {key: 10.0, other: 1.0}
    assert other not in detector._keys  # a key never traced is not remembered
