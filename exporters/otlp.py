"""OTLP/HTTP trace bodies from Triton → per-request stage durations.

Triton 2.51 (opentelemetry-cpp 1.13) posts JSON with hex ids; the OpenTelemetry SDKs post
protobuf; both are decoded into the same small `Span` records. Triton puts a request's
timestamps on two spans — the model span (REQUEST_START, QUEUE_START, REQUEST_END; attributes
`triton.model_name`/`triton.model_version`) and its child `compute` span (COMPUTE_*) — and the
two can arrive in different bodies (fixtures `real-2.51/otlp/00000.json` and `00001.json`).
`SpanJoiner` pairs them by (trace id, model span id) in a buffer bounded in count, bytes and
time. Ensemble/BLS children carry their own model span, so each is attributed to its own model.

Hostile input is bounded at decode time: names and attribute values are cut to the label cap
(`cut_label_value`) and only Triton's stamp events are kept, so a parked span is small whatever
the body held; a timestamp outside uint64 is a 400 naming the field; a span whose end precedes
its start, or that lasts longer than `MAX_STAGE_SECONDS`, is rejected alone (counted, and reported
in the OTLP partial success) so one outlier cannot move the quantile gauges.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import gc
import time
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import msgspec
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tidescale.contracts import catalog, jsonio
from tidescale.exporters.cardinality import MAX_LABEL_VALUE_CHARS, cut_label_value
from tidescale.exporters.errors import BadInput
from tidescale.exporters.stages import (
    MAX_STAMP_NS,
    STAMP_NAMES,
    StageSample,
    interval_problem,
    measure_stages,
    stage_samples,
)

MODEL_ATTR = "triton.model_name"
VERSION_ATTR = "triton.model_version"
NAMESPACE_ATTRS = ("k8s.namespace.name", "service.namespace")
POD_ATTR = "k8s.pod.name"
DEPLOYMENT_ATTR = "k8s.deployment.name"
RESOURCE_ATTRS = frozenset((*NAMESPACE_ATTRS, POD_ATTR, DEPLOYMENT_ATTR))
COMPUTE_SPAN = "compute"
ROOT_SPAN = "InferRequest"
MODEL_STAMPS = ("REQUEST_START", "QUEUE_START", "REQUEST_END")
PROTOBUF_TYPES = ("application/x-protobuf", "application/protobuf")
JSON_TYPES = ("application/json",)
DEFAULT_JOIN_MAX_BYTES = 32 << 20


class Span(msgspec.Struct, gc=False):
    """The parts of an OTLP span the latency pipeline needs. A msgspec Struct: decode builds three
    per traced request, and its constructor runs in C (a slotted dataclass's `__init__` is Python,
    about 2.5x slower). Untracked by the cyclic GC: it holds strings, bytes and a dict of str to
    int, never a reference back to anything."""

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    model: str | None
    version: str | None
    namespace: str
    events: dict[str, int]
    start: int = 0  # the span's own start/end (0: not sent); checked, not measured
    end: int = 0
    pod: str = ""
    deployment: str = ""


def attribute_to(spans: list[Span], namespace: str, pod: str, deployment: str) -> None:
    """Label every span with the pod that sent it, as OpenTelemetry's k8sattributes processor
    associates by connection address: the sender's own address outranks what its resource claims."""
    for span in spans:
        span.namespace, span.pod, span.deployment = namespace, pod, deployment


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
        namespace = pod = deployment = ""
        for kv in resource_spans.resource.attributes:
            if kv.key in NAMESPACE_ATTRS and kv.value.string_value:
                namespace = cut_label_value(kv.value.string_value)
            elif kv.key == POD_ATTR:
                pod = cut_label_value(kv.value.string_value)
            elif kv.key == DEPLOYMENT_ATTR:
                deployment = cut_label_value(kv.value.string_value)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if span.name == ROOT_SPAN:  # frontend stamps only: nothing to measure
                    spans.append(Span(span.trace_id, span.span_id, span.parent_span_id, ROOT_SPAN, None, None,
                                      namespace, {}, pod=pod, deployment=deployment))
                    continue
                model = version = None
                for kv in span.attributes:
                    if kv.key == MODEL_ATTR:
                        model = _pb_value_text(kv.value)
                    elif kv.key == VERSION_ATTR:
                        version = _pb_value_text(kv.value)
                # fixed64 fields: within uint64 by construction, so only order and length are checked
                spans.append(Span(span.trace_id, span.span_id, span.parent_span_id, cut_label_value(span.name),
                                  model, version, namespace,
                                  {e.name: e.time_unix_nano for e in span.events if e.name in STAMP_NAMES},
                                  span.start_time_unix_nano, span.end_time_unix_nano, pod, deployment))
    return spans


def _pb_value_text(value: Any) -> str:
    kind = value.WhichOneof("value")
    return "" if kind is None else cut_label_value(str(getattr(value, kind)))


def decode_json(body: bytes) -> list[Span]:
    """OTLP/JSON (hex ids per the OTLP spec; base64 ids as protobuf's JSON mapping also accepted).

    Two readings. The fast one (`_usual_spans`: msgspec into typed records) takes the bodies Triton
    posts; any body it does not fully recognise is read again by the standard library and
    `_checked_spans`, which decides alone what is accepted and names every problem. So the fast
    reading can only make a body cheaper, never change its meaning."""
    usual = _usual_spans(body)
    if usual is not None:
        return usual
    try:
        doc = jsonio.loads(body)
    except ValueError as exc:
        raise BadInput(400, f"body is not valid JSON: {exc}") from None
    return _checked_spans(doc)


def _checked_spans(doc: Any) -> list[Span]:
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
        pod, deployment = attrs.get(POD_ATTR, ""), attrs.get(DEPLOYMENT_ATTR, "")
        for j, scope_spans in enumerate(_list(resource_spans, "scopeSpans", "scope_spans", where=where)):
            _require_dict(scope_spans, f"{where}.scopeSpans[{j}]")
            for k, span in enumerate(_list(scope_spans, "spans", "spans", where=f"{where}.scopeSpans[{j}]")):
                try:
                    spans.append(_json_span(span, namespace, pod, deployment))
                except BadInput as exc:  # where it happened, built only on the error path
                    raise BadInput(400, f"{where}.scopeSpans[{j}].spans[{k}]{exc.message}") from None
    return spans


class _Unusual(Exception):
    """The fast reading met something it does not take: the checked reading decides."""


# The fast reading decodes straight into these records: msgspec checks every type in C on the way
# and builds no dict per span, event or attribute. Each declares exactly the keys Triton 2.51 writes
# (`rename="camel"`: `trace_id` reads `traceId`), and any other key (a snake_case twin, OTLP fields
# Triton never sends) refuses the whole body, which the checked reading then reads.
class _FastEvent(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    name: str
    time_unix_nano: str


class _FastValue(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """An AnyValue of the kinds Triton writes (a Struct, not a dict: no dict built per attribute);
    any other kind, or a value of another type, refuses the body."""

    string_value: str | msgspec.UnsetType = msgspec.UNSET
    int_value: str | msgspec.UnsetType = msgspec.UNSET  # OTLP/JSON writes 64-bit integers as strings
    bool_value: bool | msgspec.UnsetType = msgspec.UNSET
    double_value: float | msgspec.UnsetType = msgspec.UNSET


class _FastKeyValue(msgspec.Struct, forbid_unknown_fields=True):
    key: str
    value: _FastValue


class _FastSpan(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    trace_id: str
    span_id: str
    name: str
    parent_span_id: str = ""
    kind: int = 0
    attributes: list[_FastKeyValue] = []
    events: list[_FastEvent] = []
    start_time_unix_nano: str | msgspec.UnsetType = msgspec.UNSET  # unset: not sent (null is not taken)
    end_time_unix_nano: str | msgspec.UnsetType = msgspec.UNSET


class _FastResource(msgspec.Struct, forbid_unknown_fields=True):
    attributes: list[_FastKeyValue] = []


class _FastScopeSpans(msgspec.Struct, forbid_unknown_fields=True):
    spans: list[_FastSpan] = []
    scope: dict[str, Any] = {}


class _FastResourceSpans(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    resource: _FastResource
    scope_spans: list[_FastScopeSpans] = []


class _FastBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    resource_spans: list[_FastResourceSpans] = []


_FAST_DECODER = msgspec.json.Decoder(_FastBody)


def _usual_spans(body: bytes) -> list[Span] | None:
    """The spans of a body shaped as Triton posts it, or None as soon as anything is unusual: an
    unknown or snake_case key, a value of another type (null included), an id that is not plain hex
    of its size, a stamp that is not 1-19 ASCII digits, a name or label over the label cap. No
    message is built here; `_checked_spans` handles all of that."""
    try:
        doc = _FAST_DECODER.decode(body)
        spans: list[Span] = []
        for resource_spans in doc.resource_spans:
            attrs = _usual_attributes(resource_spans.resource.attributes, RESOURCE_ATTRS)
            namespace = next((attrs[k] for k in NAMESPACE_ATTRS if attrs.get(k)), "")
            pod, deployment = attrs.get(POD_ATTR, ""), attrs.get(DEPLOYMENT_ATTR, "")
            for scope_spans in resource_spans.scope_spans:
                _usual_scope_spans(scope_spans.spans, namespace, pod, deployment, spans)
        return spans
    except (_Unusual, msgspec.MsgspecError, ValueError, RecursionError):
        return None


def _usual_scope_spans(fast: list[_FastSpan], namespace: str, pod: str, deployment: str, out: list[Span]) -> None:
    """Append the Span of each of *fast*: one loop with its names bound locally, no call per span
    (this loop is more than half of the CPU of decoding a Triton body)."""
    append, fromhex, unset = out.append, bytes.fromhex, msgspec.UNSET
    cap, stamp_names = MAX_LABEL_VALUE_CHARS, STAMP_NAMES
    for span in fast:
        name, trace_hex, span_hex, parent_hex = span.name, span.trace_id, span.span_id, span.parent_span_id
        if len(name) > cap or len(trace_hex) != 32 or len(span_hex) != 16 or len(parent_hex) not in (0, 16):
            raise _Unusual
        trace_id, span_id = fromhex(trace_hex), fromhex(span_hex)
        parent = fromhex(parent_hex) if parent_hex else b""
        if len(trace_id) != 16 or len(span_id) != 8 or len(parent) not in (0, 8):  # fromhex skips spaces
            raise _Unusual
        if name == ROOT_SPAN:
            append(Span(trace_id, span_id, parent, name, None, None, namespace, {}, 0, 0, pod, deployment))
            continue
        model = version = None
        for kv in span.attributes:  # the last of a repeated key wins, as in the checked reading
            if kv.key == MODEL_ATTR:
                model = _usual_label(kv.value)
            elif kv.key == VERSION_ATTR:
                version = _usual_label(kv.value)
        events: dict[str, int] = {}
        for event in span.events:  # every stamp is checked; only Triton's are converted and kept
            stamp = event.time_unix_nano
            if not 0 < len(stamp) < 20 or not stamp.isdigit() or not stamp.isascii():
                raise _Unusual
            if event.name in stamp_names:
                events[event.name] = int(stamp)
        start, end = span.start_time_unix_nano, span.end_time_unix_nano
        append(Span(trace_id, span_id, parent, name, model, version, namespace, events,
                    0 if start is unset else _usual_stamp(start), 0 if end is unset else _usual_stamp(end),
                    pod, deployment))


def _usual_attributes(attributes: list[_FastKeyValue], wanted: frozenset[str]) -> dict[str, str]:
    """The *wanted* attributes (`_usual_label`); other keys' values are not looked at, as the
    checked reading skips bad values."""
    return {kv.key: _usual_label(kv.value) for kv in attributes if kv.key in wanted}


def _usual_label(value: _FastValue) -> str:
    """A wanted attribute's text: exactly one plain string (`stringValue`, or OTLP/JSON's
    `intValue` string) within the label cap."""
    text, number = value.string_value, value.int_value
    if text is msgspec.UNSET:
        text, number = number, msgspec.UNSET
    if (text is msgspec.UNSET or number is not msgspec.UNSET or value.bool_value is not msgspec.UNSET
            or value.double_value is not msgspec.UNSET or len(text) > MAX_LABEL_VALUE_CHARS):
        raise _Unusual
    return text


def _usual_stamp(value: str) -> int:
    """A decimal-string stamp of at most 19 digits (always within uint64)."""
    if 0 < len(value) < 20 and value.isdigit() and value.isascii():
        return int(value)
    raise _Unusual


def _json_span(span: Any, namespace: str, pod: str, deployment: str) -> Span:
    """One span; BadInput messages start with the field path relative to the span."""
    if not isinstance(span, dict):
        raise BadInput(400, f" must be an object, got {type(span).__name__}")
    name = span.get("name", "")
    if not isinstance(name, str):
        raise BadInput(400, ".name must be a string")
    name = cut_label_value(name)
    trace_id = _json_id(span.get("traceId", span.get("trace_id")), 16, ".traceId")
    span_id = _json_id(span.get("spanId", span.get("span_id")), 8, ".spanId")
    parent = _json_id(span.get("parentSpanId", span.get("parent_span_id")) or "", 8, ".parentSpanId", optional=True)
    if name == ROOT_SPAN:  # frontend stamps only: nothing to measure
        return Span(trace_id, span_id, parent, name, None, None, namespace, {}, pod=pod, deployment=deployment)
    attrs = _json_attributes(span, "") if span.get("attributes") else {}
    events: dict[str, int] = {}
    raw_events = span.get("events")
    if raw_events is not None and not isinstance(raw_events, list):
        raise BadInput(400, f".events must be a list, got {type(raw_events).__name__}")
    for n, event in enumerate(raw_events or ()):
        if not isinstance(event, dict):
            raise BadInput(400, f".events[{n}] must be an object, got {type(event).__name__}")
        stamp = event.get("timeUnixNano", event.get("time_unix_nano"))
        if type(stamp) is str and len(stamp) < 20 and stamp.isdigit() and stamp.isascii():  # the usual case
            stamp = int(stamp)
        else:
            stamp = _json_stamp(stamp, f".events[{n}].timeUnixNano")
        event_name = event.get("name")
        if type(event_name) is str and event_name in STAMP_NAMES:  # a list or dict name is not hashable
            events[event_name] = stamp
    start, end = (_json_stamp(span.get(camel, span.get(snake, 0)), f".{camel}")
                  for camel, snake in (("startTimeUnixNano", "start_time_unix_nano"),
                                       ("endTimeUnixNano", "end_time_unix_nano")))
    return Span(trace_id, span_id, parent, name, attrs.get(MODEL_ATTR), attrs.get(VERSION_ATTR), namespace,
                events, start, end, pod, deployment)


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
                out[kv["key"]] = cut_label_value(_scalar_text(scalar))
    return out


def _scalar_text(scalar: str | int | float | bool) -> str:
    """An attribute value as text; a huge integer is cut before it is formatted (str() of a
    4,000-digit int is quadratic and capped by Python)."""
    if isinstance(scalar, int) and not isinstance(scalar, bool) and scalar.bit_length() > 256:
        return "<integer too large>"
    return str(scalar)


def _json_stamp(value: Any, where: str) -> int:
    """A Unix-nanosecond timestamp: an integer or decimal string within uint64, else BadInput naming *where*."""
    if isinstance(value, str) and 0 < len(value) <= 20 and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(400, f"{where}: timestamp must be an integer or a decimal string, got {_short(value)}")
    if not 0 <= value <= MAX_STAMP_NS:
        raise BadInput(400, f"{where}: timestamp must be an unsigned 64-bit integer (0..{MAX_STAMP_NS}), "
                            f"got {_short(value)}")
    return value


def _short(value: Any) -> str:
    """At most 40 characters of *value* for an error message (never formats a huge int in full)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    return repr(value)[:40]


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

# What a parked span costs beyond its strings: the Span and _Pending objects, the events dict,
# three bytes ids and the OrderedDict entry (measured with tracemalloc, rounded up).
SPAN_OVERHEAD_BYTES = 600
EVENT_BYTES = 120
# A parked compute span also keeps its measured stages: a dict of up to three floats (264 bytes
# measured with tracemalloc, rounded up). A parked model span keeps none (NO_STAGES, shared).
STAGES_BYTES = 280
NO_STAGES: Mapping[str, float] = MappingProxyType({})


def stamps_problem(stamps: dict[str, int]) -> str | None:
    """Why a request's stamps cannot be measured (`interval_problem` of a stage), or None when every
    stage present is plausible."""
    measured = measure_stages(stamps)
    return measured if isinstance(measured, str) else None


def own_time_problem(span: Span) -> str | None:
    """The checks of `stamps_problem` on the span's own start/end (0: not sent)."""
    return interval_problem(span.start, span.end) if span.start and span.end else None


def span_bytes(span: Span) -> int:
    """Estimated bytes a parked span holds (its strings are already cut to the label cap)."""
    strings = (len(span.name) + len(span.model or "") + len(span.version or "") + len(span.namespace)
               + len(span.pod) + len(span.deployment))
    return SPAN_OVERHEAD_BYTES + strings + EVENT_BYTES * len(span.events)


class _Pending(msgspec.Struct, gc=False):
    expires: float
    span: Span
    size: int
    stages: Mapping[str, float]  # a compute span's own stages, measured when it arrived


class SpanJoiner(Collector):
    """Turns spans into stage samples, pairing each model span with its `compute` child.

    The request stage is known from the model span alone and is emitted at once; queue and
    compute stages need both spans. Unpaired spans wait at most `ttl_s` seconds, and at most
    `max_pending` of them and `max_bytes` (estimated) wait at once, oldest evicted first. Every
    span that leaves unjoined is reported to `on_drop`: "join_timeout" (a compute span whose model
    span never came), "compute_missing" (a model span whose compute span never came: its request
    stage was exported, its queue and compute stages are lost), "join_buffer_full" and
    "join_buffer_bytes" (evicted by the count or the byte budget). A collector of
    `tidescale_exporter_join_buffer_bytes`.
    """

    def __init__(self, max_pending: int = 20_000, ttl_s: float = 30.0,
                 on_drop: Callable[[str, int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, *, max_bytes: int = DEFAULT_JOIN_MAX_BYTES) -> None:
        self.max_pending = max_pending
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self.on_drop = on_drop or (lambda reason, n: None)
        self.clock = clock
        self._pending: OrderedDict[bytes, _Pending] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, spans: list[Span], rejected: Counter[str] | None = None,
            origins: list[int] | None = None) -> tuple[list[StageSample], int]:
        """(stage samples, spans accepted); unusable spans are reported to `on_drop` and, by
        reason, to *rejected* (the OTLP partial-success message names them). *origins* receives,
        per sample, the index in *spans* of the span that completed it."""
        now = self.clock()
        self._expire(now)
        samples: list[StageSample] = []
        accepted = 0
        for index, span in enumerate(spans):
            reason = self._unusable(span)
            # A root span (a third of Triton's spans) has no stamps to measure.
            measured = (measure_stages(span.events) if span.events else {}) if reason is None else reason
            if isinstance(measured, str):
                self.on_drop(measured, 1)
                if rejected is not None:
                    rejected[measured] += 1
                continue
            accepted += 1
            before = len(samples)
            if span.model is not None:
                self._model_span(span, measured.get("request"), now, samples)
            elif span.name == COMPUTE_SPAN:
                self._compute_span(span, measured, now, samples)
            if origins is not None and len(samples) > before:  # a root span completes nothing
                origins.extend([index] * (len(samples) - before))
        return samples, accepted

    @staticmethod
    def _unusable(span: Span) -> str | None:
        """Why *span* is no Triton span the join can use (its stamps are checked by the caller)."""
        if len(span.trace_id) != 16 or len(span.span_id) != 8:  # protobuf does not check sizes
            return "bad_ids"
        if span.model is None and span.name == COMPUTE_SPAN and not span.parent_span_id:
            return "compute_without_parent"
        if span.model is None and span.name not in (COMPUTE_SPAN, ROOT_SPAN):
            return "not_triton"
        return own_time_problem(span)

    def _model_span(self, span: Span, request_s: float | None, now: float, samples: list[StageSample]) -> None:
        """The request stage at once (from the model span alone), the others once joined."""
        if request_s is not None:
            samples.append(StageSample(span.model or "", span.version or "", "request", request_s,
                                       span.namespace, span.pod, span.deployment))
        key = span.trace_id + span.span_id
        compute = self._take(key)
        if compute is not None:
            samples.extend(self._joined(span, compute.span, compute.stages))
        elif "QUEUE_START" in span.events:
            self._park(key, span, now, NO_STAGES)

    def _compute_span(self, span: Span, stages: Mapping[str, float], now: float, samples: list[StageSample]) -> None:
        key = span.trace_id + span.parent_span_id
        model = self._take(key)
        if model is not None:
            samples.extend(self._joined(model.span, span, stages))
        else:
            self._park(key, span, now, stages)

    def _joined(self, model: Span, compute: Span, compute_stages: Mapping[str, float]) -> list[StageSample]:
        """The queue stage (QUEUE_START on the model span to COMPUTE_START on the compute span, checked
        only now) then the compute span's own stages, already measured and checked when it arrived:
        what `measure_stages` gives for the two spans' stamps together, in the same order."""
        if "queue" in compute_stages or "request" in compute_stages:  # a compute span carrying model stamps
            return self._joined_slowly(model, compute)
        stages = compute_stages
        queued, started = model.events.get("QUEUE_START"), compute.events.get("COMPUTE_START")
        if queued is not None and started is not None:
            problem = interval_problem(queued, started)
            if problem is not None:
                self.on_drop(problem, 1)
                return []
            stages = {"queue": (started - queued) / 1e9, **compute_stages}
        return self._samples(model, stages)

    def _joined_slowly(self, model: Span, compute: Span) -> list[StageSample]:
        """Every stage of the two spans' stamps together, the model's QUEUE_START first."""
        stamps = dict(compute.events)
        if "QUEUE_START" in model.events:
            stamps["QUEUE_START"] = model.events["QUEUE_START"]
        measured = measure_stages(stamps)
        if isinstance(measured, str):
            self.on_drop(measured, 1)
            return []
        return self._samples(model, measured)

    @staticmethod
    def _samples(model: Span, stages: Mapping[str, float]) -> list[StageSample]:
        return stage_samples(model.model or "", model.version or "", stages, model.namespace, model.pod,
                             model.deployment)

    def _take(self, key: bytes) -> _Pending | None:
        pending = self._pending.pop(key, None)
        if pending is not None:
            self.bytes -= pending.size
        return pending

    def _park(self, key: bytes, span: Span, now: float, stages: Mapping[str, float]) -> None:
        self._take(key)  # a duplicate replaces the earlier span
        size = span_bytes(span) + (STAGES_BYTES if stages else 0)
        self._pending[key] = _Pending(now + self.ttl_s, span, size, stages)
        self.bytes += size
        while len(self._pending) > self.max_pending:
            self._evict("join_buffer_full")
        while self.bytes > self.max_bytes and self._pending:
            self._evict("join_buffer_bytes")

    def _evict(self, reason: str) -> None:
        _, evicted = self._pending.popitem(last=False)
        self.bytes -= evicted.size
        self.on_drop(reason, 1)

    def _expire(self, now: float) -> None:
        while self._pending:
            key, first = next(iter(self._pending.items()))
            if first.expires > now:
                break
            del self._pending[key]
            self.bytes -= first.size
            self.on_drop("join_timeout" if first.span.model is None else "compute_missing", 1)

    def flush_expired(self) -> None:
        """Drop what waited longer than `ttl_s` (called periodically, not only on new spans)."""
        self._expire(self.clock())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        fam = catalog.get("tidescale_exporter_join_buffer_bytes")
        yield GaugeMetricFamily(fam.name, fam.help, value=self.bytes)

