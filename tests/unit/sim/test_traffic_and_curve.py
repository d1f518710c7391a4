"""Traffic scenarios, trace replay and the service-time curve."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidescale.benches.autoscale.scenarios import AZURE_TRACE as AZURE
from tidescale.contracts.errors import UsageError
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.traffic import (
    DAY_S,
    MAX_REPLAY_ARRIVALS,
    MAX_TRACE_SPAN_S,
    load_trace_timestamps,
    lulls,
    read_trace,
    replay,
    scenario,
    stepped_poisson_arrivals,
    time_column,
    trace_delimiter,
    weekend,
    workday,
)


def test_v100_curve_reproduces_the_published_throughput() -> None:
    curve = ServiceCurve.v100()
    for batch, rps in ((1, 58), (8, 210), (16, 320), (32, 380)):
        assert curve.throughput(batch) == pytest.approx(rps)
    # Between calibration points execution time grows monotonically with batch size.
    times = [curve.exec_seconds(b) for b in range(1, 33)]
    assert all(b > a for a, b in itertools.pairwise(times))
    assert curve.max_throughput() == pytest.approx(380)
    assert curve.scaled(2).exec_seconds(8) == pytest.approx(2 * curve.exec_seconds(8))


def test_lulls_take_their_lengths_in_turn_and_the_load_comes_back_to_the_base_rate() -> None:
    sc = lulls(800.0, 1200.0, depth=0.25, lulls_s=(60.0, 90.0), back_s=100.0, ramp_s=5.0)
    # base until 100 s; lull 100-160 (60 s), back 160-260; lull 260-350 (90 s), back 350-450; ...
    assert [sc.rate(t) for t in (50.0, 130.0, 200.0, 300.0, 400.0, 500.0)] == [800.0, 200.0, 800.0, 200.0, 800.0,
                                                                              200.0]
    assert sc.rate(162.5) == pytest.approx(500.0)  # halfway up the 5 s return
    assert sc.rate(102.5) == pytest.approx(500.0)  # and down
    assert max(sc.rate(float(t)) for t in range(1200)) == sc.peak_rps == 800.0
    assert "60/90 s in turn" in sc.description


@pytest.mark.parametrize("kw", [{"depth": 0.0}, {"depth": 1.0}, {"lulls_s": ()}, {"lulls_s": (4.0,)},
                                {"back_s": 5.0}])
def test_lulls_refuse_shapes_that_are_not_lulls(kw: dict[str, object]) -> None:
    with pytest.raises(UsageError, match="lulls"):
        lulls(800.0, 1200.0, **kw)  # type: ignore[arg-type]


def test_a_workday_is_a_real_day_with_its_peaks_at_the_same_hours() -> None:
    day = workday(800.0)
    assert day.duration_s == DAY_S and day.step_s == 1.0
    assert day.rate(4 * 3600) == pytest.approx(0.35 * 800.0)  # the night's trough
    assert day.rate(16 * 3600) == pytest.approx(1.05 * 800.0)  # the afternoon
    plain = workday(800.0, peaks=())

    def factor(t: float, of: object = day) -> float:
        return of.rate(t) / plain.rate(t)  # type: ignore[attr-defined, no-any-return]

    assert [round(factor(9 * 3600 + x), 3) for x in (-1, 15, 30, 600, 1230, 1245, 1261)] == [1, 1.75, 2.5, 2.5, 2.5,
                                                                                             1.75, 1]
    assert factor(19 * 3600 + 300) == pytest.approx(2.0) and factor(12 * 3600) == 1.0
    later = workday(800.0, shift_s=90.0)
    assert factor(9 * 3600 + 90, later) == 1.0 and factor(9 * 3600 + 120, later) == 2.5
    assert max(day.rate(float(t)) for t in range(0, 86400, 30)) <= day.peak_rps
    assert "09:00" in day.description and "19:00" in day.description
    rest = weekend(800.0)
    assert rest.rate(9 * 3600 + 600) == pytest.approx(0.5 * plain.rate(9 * 3600 + 600))
    assert "weekend" in rest.description


@pytest.mark.parametrize("kw", [{"base_rps": 0.0}, {"ramp_s": 0.0}, {"peaks": ((25.0, 2.0, 60.0),)},
                                {"peaks": ((9.0, 0.5, 60.0),)}, {"peaks": ((9.0, 2.0, 0.0),)}])
def test_a_workday_refuses_what_is_not_a_day(kw: dict[str, object]) -> None:
    with pytest.raises(UsageError, match="workday"):
        workday(**{"base_rps": 800.0, **kw})  # type: ignore[arg-type]


def test_stepped_arrivals_draw_each_steps_rate() -> None:
    got = stepped_poisson_arrivals(lambda t: 100.0 if t < 50 else 400.0, 100.0, 1.0, seed=3)
    assert np.all(np.diff(got) >= 0) and got[0] >= 0 and got[-1] < 100.0
    first, second = int(np.sum(got < 50)), int(np.sum(got >= 50))
    assert abs(first - 5000) < 5 * 71 and abs(second - 20000) < 5 * 142  # Poisson: within 5 sigma
    assert np.array_equal(got, stepped_poisson_arrivals(lambda t: 100.0 if t < 50 else 400.0, 100.0, 1.0, seed=3))


def test_the_p99_execution_is_the_p99_of_the_simulators_executions() -> None:
    """The queue policy takes the largest batch's P99 execution off the SLO: it must be the P99 of
    what the fast simulator draws (its JitterStream: lognormal, mean 1), not the mean."""
    from tidescale.sim.batcher import JitterStream

    curve = ServiceCurve.v100()
    draws = np.concatenate([JitterStream(curve.jitter_sigma, seed, 0).block() for seed in range(40)])
    assert draws.size >= 100_000 and np.mean(draws) == pytest.approx(1.0, abs=2e-3)
    empirical = curve.exec_seconds(32) * float(np.quantile(draws, 0.99))
    assert curve.exec_p99_seconds(32) == pytest.approx(empirical, rel=3e-3)
    assert curve.exec_p99_seconds(32) > curve.exec_seconds(32) * 1.1  # sigma 0.05: about 12 % above
    flat = ServiceCurve(((1, 0.002), (32, 0.05)), jitter_sigma=0.0)
    assert flat.exec_p99_seconds(32) == flat.exec_seconds(32)


def test_curve_rejects_bad_points() -> None:
    with pytest.raises(UsageError):
        ServiceCurve(((0, 0.1),))
    with pytest.raises(UsageError):
        ServiceCurve(())


@pytest.mark.parametrize("name", ["steady", "diurnal", "surge", "flash-crowd", "diurnal-surge"])
def test_scenarios_have_the_expected_mean(name: str) -> None:
    sc = scenario(name, 20.0, 600.0)
    arr = sc.arrivals(seed=3)
    assert np.all(np.diff(arr) >= 0) and arr[0] >= 0 and arr[-1] < 600
    assert len(arr) / 600 == pytest.approx(sc.mean_rps(), rel=0.1)
    np.testing.assert_array_equal(arr, sc.arrivals(seed=3))  # same seed, same traffic


def test_surge_triples_within_a_minute() -> None:
    sc = scenario("surge", 10.0, 600.0)
    assert sc.rate(0) == pytest.approx(10)
    assert sc.rate(180 + 60) == pytest.approx(30)


def test_unknown_scenario_lists_the_known_ones() -> None:
    with pytest.raises(UsageError, match="unknown scenario 'tsunami'.*diurnal"):
        scenario("tsunami", 1, 10)


def test_azure_trace_replay() -> None:
    ts = load_trace_timestamps(AZURE)
    assert len(ts) == 19366
    assert ts[0] == 0 and 3400 < ts[-1] < 3700
    sc = replay(AZURE, time_scale=0.1, target_rps=50)
    assert sc.duration_s == pytest.approx(ts[-1] * 0.1, rel=1e-3)
    assert sc.mean_rps() == pytest.approx(50, rel=0.05)


def test_malformed_trace_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,x\n2023-11-16 18:15:46.68,1\nyesterday,2\n")
    with pytest.raises(UsageError, match=r"bad.csv:3: first column 'yesterday'"):
        load_trace_timestamps(bad)


@pytest.mark.parametrize(("text", "expected"), [
    ("0\n1.5\n3\n", [0.0, 1.5, 3.0]),  # seconds since the start
    ("timestamp_ms,tokens\n0,1\n1500,2\n3000,3\n", [0.0, 1.5, 3.0]),  # the header names the unit
    ("arrival time (us)\n0\n1500000\n", [0.0, 1.5]),
    ("us_east_time\n0\n1.5\n", [0.0, 1.5]),  # a unit is the header's last word only
    ("1700158546680\n1700158548180\n", [0.0, 1.5]),  # epoch milliseconds, by their size
    ("1700158546680000\n1700158548180000\n", [0.0, 1.5]),  # epoch microseconds
    ("1700158546680000000\n1700158548180000000\n", [0.0, 1.5]),  # epoch nanoseconds
    ("1700158546.68\n1700158548.18\n", [0.0, 1.5]),  # epoch seconds
    ("\ufeff0\n1.5\n", [0.0, 1.5]),  # a byte-order mark (a spreadsheet's export) is no header
    ("timestamp\ttokens\n0\t5\n1.5\t7\n", [0.0, 1.5]),  # tab-separated
    ("\ufeffTIMESTAMP;ContextTokens\n2023-11-16 18:15:46.5;1\n2023-11-16 18:15:48;2\n", [0.0, 1.5]),  # a locale's
    # ISO 8601 whole: offsets, Z, seven fractional digits; the header's unit is no date-time's
    ("time_ms\n2023-11-16T18:15:46.5+01:00\n2023-11-16T17:15:48Z\n2023-11-16 17:15:49.5000000\n",
     [0.0, 1.5, 3.0]),
])
def test_a_trace_is_read_in_the_unit_of_its_timestamps(tmp_path: Path, text: str, expected: list[float]) -> None:
    """Traces come stamped in epoch milliseconds, nanoseconds or ISO date-times with offsets. Read as
    seconds, an hour stamped in epoch milliseconds spanned 42 days and was refused; an offset with a
    fraction (`.5+01:00`) was cut to an unreadable stamp."""
    path = tmp_path / "t.csv"
    path.write_text(text)
    assert load_trace_timestamps(path) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(("text", "stamps"), [
    ("0\n1.5\n", "numbers in seconds (no unit in the header's last word)"),
    ("arrival time (us)\n0\n1500000\n", "numbers in microseconds (the header's 'us')"),
    ("1700158546680\n1700158548180\n", "numbers in milliseconds (their size (1.7e+12: since the epoch))"),
    ("when\n2023-11-16T17:15:46Z\n2023-11-16T17:15:48Z\n", "ISO date-times"),
])
def test_a_replay_says_how_it_read_its_timestamps(tmp_path: Path, text: str, stamps: str) -> None:
    """A unit read wrongly is silent in the figures (an hour in relative milliseconds replays as 42
    days at a thousandth of its rate): the reading, with its span, is shown for someone to check."""
    path = tmp_path / "t.csv"
    path.write_text(text)
    reading = read_trace(path)
    assert reading.stamps == stamps
    assert reading.text.endswith(f"timestamps read as {stamps}") and reading.text.startswith("2 requests over ")
    assert replay(path).reading == reading.text


@pytest.mark.parametrize(("header", "hinted"), [("", True), ("offset\n", True), ("offset_ms\n", False),
                                                ("offset_s\n", False), ("time\n", True)])
def test_a_span_too_long_for_a_guessed_unit_says_how_to_name_it(tmp_path: Path, header: str, hinted: bool) -> None:
    """An hour stamped in milliseconds from its start, with no unit in the header, reads as 42 days:
    the refusal says how to name the unit, unless the header named one (here 42 days in milliseconds)."""
    path = tmp_path / "t.csv"
    path.write_text(header + "0\n1200000\n" + ("3600000000" if header.startswith("offset_") else "3600000") + "\n")
    with pytest.raises(UsageError, match="a replay spans at most 31 days") as exc:
        load_trace_timestamps(path)
    assert ("end their column's header with the unit (e.g. `timestamp_ms`)" in str(exc.value)) == hinted


@pytest.mark.parametrize(("lines", "delimiter"), [
    (["ts,a;b,c", "0,x;y,1"], ","),  # a semicolon inside a comma-separated row
    (["0;12", "1;13"], ";"),
    (["0,5;12", "1,5;13"], ";"),  # a decimal comma: refused by its line, not read as the timestamp 0
    (["t|n", "0|1"], "|"),
    (["t\tn", "0\t1", "", "2\t1"], "\t"),  # blank lines say nothing
    (["t\tn", "0,1"], ","),  # one separator for the whole file, or the comma
    (["0", "1"], ","),
    ([], ","),
])
def test_a_trace_s_separator_is_the_one_its_lines_hold(lines: list[str], delimiter: str) -> None:
    assert trace_delimiter(lines) == delimiter


def test_a_unit_given_overrides_the_header_and_the_size(tmp_path: Path) -> None:
    """Relative milliseconds under a header that names no unit (or a JSON export's fixed key) read as
    seconds unless told."""
    path = tmp_path / "t.csv"
    path.write_text("timestamp_s\n0\n1500\n3000\n")
    reading = read_trace(path, unit="ms")
    assert reading.timestamps == pytest.approx([0.0, 1.5, 3.0])
    assert reading.stamps == "numbers in milliseconds (as given)"
    assert replay(path, unit="ms").duration_s == pytest.approx(3.0)
    path.write_text("0\n1200000\n3600000\n")
    with pytest.raises(UsageError, match=r"or name it \(--trace-unit ms\)"):
        read_trace(path)
    assert read_trace(path, unit="ms").timestamps[-1] == pytest.approx(3600.0)
    path.write_text("2023-11-16T17:15:46Z\n2023-11-16T17:15:48Z\n")
    assert read_trace(path, unit="ns").stamps == "ISO date-times"  # a unit is the numbers' only
    with pytest.raises(UsageError, match="a trace's timestamp unit must be one of s, ms, us, ns, got 'min'"):
        read_trace(path, unit="min")


@pytest.mark.parametrize(("header", "column"), [
    (["request_id", "TIMESTAMP", "tokens"], 1),
    (["id", "arrivalTime", "end_time"], 1),  # camelCase; the first time column
    (["model", "time (us)"], 1),
    (["runtime_ms", "ts"], 1),  # a run time is no time of day
    (["t", "n"], 0),  # none named: the first, as always
    (["TIMESTAMP", "ContextTokens"], 0),
])
def test_a_header_names_the_time_column(header: list[str], column: int) -> None:
    assert time_column(header) == column


def test_a_trace_whose_time_is_not_its_first_column_is_read_by_its_header(tmp_path: Path) -> None:
    """Read by its first column, a trace of request ids replayed one request a second, whatever its times."""
    path = tmp_path / "t.csv"
    path.write_text("request_id,arrival_time_ms,tokens\n7,1000,5\n8,2500,6\n9,4000\n")
    reading = read_trace(path)
    assert reading.timestamps == pytest.approx([0.0, 1.5, 3.0])
    assert reading.stamps == "numbers in milliseconds (the header's 'ms'), from the column 'arrival_time_ms'"
    path.write_text("request_id,timestamp\n7,0\n8\n")
    with pytest.raises(UsageError, match=r"t.csv:3: column 'timestamp' '' is not a timestamp"):
        read_trace(path)


def test_a_json_lines_trace_is_read_by_its_time_key(tmp_path: Path) -> None:
    """LLM serving traces ship as JSON Lines, one object a request (Mooncake's: relative milliseconds
    under `timestamp`), read like a CSV whose header is the first object's keys."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": 1, "timestamp": 0, "hash_ids": [1, 2]}\n\n{"id": 2, "timestamp": 1500}\n'
                    '{"timestamp": 3000, "id": 3}\n')
    assert read_trace(path).timestamps[-1] == pytest.approx(3000.0)  # as seconds, unless told
    reading = read_trace(path, unit="ms")
    assert reading.timestamps == pytest.approx([0.0, 1.5, 3.0])
    assert reading.stamps == "numbers in milliseconds (as given), from the column 'timestamp'"
    path.write_text('{"arrival_time": "2023-11-16T17:15:46Z"}\n{"arrival_time": "2023-11-16T17:15:48Z"}\n')
    assert read_trace(path).timestamps == pytest.approx([0.0, 2.0])


@pytest.mark.parametrize(("text", "message"), [
    ('{"timestamp": 0}\n[1, 2]\n', r"t.jsonl:2: not a JSON object, a list"),
    ('\n{}\n{"timestamp": 0}\n', r"t.jsonl:2: the first object has no keys, so no timestamp"),
    ('{"timestamp": 0}\n{"timestamp": \n', r"t.jsonl:2: not a JSON object \(Expecting value"),
    ('{"timestamp": 0}\n' + "[" * 100_000 + "\n", r"t.jsonl:2: not a JSON object"),  # past the recursion limit
    ('{"timestamp": 0}\n{"id": 2}\n', r"t.jsonl:2: first column '' is not a timestamp"),
    ('{"timestamp": 0}\n{"timestamp": true}\n', r"t.jsonl:2: first column 'true' is not a timestamp"),
    ('{"t": 0, "x": "' + "y" * 1_100_000 + '"}\n', r"t.jsonl:1: a line longer than 1,048,576 characters"),
])
def test_a_json_lines_trace_s_bad_line_is_refused_by_its_number(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        read_trace(path)


def test_a_decimal_comma_is_refused_by_its_line_not_read_as_a_whole_second(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("t;n\n0,5;12\n1,5;13\n")
    with pytest.raises(UsageError, match=r"t.csv:2: first column '0,5' is not a timestamp"):
        load_trace_timestamps(path)


def test_a_row_the_csv_module_cannot_read_is_refused_by_line(tmp_path: Path) -> None:
    """A field past the csv module's 128 KiB limit raised its own error, a traceback from the CLI."""
    path = tmp_path / "t.csv"
    path.write_text("t\n0\n" + "9" * 200_000 + "\n")
    with pytest.raises(UsageError, match=r"t.csv:3: not a CSV row the replay can read \(field larger than"):
        load_trace_timestamps(path)


@pytest.mark.parametrize("cell", ["inf", "INFINITY", "-inf", "nan"])
def test_a_timestamp_that_is_no_instant_is_refused_by_line(tmp_path: Path, cell: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"0\n{cell}\n1\n")
    with pytest.raises(UsageError, match=rf"t.csv:2: first column '{cell}' is not a timestamp"):
        load_trace_timestamps(path)


@pytest.mark.parametrize(("text", "time_scale", "target_rps", "message"), [
    ("0\n1e12\n", None, None, r"spans 1.16e\+07 days; a replay spans at most 31 days"),
    ("0\n86400\n", 100.0, None, r"spans 100 days at time-scale 100"),
    ("0\n86400\n", 1.0, 1e9, r"replayed at 1e\+09 req/s it would hold 8.64e\+13 arrivals"),
    ("t,r\n0,5\n0,6\n", None, None, r"spans 0 s; a replay needs a second or more between"),
    ("0\n1\n", 0.01, None, r"spans 0.01 s at time-scale 0.01; a replay needs"),
])
def test_a_trace_whose_span_or_size_cannot_be_replayed_is_refused_before_it_is_built(
        tmp_path: Path, text: str, time_scale: float | None, target_rps: float | None, message: str) -> None:
    """Two rows a trillion seconds apart, or a tiny trace rescaled to a billion req/s, would have the
    replay allocate terabytes; rows less than a second apart have no rate (every arrival would land in
    its first second). Each is refused with what it would have been."""
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(UsageError, match=r"t.csv: " + message):
        if time_scale is None:
            load_trace_timestamps(path)
        else:
            replay(path, time_scale=time_scale, target_rps=target_rps)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"time_scale": float("nan")}, "time-scale must be a finite number > 0, got nan"),
    ({"rate_scale": 0.0}, "rate-scale must be a finite number > 0, got 0"),
    ({"target_rps": float("inf")}, r"the target rate \(req/s\) must be a finite number > 0, got inf"),
])
def test_a_replay_scale_that_is_no_number_is_refused_by_name(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        replay(AZURE, **kwargs)


@given(st.lists(st.floats(min_value=-1e300, max_value=1e300), min_size=2, max_size=6),
       st.floats(allow_nan=True, allow_infinity=True), st.one_of(st.none(), st.floats()))
@settings(max_examples=60, deadline=None)
def test_a_replay_is_built_within_its_bounds_or_refused(tmp_path_factory: pytest.TempPathFactory,
                                                       times: list[float], time_scale: float,
                                                       target_rps: float | None) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "t.csv"
    path.write_text("\n".join(repr(t) for t in times))
    try:
        sc = replay(path, time_scale=time_scale, target_rps=target_rps)
    except UsageError:
        return
    assert sc.duration_s <= MAX_TRACE_SPAN_S + 1 and sc.timestamps is not None
    assert len(sc.timestamps) <= MAX_REPLAY_ARRIVALS


@given(st.lists(st.text(max_size=30), max_size=20))
@example(["INFINITY", "INFINITY"])  # found by this test: float() reads it, and inf - inf is NaN
@settings(max_examples=100, deadline=None)
def test_trace_parser_never_crashes(tmp_path_factory: pytest.TempPathFactory, cells: list[str]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "t.csv"
    path.write_text("\n".join(c.replace("\n", " ").replace("\r", " ") for c in cells))
    try:
        ts = load_trace_timestamps(path)
    except UsageError:
        return
    assert ts[0] == 0 and np.all(np.diff(ts) >= 0)


@given(st.lists(st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                                                                st.text(max_size=20)), max_size=4), max_size=12))
@settings(max_examples=100, deadline=None)
def test_json_lines_trace_parser_never_crashes(tmp_path_factory: pytest.TempPathFactory,
                                               objects: list[dict[str, object]]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    path.write_text("\n".join(["{}", *(json.dumps(o) for o in objects)]))
    try:
        ts = read_trace(path).timestamps
    except UsageError:
        return
    assert ts[0] == 0 and np.all(np.diff(ts) >= 0)
