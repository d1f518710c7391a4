"""Hostile profiles that once cost minutes of CPU, fooled the release gate or crashed the parser.

Work is measured in decoder steps (fields, JSON values decoded), never in wall-clock time.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.hostile import JSON_DOCUMENTS, MARKUP_TEXT, NUMBERS, TIMESTAMPS
from tests.protowire import varint
from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles import chrome, xplane
from tidescale.exporters.profiles.ingest import parse_profile

# --- builders (the bombs) ----------------------------------------------------------------------


def ld(num: int, data: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(num << 3 | 2) + varint(len(data)) + data


HOST_PLANE_HEAD = ld(2, b"/host:CPU") + ld(4, b"\x08\x01" + ld(2, b"\x08\x01" + ld(2, b"f/op:MatMul")))


def xplane_plane_bomb(body: bytes) -> bytes:
    """An XSpace of one plane holding *body*, gzipped: padding inflates about 1000x."""
    return gzip.compress(ld(1, body), compresslevel=9)


def xplane_zero_bomb(plane_bytes: int = 20 << 20) -> bytes:
    """The reported bomb: a plane of zero bytes (20 MiB in about 20 KB of gzip)."""
    return xplane_plane_bomb(bytes(plane_bytes))


def chrome_trace(events_json: bytes) -> bytes:
    return b'{"traceEvents": [' + events_json + b"]}"


def x_event(dur: bytes, ts: bytes = b"0", args: bytes = b"{}") -> bytes:
    return (b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": ' + ts + b', "dur": ' + dur
            + b', "args": ' + args + b"}")


def outcome(data: bytes, filename: str = "") -> str:
    """ok (with a JSON-clean report) or bad:<status>; anything else propagates and fails the test."""
    try:
        rep = parse_profile(data, filename)
    except BadInput as exc:
        assert 400 <= exc.status_code < 500 and exc.message
        return f"bad:{exc.status_code}"
    json.dumps(rep.to_json(), allow_nan=False)
    assert all(math.isfinite(v) for v in rep.op_class_share.values())
    return "ok"


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Counts calls of owner.name (a decoder step)."""
    calls = [0]
    real: Callable[..., Any] = getattr(owner, name)

    def counting(*args: Any) -> Any:
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(owner, name, counting)
    return calls


# --- item 1: CPU in proportion to events, not bytes -----------------------------------------------


def test_a_plane_of_zeros_is_refused_at_its_first_field(monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = xplane_zero_bomb()
    assert len(bomb) < 25_000
    steps = count_calls(monkeypatch, xplane, "_varint")
    assert outcome(bomb, "h.xplane.pb") == "bad:400"
    assert steps[0] < 10  # was one step per two bytes: 10 million


@pytest.mark.parametrize("body", [
    pytest.param(b"\x08\x00" * (1 << 20), id="repeated-plane-id"),
    pytest.param(HOST_PLANE_HEAD + b"\x1a\x00" * (1 << 20), id="empty-lines"),
    pytest.param(HOST_PLANE_HEAD + ld(3, ld(4, b"\x08\x01" * (1 << 20))), id="one-event-of-padding"),
    pytest.param(HOST_PLANE_HEAD + ld(3, ld(4, b"\x08\x01") + ld(11, b"") * (1 << 20)), id="line-padding"),
])
def test_padding_is_refused_within_the_field_budget(monkeypatch: pytest.MonkeyPatch, body: bytes) -> None:
    monkeypatch.setattr(xplane, "BASE_FIELDS", 10_000)
    steps = count_calls(monkeypatch, xplane, "_varint")
    assert outcome(xplane_plane_bomb(body), "h.xplane.pb") == "bad:400"
    assert steps[0] < 3 * (10_000 + 2 * xplane._CHARGE_EVERY)


def test_event_count_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xplane, "MAX_EVENTS", 1000)
    events = b"".join(ld(4, b"\x08\x01\x18\x02") for _ in range(1001))
    assert outcome(xplane_plane_bomb(HOST_PLANE_HEAD + ld(3, events)), "h.xplane.pb") == "bad:413"
    ok = b"".join(ld(4, b"\x08\x01\x18\x02") for _ in range(1000))
    assert outcome(xplane_plane_bomb(HOST_PLANE_HEAD + ld(3, ok)), "h.xplane.pb") == "ok"


def test_planes_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xplane, "MAX_PLANES", 50)
    assert outcome(gzip.compress(b"\x0a\x00" * 51), "h.xplane.pb") == "bad:413"


def test_a_declared_plane_longer_than_the_input_is_400_without_reading_it(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    real = xplane._read_exact

    def spy(stream: Any, length: int) -> bytes:
        reads.append(length)
        return real(stream, length)

    monkeypatch.setattr(xplane, "_read_exact", spy)
    assert outcome(b"\x0a" + varint((1 << 30) - 1) + b"\x08\x01", "h.xplane.pb") == "bad:400"


def test_a_line_with_its_timestamp_after_its_events_is_refused() -> None:
    line = ld(4, b"\x08\x01\x18\x02") + b"\x18\x05"
    assert outcome(xplane_plane_bomb(HOST_PLANE_HEAD + ld(3, line)), "h.xplane.pb") == "bad:400"


@pytest.mark.parametrize("element", [b"0", b"{}", b"[]", b'"x"', b"null", b'{"name": "no ph"}'])
def test_chrome_padding_elements_are_refused(monkeypatch: pytest.MonkeyPatch, element: bytes) -> None:
    monkeypatch.setattr(chrome, "JUNK_ALLOWANCE", 100)
    steps = count_calls(monkeypatch, chrome._TextWindow, "value")
    bomb = gzip.compress(chrome_trace(b",".join([element] * 200_000)), compresslevel=9)
    assert outcome(bomb) == "bad:400"
    assert steps[0] < 2_000


def test_chrome_junk_beside_as_many_real_events_is_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chrome, "JUNK_ALLOWANCE", 10)
    assert outcome(chrome_trace(b",".join([x_event(b"1"), b"{}"] * 50))) == "ok"


def test_chrome_event_count_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chrome, "MAX_TRACE_EVENTS", 1000)
    assert outcome(chrome_trace(b",".join([x_event(b"1")] * 1001))) == "bad:413"


# --- items 3 and 4: non-finite times, deep JSON, huge numbers ---------------------------------------

REFUSED_TIMES = {"400-digits", "int64-max-plus-1", "uint64-max-plus-1", "float-max", "overflowing-sum", "nan",
                 "inf", "neg-inf"}


def number_json(value: object) -> bytes:
    return json.dumps(value).encode()  # NaN/Infinity literals, as Python's json writes them


def as_chrome_dur(value: object) -> bytes:
    return chrome_trace(b",".join([x_event(number_json(value), ts=b"%d" % i) for i in range(3)]))


def as_chrome_ts(value: object) -> bytes:
    return chrome_trace(x_event(b"1", ts=number_json(value)))


def as_trtexec(value: object) -> bytes:
    rows = b",".join(b'{"name": "l%d", "timeMs": %s}' % (i, number_json(value)) for i in range(3))
    return b'[{"count": 1},' + rows + b"]"


def as_op_stats(value: object) -> bytes:
    rows = b",".join(b'{"c": [{"v": "MatMul%d"}, {"v": %s}]}' % (i, number_json(value)) for i in range(3))
    return b'[{"cols": [{"id": "type"}, {"id": "total_self_time"}], "rows": [' + rows + b"]}]"


PLACEMENTS = [as_chrome_dur, as_chrome_ts, as_trtexec, as_op_stats]


@pytest.mark.parametrize("place", PLACEMENTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("name", "value"), NUMBERS, ids=[n for n, _ in NUMBERS])
def test_hostile_numbers_as_times(place: Callable[[object], bytes], name: str, value: object) -> None:
    got = outcome(place(value))
    if name in REFUSED_TIMES:
        assert got == "bad:400"
    else:
        assert got in ("ok", "bad:400")


def test_the_reported_overflows_are_400_naming_the_problem() -> None:
    for body in (as_trtexec(1e306), as_chrome_dur(1e308)):
        with pytest.raises(BadInput) as exc:
            parse_profile(body)
        assert exc.value.status_code == 400 and "finite" in exc.value.message


def test_a_non_finite_total_is_refused_by_the_report() -> None:
    from tidescale.exporters.profiles.report import build_report
    from tidescale.exporters.profiles.selftime import OpTotals

    totals = OpTotals()
    totals.add(("a", "compute"), 1e308)
    totals.add(("b", "string"), 1e308)
    with pytest.raises(BadInput, match="not finite"):
        build_report(totals, "trtexec")


# --- issue 43 #8: a capture time is checked like every other time ---------------------------------

CAPTURE_TIMES = NUMBERS + TIMESTAMPS
VALID_NS = 1_795_274_718_890_000_000  # 2026-11-22, as ctr_int_ids.xplane.pb records it


def with_base_time(value: object) -> bytes:
    """A torch.profiler trace that records *value* as its `baseTimeNanoseconds`."""
    return b'{"baseTimeNanoseconds": ' + number_json(value) + b', "traceEvents": [' + x_event(b"5") + b"]}"


def with_start_time(value: object) -> bytes:
    """An XSpace whose host plane records *value* as its `profile_start_time` stat: an int that fits
    as a uint64 (as TF writes it), anything else as text."""
    stat_value = (varint(3 << 3) + varint(value) if isinstance(value, int) and 0 <= value < 2**64
                  else ld(5, str(value).encode()))
    stat_metadata = ld(5, b"\x08\x07" + ld(2, b"\x08\x07" + ld(2, b"profile_start_time")))
    return ld(1, HOST_PLANE_HEAD + stat_metadata + ld(6, b"\x08\x07" + stat_value))


CAPTURE_PLACEMENTS = [with_base_time, with_start_time]


@pytest.mark.parametrize("place", CAPTURE_PLACEMENTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("name", "value"), CAPTURE_TIMES, ids=[n for n, _ in CAPTURE_TIMES])
def test_hostile_capture_times_are_400(place: Callable[[object], bytes], name: str, value: object) -> None:
    """Every entry is refused, but a float of whole nanoseconds within 2000-2100 as JSON writes it."""
    if place is with_base_time and name == "float":
        assert parse_profile(place(value)).captured_at == 1.5e9
        return
    with pytest.raises(BadInput) as exc:
        parse_profile(place(value))
    assert exc.value.status_code == 400
    assert ("baseTimeNanoseconds" if place is with_base_time else "profile_start_time") in exc.value.message


@pytest.mark.parametrize("place", CAPTURE_PLACEMENTS, ids=lambda f: f.__name__)
def test_a_capture_time_in_range_is_read_and_zero_means_none(place: Callable[[object], bytes]) -> None:
    assert parse_profile(place(VALID_NS)).captured_at == pytest.approx(VALID_NS / 1e9)
    assert parse_profile(place(str(VALID_NS) if place is with_start_time else VALID_NS)).captured_at \
        == pytest.approx(VALID_NS / 1e9)
    assert parse_profile(place(0)).captured_at is None


def embedded(doc: bytes) -> list[bytes]:
    """The document as a whole upload, as an event's args, and as a trtexec row's extra field."""
    return [doc, chrome_trace(x_event(b"1", args=doc)), b'[{"count": 1}, {"name": "l", "timeMs": 1, "x": '
            + doc + b"}]", b'{"meta": ' + doc + b', "traceEvents": []}']


@pytest.mark.parametrize(("name", "doc"), JSON_DOCUMENTS, ids=[n for n, _ in JSON_DOCUMENTS])
def test_hostile_json_documents_are_4xx_or_ok(name: str, doc: bytes) -> None:
    for body in embedded(doc):
        assert outcome(body) in ("ok", "bad:400", "bad:413", "bad:415")
        assert outcome(gzip.compress(body)) in ("ok", "bad:400", "bad:413", "bad:415")


@pytest.mark.parametrize("doc", [d for n, d in JSON_DOCUMENTS if n.startswith("deep")])
def test_deep_args_are_400(doc: bytes) -> None:
    for body in embedded(doc):
        assert outcome(body) == "bad:400"


# --- the CLI gate: exit 2 with one line, never a traceback or a PASS ------------------------------


def run_cli(tmp_path: Path, body: bytes, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    from tidescale.cli import main

    path = tmp_path / "profile.json"
    path.write_bytes(body)
    with pytest.raises(SystemExit) as exc:
        main(["profile", "report", *extra, str(path)])
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, v in NUMBERS if n in REFUSED_TIMES],
                         ids=[n for n, _ in NUMBERS if n in REFUSED_TIMES])
def test_gate_exits_2_on_overflowing_times(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                           value: object) -> None:
    for body in (as_trtexec(value), as_chrome_dur(value)):
        code, out, err = run_cli(tmp_path, body, capsys, "--json")
        assert code == 2, (out, err)
        assert out == "" and "NaN" not in out
        assert err.startswith("error: cannot read the profile:") and err.count("\n") == 1


@pytest.mark.parametrize("place", CAPTURE_PLACEMENTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("value", [10**400, "²"], ids=["400-digits", "superscript-two"])
def test_gate_exits_2_on_a_bad_capture_time(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            place: Callable[[object], bytes], value: object) -> None:
    code, out, err = run_cli(tmp_path, place(value), capsys, "--json")
    assert code == 2 and out == ""
    assert err.startswith("error: cannot read the profile:") and err.count("\n") == 1, err


@pytest.mark.parametrize(("name", "doc"), JSON_DOCUMENTS, ids=[n for n, _ in JSON_DOCUMENTS])
def test_gate_on_hostile_json_exits_0_2_or_3_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            name: str, doc: bytes) -> None:
    for body in embedded(doc):
        code, out, err = run_cli(tmp_path, body, capsys, "--json")
        assert "Traceback" not in err
        if code in (0, 3):  # judged within the limits, or no op time to judge
            report = json.loads(out)  # strict JSON (no NaN): json.loads would accept NaN, so check the text too
            assert "NaN" not in out and "Infinity" not in out
            assert (report["total_self_time_us"] > 0) == (code == 0)
        else:
            assert code == 2 and err.startswith("error:") and err.count("\n") == 1, (code, err[:300])
    if name.startswith("deep") or name == "400-digit-number":
        assert run_cli(tmp_path, doc, capsys)[0] == 2


# --- issue 43 #9: what the profile names is printed as text, never as markup ----------------------


def test_the_gate_prints_op_names_as_they_are(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"count": 1}, *({"name": name, "timeMs": 10 + i} for i, (_, name) in enumerate(MARKUP_TEXT))]
    code, out, err = run_cli(tmp_path, json.dumps(rows).encode(), capsys)
    assert code == 0 and "Traceback" not in err, err
    assert "\x1b" not in out and "\r" not in out
    for name, text in MARKUP_TEXT:
        assert (text if text.isprintable() else ascii(text)[1:-1]) in out, name


def test_gate_warnings_are_printed_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "[red]disguised.json"  # warnings name the file they come from
    # TF ops recorded unevenly (a host tracer level 2 capture): a warning that names the file
    ops = [b"a:MatMul"] * 10 + [b"b:Add"] * 10 + [b"c:AsString"]
    path.write_bytes(chrome_trace(b",".join(x_event(b"1", ts=b"%d" % (2 * i), args=b'{"long_name": "%s"}' % op)
                                            for i, op in enumerate(ops))))
    from tidescale.cli import main

    with pytest.raises(SystemExit):
        main(["profile", "report", str(path)])
    assert "[red]disguised.json" in capsys.readouterr().err.replace("\n", "")  # Rich wraps at 80 columns
