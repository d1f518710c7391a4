"""OTLP/HTTP trace bodies from Triton → per-request stage durations.

Triton 2.51 (opentelemetry-cpp 1.13) posts JSON with hex ids; the OpenTelemetry SDKs post
protobuf; both are decoded into the same small `Span` records. Triton puts a request's
timestamps on two spans — the model span (REQUEST_START, QUEUE_START, REQUEST_END; attributes
`triton.model_name`/`triton.model_version`) and its child `compute` span (COMPUTE_*) — and the
two can arrive in different bodies (fixtures `real-2.51/otlp/00000.json` and `00001.json`).
`SpanJoiner` pairs them by (trace id, model span id) in a bounded buffer with a time limit.
Ensemble/BLS children carry their own model span, so each is attributed to its own model.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import gc
import json
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tidescale.exporters.errors import BadInput
from tidescale.exporters.latency import StageSample, samples_for

MODEL_ATTR = "triton.model_name"
VERSION_ATTR = "triton.model_version"
NAMESPACE_ATTRS = ("k8s.namespace.name", "service.namespace")
COMPUTE_SPAN = "compute"
ROOT_SPAN = "InferRequest"
MODEL_STAMPS = ("REQUEST_START", "QUEUE_START", "REQUEST_END")
PROTOBUF_TYPES = ("application/x-protobuf", "application/protobuf")
JSON_TYPES = ("application/json",)


@dataclass(slots=True)
class Span:
    """The parts of an OTLP span the latency pipeline needs."""

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    model: str | None
    version: str | None
    namespace: str
    events: dict[str, int]


# --- bodies ------------------------------------------------------------------------------------

def decompress(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """The body after Content-Encoding (identity or gzip), refusing more than *max_bytes*."""
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        return body
    if enc not in ("gzip", "deflate"):
        raise BadInput(415, f"unsupported Content-Encoding {encoding!r} (use gzip or none)")
    inflater = zlib.decompressobj(wbits=47 if enc == "gzip" else 15)
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise BadInput(400, f"body is not valid {enc}: {exc}") from None
    if len(out) > max_bytes or inflater.unconsumed_tail:
        raise BadInput(413, f"decompressed body is larger than {max_bytes} bytes")
    return out


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic GC while a body is decoded: the parse allocates thousands of acyclic objects
    (freed by reference counting anyway) and generational collections cost ~25 % of the time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def decode_traces(body: bytes, content_type: str | None) -> list[Span]:
    """Spans of an ExportTraceServiceRequest body; BadInput (400/415) when it is not one."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media in PROTOBUF_TYPES:
        with gc_paused():
            return decode_protobuf(body)
    if media in JSON_TYPES:
        with gc_paused():
            return decode_json(body)
    raise BadInput(415, f"unsupported Content-Type {content_type!r}: send application/x-protobuf "
                        "or application/json (OTLP/HTTP)")


def decode_protobuf(body: bytes) -> list[Span]:
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BadInput(400, f"body is not an OTLP ExportTraceServiceRequest protobuf: {exc}") from None
    spans: list[Span] = []
    for resource_spans in request.resource_spans:
        namespace = ""
        for kv in resource_spans.resource.attributes:
            if kv.key in NAMESPACE_ATTRS and kv.value.string_value:
                namespace = kv.value.string_value
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if span.name == ROOT_SPAN:  # frontend stamps only: nothing to measure
                    spans.append(Span(span.trace_id, span.span_id, span.parent_span_id, ROOT_SPAN, None, None,
                                      namespace, {}))
                    continue
                model = version = None
                for kv in span.attributes:
                    if kv.key == MODEL_ATTR:
                        model = _pb_value_text(kv.value)
                    elif kv.key == VERSION_ATTR:
                        version = _pb_value_text(kv.value)
                spans.append(Span(span.trace_id, span.span_id, span.parent_span_id, span.name, model,
                                  version, namespace, {e.name: e.time_unix_nano for e in span.events}))
    return spans


def _pb_value_text(value: Any) -> str:
    kind = value.WhichOneof("value")
    return "" if kind is None else str(getattr(value, kind))


def decode_json(body: bytes) -> list[Span]:
    """OTLP/JSON (hex ids per the OTLP spec; base64 ids as protobuf's JSON mapping also accepted)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadInput(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadInput(400, "OTLP JSON body must be an object with resourceSpans")
    spans: list[Span] = []
    for i, resource_spans in enumerate(_list(doc, "resourceSpans", "resource_spans", where="body")):
        where = f"resourceSpans[{i}]"
        _require_dict(resource_spans, where)
        resource = resource_spans.get("resource") or {}
        _require_dict(resource, f"{where}.resource")
        attrs = _json_attributes(resource, f"{where}.resource")
        namespace = next((attrs[k] for k in NAMESPACE_ATTRS if attrs.get(k)), "")
        for j, scope_spans in enumerate(_list(resource_spans, "scopeSpans", "scope_spans", where=where)):
            _require_dict(scope_spans, f"{where}.scopeSpans[{j}]")
            for k, span in enumerate(_list(scope_spans, "spans", "spans", where=f"{where}.scopeSpans[{j}]")):
                try:
                    spans.append(_json_span(span, namespace))
                except BadInput as exc:  # where it happened, built only on the error path
                    raise BadInput(400, f"{where}.scopeSpans[{j}].spans[{k}]{exc.message}") from None
    return spans


def _json_span(span: Any, namespace: str) -> Span:
    """One span; BadInput messages start with the field path relative to the span."""
    if not isinstance(span, dict):
        raise BadInput(400, f" must be an object, got {type(span).__name__}")
    name = span.get("name", "")
    if not isinstance(name, str):
        raise BadInput(400, ".name must be a string")
    trace_id = _json_id(span.get("traceId", span.get("trace_id")), 16, ".traceId")
    span_id = _json_id(span.get("spanId", span.get("span_id")), 8, ".spanId")
    parent = _json_id(span.get("parentSpanId", span.get("parent_span_id")) or "", 8, ".parentSpanId", optional=True)
    if name == ROOT_SPAN:  # frontend stamps only: nothing to measure
        return Span(trace_id, span_id, parent, name, None, None, namespace, {})
    attrs = _json_attributes(span, "") if span.get("attributes") else {}
    events: dict[str, int] = {}
    raw_events = span.get("events")
    if raw_events is not None and not isinstance(raw_events, list):
        raise BadInput(400, f".events must be a list, got {type(raw_events).__name__}")
    for n, event in enumerate(raw_events or ()):
        if not isinstance(event, dict):
            raise BadInput(400, f".events[{n}] must be an object, got {type(event).__name__}")
        stamp = event.get("timeUnixNano", event.get("time_unix_nano"))
        if type(stamp) is str and len(stamp) <= 20 and stamp.isdigit():  # the usual case, inlined
            stamp = int(stamp)
        elif type(stamp) is not int:
            stamp = _json_int(stamp, f".events[{n}]")
        event_name = event.get("name")
        if isinstance(event_name, str):
            events[event_name] = stamp
    return Span(trace_id, span_id, parent, name, attrs.get(MODEL_ATTR), attrs.get(VERSION_ATTR), namespace,
                events)


def _require_dict(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise BadInput(400, f"{where} must be an object, got {type(value).__name__}")


def _list(obj: dict[str, Any], camel: str, snake: str, *, where: str) -> list[Any]:
    value = obj.get(camel, obj.get(snake))
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadInput(400, f"{where}.{camel} must be a list, got {type(value).__name__}")
    return value


def _json_attributes(obj: dict[str, Any], where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, kv in enumerate(_list(obj, "attributes", "attributes", where=where)):
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise BadInput(400, f"{where}.attributes[{n}] must be an object with a string key")
        value = kv.get("value")
        if isinstance(value, dict) and len(value) == 1:  # AnyValue: one field set
            [scalar] = value.values()
            if isinstance(scalar, str | int | float | bool):
                out[kv["key"]] = str(scalar)
    return out


def _json_int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise BadInput(400, f"{where}: timestamp must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and len(value) <= 20 and value.isdigit():
        return int(value)
    raise BadInput(400, f"{where}: timestamp must be an integer or a decimal string, got {value!r}")


def _json_id(value: Any, size: int, where: str, *, optional: bool = False) -> bytes:
    if optional and value in ("", None):
        return b""
    if not isinstance(value, str):
        raise BadInput(400, f"{where} must be a hex string")
    try:
        raw = bytes.fromhex(value) if len(value) == 2 * size else base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        raw = b""
    if len(raw) != size:
        raise BadInput(400, f"{where} must be {size} bytes as hex (got {value[:64]!r})")
    return raw


# --- joining model and compute spans -----------------------------------------------------------

@dataclass(slots=True)
class _Pending:
    expires: float
    span: Span


class SpanJoiner:
    """Turns spans into stage samples, pairing each model span with its `compute` child.

    The request stage is known from the model span alone and is emitted at once; queue and
    compute stages need both spans. Unpaired spans wait at most `ttl_s` seconds, and at most
    `max_pending` of them wait at once (oldest evicted first); a compute span that never finds
    its model span is reported to `on_drop` ("join_timeout" / "join_buffer_full").
    """

    def __init__(self, max_pending: int = 20_000, ttl_s: float = 30.0,
                 on_drop: Callable[[str, int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_pending = max_pending
        self.ttl_s = ttl_s
        self.on_drop = on_drop or (lambda reason, n: None)
        self.clock = clock
        self._pending: OrderedDict[bytes, _Pending] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, spans: list[Span]) -> tuple[list[StageSample], int]:
        """(stage samples, spans accepted); unusable spans are reported to `on_drop`."""
        now = self.clock()
        self._expire(now)
        samples: list[StageSample] = []
        accepted = 0
        for span in spans:
            if len(span.trace_id) != 16 or len(span.span_id) != 8:  # protobuf does not check sizes
                self.on_drop("bad_ids", 1)
            elif span.model is not None:
                accepted += 1
                self._model_span(span, now, samples)
            elif span.name == COMPUTE_SPAN:
                if not span.parent_span_id:
                    self.on_drop("compute_without_parent", 1)
                    continue
                accepted += 1
                self._compute_span(span, now, samples)
            elif span.name == ROOT_SPAN:
                accepted += 1
            else:
                self.on_drop("not_triton", 1)
        return samples, accepted

    def _model_span(self, span: Span, now: float, samples: list[StageSample]) -> None:
        model, version = span.model or "", span.version or ""
        request: dict[str, int] = {k: span.events[k] for k in ("REQUEST_START", "REQUEST_END") if k in span.events}
        samples.extend(samples_for(model, version, request, span.namespace))
        key = span.trace_id + span.span_id
        compute = self._pending.pop(key, None)
        if compute is not None:
            samples.extend(self._joined(span, compute.span))
        elif "QUEUE_START" in span.events:
            self._park(key, span, now)

    def _compute_span(self, span: Span, now: float, samples: list[StageSample]) -> None:
        key = span.trace_id + span.parent_span_id
        model = self._pending.pop(key, None)
        if model is not None:
            samples.extend(self._joined(model.span, span))
        else:
            self._park(key, span, now)

    @staticmethod
    def _joined(model: Span, compute: Span) -> list[StageSample]:
        stamps = dict(compute.events)
        if "QUEUE_START" in model.events:
            stamps["QUEUE_START"] = model.events["QUEUE_START"]
        return samples_for(model.model or "", model.version or "", stamps, model.namespace)

    def _park(self, key: bytes, span: Span, now: float) -> None:
        self._pending[key] = _Pending(now + self.ttl_s, span)
        while len(self._pending) > self.max_pending:
            _, evicted = self._pending.popitem(last=False)
            if evicted.span.model is None:
                self.on_drop("join_buffer_full", 1)

    def _expire(self, now: float) -> None:
        while self._pending:
            key, first = next(iter(self._pending.items()))
            if first.expires > now:
                break
            del self._pending[key]
            if first.span.model is None:
                self.on_drop("join_timeout", 1)

    def flush_expired(self) -> None:
        """Drop what waited longer than `ttl_s` (called periodically, not only on new spans)."""
        self._expire(self.clock())


def encode_protobuf(spans: list[Span], service_name: str = "triton") -> bytes:
    """An ExportTraceServiceRequest body holding *spans* (benchmarks and tests replay with it)."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    service = resource_spans.resource.attributes.add()
    service.key, service.value.string_value = "service.name", service_name
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "triton-server"
    for span in spans:
        pb = scope_spans.spans.add()
        pb.trace_id, pb.span_id, pb.parent_span_id, pb.name = (
            span.trace_id, span.span_id, span.parent_span_id, span.name)
        if span.model is not None:
            attr = pb.attributes.add()
            attr.key, attr.value.string_value = MODEL_ATTR, span.model
            attr = pb.attributes.add()
            attr.key, attr.value.int_value = VERSION_ATTR, int(span.version or 0)
        if span.events:
            pb.start_time_unix_nano = min(span.events.values())
            pb.end_time_unix_nano = max(span.events.values())
        for name, stamp in span.events.items():
            event = pb.events.add()
            event.name, event.time_unix_nano = name, stamp
    return request.SerializeToString()


def encode_json(spans: list[Span], service_name: str = "triton") -> bytes:
    """The OTLP/JSON body Triton 2.51 would post for *spans* (hex ids, decimal-string times)."""
    def attrs(span: Span) -> list[dict[str, Any]]:
        if span.model is None:
            return []
        return [{"key": MODEL_ATTR, "value": {"stringValue": span.model}},
                {"key": VERSION_ATTR, "value": {"intValue": str(span.version or 0)}}]

    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service_name}}]},
        "scopeSpans": [{"scope": {"name": "triton-server"}, "spans": [{
            "traceId": span.trace_id.hex(), "spanId": span.span_id.hex(),
            **({"parentSpanId": span.parent_span_id.hex()} if span.parent_span_id else {}),
            "name": span.name, "kind": 2, "attributes": attrs(span),
            "events": [{"name": n, "timeUnixNano": str(t)} for n, t in span.events.items()],
        } for span in spans]}],
    }]}).encode()
