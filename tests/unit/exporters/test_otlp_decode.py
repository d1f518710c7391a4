"""OTLP bodies from real Triton 2.51 (JSON, hex ids) and protobuf; the model/compute span join."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.paths import FIXTURES
from tidescale.benches.otlp_encode import encode_protobuf
from tidescale.exporters.errors import BadInput
from tidescale.exporters.otlp import SpanJoiner, decode_json, decode_protobuf, decode_traces, decompress

OTLP = FIXTURES / "triton" / "real-2.51" / "otlp"
BODIES = sorted(OTLP.glob("*.json"))


def _join_all(bodies: list[bytes], decode=lambda b: decode_traces(b, "application/json")):  # type: ignore[no-untyped-def]
    drops: Counter[str] = Counter()
    joiner = SpanJoiner(on_drop=lambda reason, n: drops.update({reason: n}))
    samples = []
    for body in bodies:
        got, _ = joiner.add(decode(body))
        samples += got
    return samples, joiner, drops


def test_real_triton_bodies_give_every_stage_of_every_request() -> None:
    samples, joiner, drops = _join_all([p.read_bytes() for p in BODIES])
    per_stage = Counter(s.stage for s in samples)
    assert per_stage == {s: 32 for s in ("request", "queue", "compute_input", "compute_infer", "compute_output")}
    assert {(s.model, s.version) for s in samples} == {("batcher", "1")}
    assert len(joiner) == 0 and not drops


def test_compute_span_from_an_earlier_body_is_joined() -> None:
    # Trace a29c…: its compute span is in 00000.json, its model span in 00001.json.
    _, joiner, _ = _join_all([BODIES[0].read_bytes()])
    assert len(joiner) == 1  # the compute span waits
    samples, _ = joiner.add(decode_json(BODIES[1].read_bytes()))
    queue = [s for s in samples if s.stage == "queue"]
    assert len(queue) == 1
    doc = json.loads(BODIES[1].read_bytes())
    model_span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    events = {e["name"]: int(e["timeUnixNano"]) for e in model_span["events"]}
    request = next(s for s in samples if s.stage == "request")
    assert request.seconds == pytest.approx((events["REQUEST_END"] - events["REQUEST_START"]) / 1e9)
    assert len(joiner) == 0


def test_protobuf_gives_the_same_samples_as_json() -> None:
    raw = [p.read_bytes() for p in BODIES]
    from_json, _, _ = _join_all(raw)
    proto = [encode_protobuf(decode_json(b)) for b in raw]
    from_proto, _, _ = _join_all(proto, decode=lambda b: decode_traces(b, "application/x-protobuf"))
    assert from_json == from_proto


def test_unjoined_compute_span_times_out_and_is_counted() -> None:
    now = [0.0]
    drops: Counter[str] = Counter()
    joiner = SpanJoiner(ttl_s=5, on_drop=lambda r, n: drops.update({r: n}), clock=lambda: now[0])
    compute = [s for s in decode_json(BODIES[0].read_bytes()) if s.name == "compute"][:3]
    joiner.add(compute)
    assert len(joiner) == 3
    now[0] = 10.0
    joiner.flush_expired()
    assert len(joiner) == 0 and drops["join_timeout"] == 3


def test_join_buffer_is_bounded() -> None:
    drops: Counter[str] = Counter()
    joiner = SpanJoiner(max_pending=2, on_drop=lambda r, n: drops.update({r: n}))
    compute = [s for s in decode_json(BODIES[0].read_bytes()) if s.name == "compute"][:5]
    joiner.add(compute)
    assert len(joiner) == 2 and drops["join_buffer_full"] == 3


def test_foreign_spans_are_counted_not_used() -> None:
    drops: Counter[str] = Counter()
    joiner = SpanJoiner(on_drop=lambda r, n: drops.update({r: n}))
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "GET /checkout"}]}]}]}
    samples, accepted = joiner.add(decode_json(json.dumps(body).encode()))
    assert samples == [] and accepted == 0 and drops["not_triton"] == 1


@pytest.mark.parametrize(("body", "fragment"), [
    (b"{", "not valid JSON"),
    (b"[]", "must be an object"),
    (b'{"resourceSpans": 3}', "resourceSpans must be a list"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "xyz", "spanId": "00"}]}]}]}', "traceId"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + b"a" * 32 + b'", "spanId": "'
     + b"b" * 16 + b'", "events": [{"name": "X", "timeUnixNano": "soon"}]}]}]}]}', "timestamp"),
])
def test_malformed_json_names_the_problem(body: bytes, fragment: str) -> None:
    with pytest.raises(BadInput) as err:
        decode_json(body)
    assert err.value.status_code == 400 and fragment in err.value.message


def test_content_type_and_encoding() -> None:
    with pytest.raises(BadInput) as err:
        decode_traces(b"{}", "text/plain")
    assert err.value.status_code == 415
    assert decode_traces(b"{}", "application/json; charset=utf-8") == []
    assert decompress(gzip.compress(b"abc"), "gzip", 10) == b"abc"
    with pytest.raises(BadInput) as bomb:
        decompress(gzip.compress(b"\0" * 100_000), "gzip", 1000)
    assert bomb.value.status_code == 413
    with pytest.raises(BadInput) as bad:
        decompress(b"not gzip", "gzip", 1000)
    assert bad.value.status_code == 400
    with pytest.raises(BadInput) as unknown:
        decompress(b"x", "br", 1000)
    assert unknown.value.status_code == 415


def test_base64_ids_are_accepted() -> None:
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "AAAAAAAAAAAAAAAAAAAAAQ==", "spanId": "AAAAAAAAAAE=", "name": "InferRequest"}]}]}]}
    [span] = decode_json(json.dumps(body).encode())
    assert span.trace_id == bytes(15) + b"\x01"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["resourceSpans", "scopeSpans", "spans", "traceId", "spanId", "parentSpanId", "name",
                         "events", "timeUnixNano", "attributes", "key", "value", "stringValue", "resource"]),
        inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_fuzz_json_structures_never_crash(doc: object) -> None:
    try:
        spans = decode_json(json.dumps(doc).encode())
    except BadInput as exc:
        assert 400 <= exc.status_code < 500
    else:
        SpanJoiner().add(spans)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_bytes_never_crash(body: bytes) -> None:
    for decode in (decode_json, decode_protobuf):
        try:
            spans = decode(body)
        except BadInput as exc:
            assert exc.status_code == 400
        else:
            SpanJoiner().add(spans)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=10_000), st.binary(min_size=1, max_size=8))
def test_fuzz_mutated_real_protobuf(position: int, junk: bytes) -> None:
    body = bytearray(encode_protobuf(decode_json(BODIES[1].read_bytes())))
    pos = position % len(body)
    body[pos:pos + len(junk)] = junk
    try:
        SpanJoiner().add(decode_protobuf(bytes(body)))
    except BadInput as exc:
        assert exc.status_code == 400



def test_json_encoder_round_trips_and_gc_is_restored() -> None:
    import gc

    from tidescale.benches.otlp_encode import encode_json

    spans = decode_json(BODIES[2].read_bytes())
    assert decode_json(encode_json(spans)) == spans
    with pytest.raises(BadInput):
        decode_traces(b"{", "application/json")
    assert gc.isenabled()


def test_ensemble_children_are_attributed_to_their_own_model() -> None:
    """One trace: InferRequest → ensemble model span → child model span → its compute span."""
    def span(span_id: str, parent: str, name: str, events: dict[str, int], model: str | None = None):  # type: ignore[no-untyped-def]
        out = {"traceId": "ab" * 16, "spanId": span_id * 8, "parentSpanId": parent * 8 if parent else "",
               "name": name, "events": [{"name": k, "timeUnixNano": str(v)} for k, v in events.items()]}
        if model:
            out["attributes"] = [{"key": "triton.model_name", "value": {"stringValue": model}},
                                 {"key": "triton.model_version", "value": {"intValue": "1"}}]
        return out

    spans = [
        span("01", "", "InferRequest", {"HTTP_RECV_START": 0}),
        span("02", "01", "pipeline", {"REQUEST_START": 0, "QUEUE_START": 10, "REQUEST_END": 1000}, "pipeline"),
        span("04", "03", "compute", {"COMPUTE_START": 300, "COMPUTE_INPUT_END": 310, "COMPUTE_OUTPUT_START": 700,
                                     "COMPUTE_END": 720}),
        span("03", "02", "tokenizer", {"REQUEST_START": 100, "QUEUE_START": 110, "REQUEST_END": 800},
             "tokenizer"),
    ]
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    joiner = SpanJoiner()
    samples, accepted = joiner.add(decode_json(body))
    got = {(s.model, s.stage): round(s.seconds * 1e9) for s in samples}
    assert got == {("pipeline", "request"): 1000, ("tokenizer", "request"): 700, ("tokenizer", "queue"): 190,
                   ("tokenizer", "compute_input"): 10, ("tokenizer", "compute_infer"): 390,
                   ("tokenizer", "compute_output"): 20}
    assert accepted == 4


def test_protobuf_ids_of_the_wrong_size_are_dropped() -> None:
    from tidescale.exporters.otlp import Span

    drops: Counter[str] = Counter()
    bad = Span(b"\x01" * 15, b"\x02" * 8, b"", "m", "m", "1", "", {"REQUEST_START": 0, "REQUEST_END": 5})
    samples, accepted = SpanJoiner(on_drop=lambda r, n: drops.update({r: n})).add(
        decode_protobuf(encode_protobuf([bad])))
    assert samples == [] and accepted == 0 and drops["bad_ids"] == 1


def test_resource_namespace_and_pod_reach_every_sample() -> None:
    """Triton started with `--trace-config opentelemetry,resource=k8s.pod.name=…` (the downward API)."""
    doc = json.loads(BODIES[0].read_bytes())
    for resource_spans in doc["resourceSpans"]:
        resource_spans.setdefault("resource", {})["attributes"] = [
            {"key": "k8s.namespace.name", "value": {"stringValue": "serving"}},
            {"key": "k8s.pod.name", "value": {"stringValue": "triton-0"}}]
    body = json.dumps(doc).encode()
    from_json, _, _ = _join_all([body])
    pb = ExportTraceServiceRequest.FromString(encode_protobuf(decode_json(body)))
    for key, value in (("k8s.namespace.name", "serving"), ("k8s.pod.name", "triton-0")):
        attr = pb.resource_spans[0].resource.attributes.add()
        attr.key, attr.value.string_value = key, value
    from_proto, _, _ = _join_all([pb.SerializeToString()], decode=lambda b: decode_traces(b, "application/x-protobuf"))
    assert from_json and {(s.namespace, s.pod) for s in from_json + from_proto} == {("serving", "triton-0")}
