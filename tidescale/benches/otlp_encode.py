"""Triton's OTLP trace bodies, written: what the benchmarks and tests replay into the exporter.

The exporter only ever reads OTLP (`tidescale.exporters.otlp`); writing it is what Triton does, so the
writers live with the benchmarks that stand in for Triton's trace stream, not in the product.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tidescale.exporters.otlp import MODEL_ATTR, VERSION_ATTR, Span


def encode_protobuf(spans: list[Span], service_name: str = "triton", resource: dict[str, str] | None = None) -> bytes:
    """An ExportTraceServiceRequest body holding *spans* (benchmarks and tests replay with it),
    with *resource* attributes such as k8s.pod.name, as Triton's `resource=` flags set them."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    for key, value in {"service.name": service_name, **(resource or {})}.items():
        attr = resource_spans.resource.attributes.add()
        attr.key, attr.value.string_value = key, value
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
        if span.start:
            pb.start_time_unix_nano, pb.end_time_unix_nano = span.start, span.end
        elif span.events:
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
            **({"startTimeUnixNano": str(span.start), "endTimeUnixNano": str(span.end)} if span.start else {}),
            "events": [{"name": n, "timeUnixNano": str(t)} for n, t in span.events.items()],
        } for span in spans]}],
    }]}).encode()
