"""Self time from nested intervals, op classes, and the streaming reader's chunk boundaries."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.exporters.profiles import chrome
from tidescale.exporters.profiles.chrome import chrome_op_totals, iter_trace_events
from tidescale.exporters.profiles.opclass import classify_name, classify_op_type
from tidescale.exporters.profiles.selftime import SelfTimeAggregator
from tidescale.exporters.profiles.sources import open_profile

A = ("A", "compute")
B = ("B", "string")
C = ("C", "other")


def test_child_time_is_subtracted_from_parent() -> None:
    agg = SelfTimeAggregator()
    agg.add(1, 0.0, 100.0, A)
    agg.add(1, 10.0, 30.0, B)
    agg.add(1, 50.0, 20.0, B)
    agg.add(1, 55.0, 5.0, C)   # grandchild: only its parent B loses it
    totals = agg.finish()
    assert totals.self_us[A] == pytest.approx(50.0)
    assert totals.self_us[B] == pytest.approx(45.0)
    assert totals.self_us[C] == pytest.approx(5.0)


def test_threads_do_not_nest_into_each_other() -> None:
    agg = SelfTimeAggregator()
    agg.add("t1", 0.0, 100.0, A)
    agg.add("t2", 10.0, 30.0, B)
    totals = agg.finish()
    assert totals.self_us[A] == 100.0 and totals.self_us[B] == 30.0


def test_events_out_of_order_within_the_window_nest_correctly() -> None:
    agg = SelfTimeAggregator(reorder_events=8)
    agg.add(1, 10.0, 30.0, B)   # child written before its parent
    agg.add(1, 0.0, 100.0, A)
    totals = agg.finish()
    assert totals.self_us[A] == 70.0 and totals.late_events == 0


def test_late_events_beyond_the_window_are_counted() -> None:
    agg = SelfTimeAggregator(reorder_events=2)
    for i in range(10):
        agg.add(1, 100.0 + 10 * i, 1.0, A)
    agg.add(1, 0.0, 1.0, B)
    assert agg.finish().late_events == 1


@st.composite
def nested_tree(draw: st.DrawFn, start: float = 0.0, length: float = 1000.0, depth: int = 0) -> list:
    """Properly nested intervals inside [start, start+length)."""
    out = []
    n = draw(st.integers(0, 3 if depth < 3 and length >= 8 else 0))
    cursor = start
    for _ in range(n):
        gap = draw(st.floats(0, length / 8))
        dur = draw(st.floats(1, length / 4))
        if cursor + gap + dur > start + length:
            break
        s = cursor + gap
        out.append((s, dur))
        out.extend(draw(nested_tree(s, dur, depth + 1)))
        cursor = s + dur
    return out


@settings(max_examples=150, deadline=None)
@given(nested_tree(), st.randoms(use_true_random=False))
def test_self_times_sum_to_the_covered_time(intervals: list, rnd) -> None:
    """For nested intervals, summed self time equals the length of their union."""
    rnd.shuffle(intervals)
    agg = SelfTimeAggregator(reorder_events=len(intervals) + 1)
    for s, d in intervals:
        agg.add(0, s, d, A)
    totals = agg.finish()
    tops, end = 0.0, float("-inf")
    for s, d in sorted(intervals, key=lambda iv: (iv[0], -iv[1])):
        if s >= end:
            tops += d
            end = s + d
    assert totals.self_us.get(A, 0.0) == pytest.approx(tops, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize(("op", "cls"), [
    ("_TensorToHashBucketFast", "string"), ("StringToHashBucketStrong", "string"), ("AsString", "string"),
    ("StaticRegexReplace", "string"), ("StringSplitV2", "string"), ("ReduceJoin", "string"),
    ("ParseExampleV2", "parse"), ("DecodeCSV", "parse"), ("ParseSingleExample", "parse"),
    ("MemcpyH2D", "memcpy"), ("aten::copy_", "memcpy"),
    ("Reformatting CopyNode for Input Tensor 0 to conv1", "memcpy"),
    ("_MklNativeFusedMatMul", "compute"), ("aten::addmm", "compute"), ("decoder_layer_0/MatMul", "compute"),
    ("ReadVariableOp", "other"), ("Identity", "other"),
])
def test_op_type_classes(op: str, cls: str) -> None:
    assert classify_op_type(op) == cls


@pytest.mark.parametrize(("name", "cls"), [
    ("preprocess::as_string_hash", "string"), ("tokenize_query", "string"), ("parse_request_json", "parse"),
    ("request_0", "other"), ("ProfilerStep#3", "other"),
])
def test_annotation_classes(name: str, cls: str) -> None:
    assert classify_name(name) == cls


def _trace(events: list[dict], **top: object) -> bytes:
    return json.dumps({**top, "traceEvents": events, "tail": {"x": [1, 2.5]}}, indent=1).encode()


def test_reader_survives_any_chunk_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 3}", "pid": 1, "tid": 2,
               "ts": 1000.123456 + 10 * i, "dur": 5.5, "args": {"s": "x,]}\\\"" * (i % 4)}} for i in range(50)]
    body = _trace(events, schemaVersion=1, deviceProperties=[{"name": "cpu"}])
    expected = list(iter_trace_events(open_profile(io.BytesIO(body))))
    assert expected == events
    for chunk in (1, 7, 64):
        monkeypatch.setattr(chrome, "READ_CHUNK", chunk)
        assert list(iter_trace_events(open_profile(io.BytesIO(body)))) == events


def test_bare_array_traces_are_read() -> None:
    body = json.dumps([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 3}])
    totals, _, _ = chrome_op_totals(open_profile(io.BytesIO(body.encode())))
    assert totals.self_us[("aten::mm", "compute")] == 3


def test_memory_stays_bounded_on_a_long_trace() -> None:
    """Peak memory does not grow with the trace: one window and one decoded batch at a time."""
    import tracemalloc

    one = json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.0,
                      "dur": 1.0, "args": {"pad": "p" * 150}}).encode()

    class Lazy(io.RawIOBase):
        def __init__(self, n: int) -> None:
            self.parts = self._generate(n)
            self.rest = b""

        @staticmethod
        def _generate(n: int):  # type: ignore[no-untyped-def]
            yield b'{"traceEvents": ['
            for _ in range(n - 1):
                yield one + b",\n"
            yield one + b"]}"

        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:  # type: ignore[override]
            while len(self.rest) < len(b):
                part = next(self.parts, None)
                if part is None:
                    break
                self.rest += part
            n = min(len(b), len(self.rest))
            b[:n] = self.rest[:n]
            self.rest = self.rest[n:]
            return n

    peaks = []
    for n in (25_000, 50_000):  # ~6 MB and ~12 MB of trace
        tracemalloc.start()
        totals, _, _ = chrome_op_totals(io.BufferedReader(Lazy(n), buffer_size=1 << 16))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert totals.events == n
    assert peaks[1] < 32 << 20
    assert peaks[1] < 1.25 * peaks[0]  # twice the trace, not twice the memory


@pytest.mark.parametrize("args", [
    {"s": "a},{b"}, {"s": 'x}, {"y": 1}'}, {"nested": [{"a": 1}, {"b": 2}]}, {"s": "}"}, {"s": "{"},
    {"Input Dims": [[64, 8], []], "Concrete Inputs": ["", "4"]},
])
def test_emptying_args_never_changes_what_is_counted(args: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hostile args (braces, boundary look-alikes, nested objects) give the same totals and events."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 2}", "pid": 1, "tid": 1, "ts": 10.0 * i,
               "dur": 4.0, "args": args} for i in range(40)]
    events.append({"ph": "X", "cat": "x", "name": "n", "pid": 1, "tid": 1, "ts": 5.0, "dur": 1.0,
                   "args": {"long_name": "a/b:AsString"}})
    body = json.dumps({"traceEvents": events}, indent=1).encode()
    for chunk in (64, 1 << 20):
        monkeypatch.setattr(chrome, "READ_CHUNK", chunk)
        totals, tf_counts, _ = chrome_op_totals(open_profile(io.BytesIO(body)))
        assert totals.events == 41
        assert totals.self_us[("aten::op0", "compute")] == pytest.approx(80.0)
        assert totals.self_us[("AsString", "string")] == pytest.approx(1.0)
        assert tf_counts == {"a/b": 1}
        assert list(iter_trace_events(open_profile(io.BytesIO(body)))) == events
