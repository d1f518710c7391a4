"""TensorFlow's `<host>.xplane.pb` (an XSpace protobuf) read without TensorFlow.

A small protobuf wire-format decoder for the fields op shares need (field numbers from
tsl/profiler/protobuf/xplane.proto):

    XSpace         planes=1
    XPlane         id=1 name=2 lines=3 event_metadata=4 (map<int64, XEventMetadata>)
                   stat_metadata=5 (map<int64, XStatMetadata>) stats=6
    XLine          id=1 name=2 timestamp_ns=3 events=4 display_name=11
    XEvent         metadata_id=1 offset_ps=2 duration_ps=3 stats=4
    XEventMetadata id=1 name=2 display_name=4
    XStatMetadata  id=1 name=2
    XStat          metadata_id=1 double=2 uint64=3 int64=4 str=5 bytes=6 ref=7

The space is read one plane at a time from the stream (a plane is the unit TF writes per
host or device), so memory is bounded by the largest plane, capped at `MAX_PLANE_BYTES`.

CPU is bounded by the events, not by the bytes: a gzip upload of 20 KB can inflate to a
20 MB plane of padding, and decoding padding field by field in Python costs about a second
per 2 MB. Every decoded field is charged to a `WorkBudget` that starts at `BASE_FIELDS`
and grows by `FIELDS_PER_EVENT` per XEvent decoded (real planes use about 5 fields per
event); the space may hold at most `MAX_EVENTS` events, `MAX_PLANES` planes and
`MAX_SPACE_FIELDS` top-level fields. Field number 0 does not exist in protobuf, so a plane
of zero bytes is refused at its first field.
Op events are the host events whose metadata name is `<op_name>:<op_type>` (the type after
the last colon; `ExecutorState::Process` and `EagerLocalExecute: …` are runtime events,
not ops); on device planes every event (kernel, memcpy) is an op named after itself.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles.opclass import OpClass, classify_op_type
from tidescale.exporters.profiles.selftime import OpTotals, SelfTimeAggregator

MAX_PLANE_BYTES = 1 << 30
MAX_PLANES = 4096
MAX_SPACE_FIELDS = 100_000
MAX_EVENTS = 5_000_000
BASE_FIELDS = 250_000
FIELDS_PER_EVENT = 16
_CHARGE_EVERY = 4096
_READ_CHUNK = 16 << 20
_WIRE_VARINT, _WIRE_I64, _WIRE_LEN, _WIRE_I32 = 0, 1, 2, 5
_OP_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _varint(buf: bytes | memoryview, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise BadInput(400, "truncated or corrupt xplane protobuf (varint)")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


class WorkBudget:
    """Fields the decoder may still decode: the allowance grows with the events decoded.

    Charged in steps of `_CHARGE_EVERY` fields, so the check costs nothing per field and a
    hostile message is stopped within a few thousand fields of running out.
    """

    __slots__ = ("events", "left")

    def __init__(self, base: int | None = None) -> None:
        self.left = BASE_FIELDS if base is None else base
        self.events = 0

    def charge(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise BadInput(400, "xplane protobuf holds far more fields than its events need "
                                f"(allowance {BASE_FIELDS} + {FIELDS_PER_EVENT} per event): corrupt or padded")

    def event(self) -> None:
        self.events += 1
        if self.events > MAX_EVENTS:
            raise BadInput(413, f"xplane holds more than {MAX_EVENTS} events; profile a shorter window")
        self.left += FIELDS_PER_EVENT


def fields(buf: memoryview, budget: WorkBudget) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of one message; length-delimited values as views."""
    i, n = 0, len(buf)
    count = 0
    while i < n:
        count += 1
        if count == _CHARGE_EVERY:
            budget.charge(count)
            count = 0
        tag, i = _varint(buf, i)
        num, wire = tag >> 3, tag & 7
        if num == 0:
            raise BadInput(400, "corrupt xplane protobuf (field number 0)")
        if wire == _WIRE_VARINT:
            val, i = _varint(buf, i)
            yield num, wire, val
        elif wire == _WIRE_LEN:
            length, i = _varint(buf, i)
            if i + length > n:
                raise BadInput(400, "truncated or corrupt xplane protobuf (length past end)")
            yield num, wire, buf[i:i + length]
            i += length
        elif wire == _WIRE_I64:
            i += 8
        elif wire == _WIRE_I32:
            i += 4
        else:
            raise BadInput(400, f"corrupt xplane protobuf (wire type {wire})")
        if i > n:
            raise BadInput(400, "truncated xplane protobuf")
    budget.charge(count)


def _text(v: int | memoryview) -> str:
    return bytes(v).decode("utf-8", "replace") if isinstance(v, memoryview) else ""


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _stream_varint(stream: io.BufferedReader) -> int | None:
    """A varint read byte by byte from *stream*; None at a clean end of input."""
    result = shift = 0
    while True:
        byte = stream.read(1)
        if not byte:
            if shift:
                raise BadInput(400, "truncated xplane protobuf (varint)")
            return None
        result |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return result
        shift += 7
        if shift > 63:
            raise BadInput(400, "corrupt xplane protobuf (varint too long)")


def iter_planes(stream: io.BufferedReader) -> Iterator[memoryview]:
    """Each XPlane's bytes, read from the XSpace stream one at a time.

    At most `MAX_SPACE_FIELDS` top-level fields and `MAX_PLANES` planes: each costs a
    byte-by-byte varint read here and a summary in the reader, whatever it holds.
    """
    planes = 0
    for _ in range(MAX_SPACE_FIELDS):
        tag = _stream_varint(stream)
        if tag is None:
            return
        num, wire = tag >> 3, tag & 7
        if wire != _WIRE_LEN or num == 0:
            raise BadInput(400, "not an XSpace protobuf (unexpected top-level field)")
        length = _stream_varint(stream)
        if length is None:
            raise BadInput(400, "truncated xplane protobuf (length missing)")
        if length > MAX_PLANE_BYTES:
            raise BadInput(413, f"xplane plane of {length} bytes exceeds {MAX_PLANE_BYTES}")
        data = _read_exact(stream, length)
        if num == 1:
            planes += 1
            if planes > MAX_PLANES:
                raise BadInput(413, f"xplane holds more than {MAX_PLANES} planes")
            yield memoryview(data)
    raise BadInput(400, f"xplane protobuf has more than {MAX_SPACE_FIELDS} top-level fields")


def _read_exact(stream: io.BufferedReader, length: int) -> bytes:
    """*length* bytes, read in chunks so a declared length the input cannot hold costs nothing."""
    chunks: list[bytes] = []
    left = length
    while left > 0:
        chunk = stream.read(min(left, _READ_CHUNK))
        if not chunk:
            raise BadInput(400, f"truncated xplane protobuf (a field declares {length} bytes, "
                                f"the input ends after {length - left})")
        chunks.append(chunk)
        left -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


@dataclass
class PlaneSummary:
    """What one plane contributed (for warnings and tests)."""

    name: str
    op_events: int = 0
    stats: dict[str, str] = field(default_factory=dict)


def _event_metadata(entry: memoryview, budget: WorkBudget) -> tuple[int, str, str]:
    key, meta_id, name, display = 0, 0, "", ""
    for num, _, val in fields(entry, budget):
        if num == 1 and isinstance(val, int):
            key = _signed(val)
        elif num == 2 and isinstance(val, memoryview):
            for n2, _, v2 in fields(val, budget):
                if n2 == 1 and isinstance(v2, int):
                    meta_id = _signed(v2)
                elif n2 == 2:
                    name = _text(v2)
                elif n2 == 4:
                    display = _text(v2)
    return key or meta_id, name, display


def op_of_host_event(name: str) -> str | None:
    """The op type of a TF host event name `<op_name>:<op_type>`, None for runtime events."""
    op_name, sep, op_type = name.rpartition(":")
    if not sep or not op_name or op_name.endswith(":") or " " in op_name:
        return None
    return op_type if _OP_TYPE.fullmatch(op_type) else None


class XPlaneReader:
    """Accumulates op self time over the planes of one XSpace."""

    def __init__(self) -> None:
        self.agg = SelfTimeAggregator()
        self.tf_op_counts: dict[str, int] = {}
        self.planes: list[PlaneSummary] = []
        self.budget = WorkBudget()

    def add_plane(self, plane: memoryview) -> None:
        name = ""
        metadata: dict[int, tuple[str, str]] = {}
        stat_names: dict[int, str] = {}
        lines: list[memoryview] = []
        plane_stats: list[memoryview] = []
        budget = self.budget
        for num, _, val in fields(plane, budget):
            if num == 2:
                name = _text(val)
            elif num == 3 and isinstance(val, memoryview):
                lines.append(val)
            elif num == 4 and isinstance(val, memoryview):
                key, ev_name, display = _event_metadata(val, budget)
                metadata[key] = (ev_name, display)
            elif num == 5 and isinstance(val, memoryview):
                key, stat_name, _ = _event_metadata(val, budget)
                stat_names[key] = stat_name
            elif num == 6 and isinstance(val, memoryview):
                plane_stats.append(val)
        summary = PlaneSummary(name)
        summary.stats = _stats(plane_stats, stat_names, budget)
        self.planes.append(summary)
        kind = "host" if name.startswith("/host:CPU") else "device" if name.startswith("/device:") else None
        if kind is None:
            return
        keys = self._op_keys(metadata, kind)
        seen: dict[int, int] = {}
        for line in lines:
            summary.op_events += self._add_line(name, line, keys, seen)
        if kind == "host":
            for meta_id, n in seen.items():
                op_name = metadata[meta_id][0].rpartition(":")[0]
                self.tf_op_counts[op_name] = self.tf_op_counts.get(op_name, 0) + n

    def _op_keys(self, metadata: dict[int, tuple[str, str]], kind: str) -> dict[int, tuple[str, OpClass]]:
        keys: dict[int, tuple[str, OpClass]] = {}
        for meta_id, (ev_name, _display) in metadata.items():
            op_type = op_of_host_event(ev_name) if kind == "host" else ev_name
            if op_type:
                keys[meta_id] = (op_type, classify_op_type(op_type))
        return keys

    def _add_line(
        self, plane_name: str, line: memoryview, keys: dict[int, tuple[str, OpClass]], seen: dict[int, int]
    ) -> int:
        """Op events of one line, decoded as they come (never a list of the line's events).

        Writers put a line's id (1) and timestamp (3) before its events (4), as protobuf
        serializers write fields in number order; a line that sets them after an event is
        refused rather than read with the wrong thread or time base.
        """
        budget = self.budget
        line_id, ts_ns = 0, 0
        events_started = False
        thread: tuple[str, int] = (plane_name, 0)
        base_us = 0.0
        counted = 0
        add = self.agg.add
        for num, _, val in fields(line, budget):
            if num == 4 and isinstance(val, memoryview):
                if not events_started:
                    events_started = True
                    thread, base_us = (plane_name, line_id), ts_ns / 1e3
                budget.event()
                key = self._event(val, keys, seen)
                if key is not None:
                    meta_key, offset_ps, dur_ps = key
                    counted += 1
                    add(thread, base_us + offset_ps / 1e6, dur_ps / 1e6, meta_key)
            elif num in (1, 3) and isinstance(val, int):
                if events_started:
                    raise BadInput(400, "xplane line sets its id or timestamp after its events (not a "
                                        "serializer's field order); refused")
                if num == 1:
                    line_id = val
                else:
                    ts_ns = _signed(val)
        return counted

    def _event(self, ev: memoryview, keys: dict[int, tuple[str, OpClass]], seen: dict[int, int]
               ) -> tuple[tuple[str, OpClass], int, int] | None:
        """(op key, offset ps, duration ps) of an op event; None for an event that is no op."""
        meta_id, offset_ps, dur_ps = 0, 0, 0
        for num, _, val in fields(ev, self.budget):
            if not isinstance(val, int):
                continue
            if num == 1:
                meta_id = _signed(val)
            elif num == 2:
                offset_ps = _signed(val)
            elif num == 3:
                dur_ps = _signed(val)
        key = keys.get(meta_id)
        if key is None:
            return None
        seen[meta_id] = seen.get(meta_id, 0) + 1
        return key, offset_ps, dur_ps


def _stats(stats: list[memoryview], stat_names: dict[int, str], budget: WorkBudget) -> dict[str, str]:
    out: dict[str, str] = {}
    for stat in stats[:64]:
        meta_id, value = 0, ""
        for num, _, val in fields(stat, budget):
            if num == 1 and isinstance(val, int):
                meta_id = val
            elif num in (2, 3, 4) and isinstance(val, int):
                value = str(val)
            elif num in (5, 6):
                value = _text(val)[:4096]
        name = stat_names.get(meta_id, str(meta_id))
        out[name] = value
        if name == "profile_options":
            level = _host_tracer_level(stat, budget)
            if level is not None:
                out["host_tracer_level"] = str(level)
    return out


def _host_tracer_level(stat: memoryview, budget: WorkBudget) -> int | None:
    """ProfilerOptions.host_tracer_level (field 2) from the `profile_options` stat's bytes."""
    for num, _, val in fields(stat, budget):
        if num == 6 and isinstance(val, memoryview):
            for n2, _, v2 in fields(val, budget):
                if n2 == 2 and isinstance(v2, int):
                    return v2
    return None


def xplane_op_totals(stream: io.BufferedReader) -> tuple[OpTotals, XPlaneReader]:
    """Self time per op of an XSpace, plus the reader (plane summaries, op names)."""
    reader = XPlaneReader()
    for plane in iter_planes(stream):
        reader.add_plane(plane)
    if not reader.planes:
        raise BadInput(400, "xplane protobuf holds no planes")
    return reader.agg.finish(), reader
