"""Hostile profiles: truncated, corrupt, gzip bombs, oversized, garbage — a BadInput, never a crash."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.paths import FIXTURES
from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles.ingest import MAX_CAPTURE_S, MIN_CAPTURE_S, parse_profile

TF = FIXTURES / "profiles" / "tensorflow"
XPLANE = (TF / "ctr_int_ids.xplane.pb").read_bytes()
TRACE_GZ = (FIXTURES / "profiles" / "pytorch" / "ranker_tensor.pt.trace.json.gz").read_bytes()
TRACE = gzip.decompress(TRACE_GZ)


def outcome(data: bytes, filename: str = "", cap: int = 1 << 30) -> str:
    try:
        parse_profile(data, filename, max_inflated_bytes=cap)
    except BadInput as exc:
        assert 400 <= exc.status_code < 500 and exc.message
        return f"bad:{exc.status_code}"
    return "ok"


def test_gzip_bomb_is_refused_with_413() -> None:
    bomb = gzip.compress(b'{"traceEvents": [' + b" " * (64 << 20), compresslevel=9)  # 64 MiB in ~64 KB
    assert len(bomb) < 200_000
    assert outcome(bomb, cap=8 << 20) == "bad:413"


def test_truncated_gzip_is_400() -> None:
    assert outcome(TRACE_GZ[: len(TRACE_GZ) // 2]) == "bad:400"


@pytest.mark.parametrize("frac", [0.1, 0.5, 0.9, 0.999])
def test_truncated_json_trace_is_400(frac: float) -> None:
    assert outcome(TRACE[: int(len(TRACE) * frac)]) == "bad:400"


@pytest.mark.parametrize("frac", [0.3, 0.7, 0.999])
def test_truncated_xplane_is_400(frac: float) -> None:
    assert outcome(XPLANE[: int(len(XPLANE) * frac)], "h.xplane.pb") == "bad:400"


@pytest.mark.parametrize("body", [b"", b"   ", b"\x00\x01\x02garbage", b"<html>nope</html>", b"\xff\xfe{"])
def test_garbage_is_refused(body: bytes) -> None:
    assert outcome(body).startswith("bad:4")


def test_huge_single_event_is_413() -> None:
    body = b'{"traceEvents": [{"ph": "X", "name": "' + b"a" * (5 << 20) + b'"}]}'
    assert outcome(body) == "bad:413"


def test_json_without_trace_events_is_400() -> None:
    assert outcome(json.dumps({"foo": 1}).encode()) == "bad:400"


def test_trtexec_profile_is_read_and_validated() -> None:
    good = json.dumps([{"count": 10}, {"name": "conv1", "timeMs": 3.0, "averageMs": 0.3},
                       {"name": "Reformatting CopyNode for Input Tensor 0 to conv1", "timeMs": 1.0}]).encode()
    rep = parse_profile(good)
    assert rep.format == "trtexec"
    assert rep.op_class_share["compute"] == pytest.approx(0.75)
    assert rep.op_class_share["memcpy"] == pytest.approx(0.25)
    bad = json.dumps([{"count": 1}, {"name": "x", "timeMs": "NaN"}]).encode()
    assert outcome(bad) == "bad:400"


events = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "B", "i", 3]), "ts": st.one_of(st.floats(allow_nan=True), st.text(max_size=3)),
     "dur": st.one_of(st.floats(-1e9, 1e9), st.none()),
     "name": st.one_of(st.text(max_size=30), st.integers()),
     "cat": st.sampled_from(["cpu_op", "user_annotation", "kernel", "gpu_memcpy", "x", None]),
     "pid": st.one_of(st.integers(), st.lists(st.integers(), max_size=2)), "tid": st.integers(0, 3),
     "args": st.one_of(st.none(), st.fixed_dictionaries({"long_name": st.text(max_size=30)}))})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, max_size=20))
def test_fuzz_chrome_events_never_crash(evs: list) -> None:
    body = json.dumps({"traceEvents": evs}).encode()
    assert outcome(body) in ("ok", "bad:400")


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_random_bytes_never_crash(data: bytes) -> None:
    for name in ("", "x.xplane.pb"):
        assert outcome(data, name) in ("ok", "bad:400", "bad:413", "bad:415")


@settings(max_examples=40, deadline=None)
@given(st.integers(0, len(XPLANE) - 1), st.integers(0, 255))
def test_fuzz_xplane_bit_flips_never_crash(pos: int, byte: int) -> None:
    data = bytearray(XPLANE)
    data[pos] = byte
    assert outcome(bytes(data), "h.xplane.pb") in ("ok", "bad:400", "bad:413")


@settings(max_examples=40, deadline=None)
@given(st.integers(0, len(TRACE) - 1), st.sampled_from([b"{", b"}", b"[", b"]", b'"', b",", b"\\", b"\xff"]))
def test_fuzz_trace_byte_edits_never_crash(pos: int, byte: bytes) -> None:
    data = TRACE[:pos] + byte + TRACE[pos + 1:]
    assert outcome(data) in ("ok", "bad:400", "bad:413", "bad:415")


@pytest.mark.parametrize("plane_bytes", [ord("["), ord("{")])
def test_a_small_xplane_named_pb_is_an_xplane_whatever_its_second_byte(plane_bytes: int) -> None:
    """0x0a (field 1) reads as a newline, and a plane length of 91 or 123 as a JSON bracket."""
    from tests.unit.exporters.test_profiles_hostile import HOST_PLANE_HEAD, ld

    plane = HOST_PLANE_HEAD + ld(15, b"x" * (plane_bytes - len(HOST_PLANE_HEAD) - 2))
    body = ld(1, plane)
    assert body[1] == plane_bytes
    assert parse_profile(body, "host.xplane.pb").format == "xplane"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-10, 10).map(lambda e: 10**e * 1.795e18),
                 st.floats(), st.text(max_size=30), st.integers(0, 2**64).map(str),
                 st.lists(st.integers(), max_size=2)))
def test_fuzz_capture_times_are_in_range_or_400(value: object) -> None:
    """Whatever a file records as its capture time, it is read as a sane time, as "not recorded", or
    refused with a 400 naming the field (never an OverflowError, a ValueError or a 500)."""
    for body, name in ((json.dumps({"baseTimeNanoseconds": value, "traceEvents": []}).encode(), "trace.json"),
                       (_xplane_with_start_time(value), "h.xplane.pb")):
        try:
            captured = parse_profile(body, name).captured_at
        except BadInput as exc:
            assert exc.status_code == 400 and ("baseTimeNanoseconds" in exc.message
                                               or "profile_start_time" in exc.message)
            continue
        assert captured is None or MIN_CAPTURE_S <= captured <= MAX_CAPTURE_S


def _xplane_with_start_time(value: object) -> bytes:
    from tests.unit.exporters.test_profiles_hostile import with_start_time

    return with_start_time(value)


def test_stream_is_read_not_loaded() -> None:
    """parse_profile accepts a file object and reads it incrementally."""
    reads: list[int] = []

    class Spy(io.BytesIO):
        def read(self, n: int | None = -1) -> bytes:
            reads.append(n if n is not None else -1)
            return super().read(n)

    parse_profile(Spy(TRACE_GZ))  # type: ignore[arg-type]
    assert all(0 < n <= 1 << 20 for n in reads)


def test_a_corrupt_spot_does_not_slow_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """After one window with an undecodable batch, batching resumes (no quadratic slow path)."""
    from tidescale.exporters.profiles import chrome

    calls = {"batch": 0, "value": 0}
    real_batch, real_value = chrome._batch, chrome._TextWindow.value

    def count_batch(win):  # type: ignore[no-untyped-def]
        calls["batch"] += 1
        return real_batch(win)

    def count_value(self):  # type: ignore[no-untyped-def]
        calls["value"] += 1
        return real_value(self)

    monkeypatch.setattr(chrome, "_batch", count_batch)
    monkeypatch.setattr(chrome._TextWindow, "value", count_value)
    monkeypatch.setattr(chrome, "READ_CHUNK", 64 * 1024)
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": i, "dur": 0.5,
               "args": {"v": 1}} for i in range(20_000)]
    text = json.dumps({"traceEvents": events})
    # orjson refuses NaN, so the batch holding event 5000 falls back to the one-event path
    text = text.replace('"ts": 5000,', '"x": NaN, "ts": 5000,', 1)
    rep = parse_profile(text.encode())
    assert rep.total_self_time_us == pytest.approx(10_000)
    assert 0 < calls["value"] < 2_000 and calls["batch"] < 100
