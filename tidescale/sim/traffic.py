"""Traffic scenarios: request rate over time, Poisson arrivals, and replay of recorded traces.

One definition serves the real load generator (local fleet), the fast simulator and the
autoscaling benchmark, so every consumer sees identical traffic for a given seed.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, TextIO, get_args

import numpy as np

from tidescale.contracts.errors import UsageError

RateFn = Callable[[float], float]
MAX_TRACE_ROWS = 5_000_000
# A replay's time span and arrivals: a month, and ten times the rows a trace may hold. Beyond them a
# replay's per-second counts or its superposed copies would not fit in memory (two rows a trillion
# seconds apart, or a tiny trace rescaled to a billion req/s), so they are refused, not attempted.
MAX_TRACE_SPAN_S = 31 * 86_400.0
MAX_REPLAY_ARRIVALS = 10 * MAX_TRACE_ROWS


@dataclass(frozen=True)
class Scenario:
    """A named traffic shape: `rate(t)` requests/second for t in [0, duration_s)."""

    name: str
    duration_s: float
    rate: RateFn
    description: str = ""
    peak_rps: float = 0.0  # an upper bound of rate(t), for thinning
    # Replayed traces carry their own arrival times instead of a rate function.
    timestamps: np.ndarray | None = None
    # Arrivals drawn at a rate constant over each step of this many seconds, not by thinning: a real
    # day at hundreds of requests a second would call `rate` for each of 10^8 candidates.
    step_s: float | None = None
    # How a replayed trace's file was read (`TraceReading.text`): shown, so that a unit read wrongly is seen.
    reading: str = ""

    def arrivals(self, seed: int = 0) -> np.ndarray:
        """Arrival times (seconds, sorted) of one realisation of the scenario."""
        if self.timestamps is not None:
            return self.timestamps[self.timestamps < self.duration_s]
        if self.step_s is not None:
            return stepped_poisson_arrivals(self.rate, self.duration_s, self.step_s, seed)
        return poisson_arrivals(self.rate, self.duration_s, self.peak_rps or _peak(self.rate, self.duration_s), seed)

    def mean_rps(self) -> float:
        if self.timestamps is not None:
            return float(len(self.arrivals())) / self.duration_s if self.duration_s else 0.0
        ts = np.linspace(0.0, self.duration_s, 2001)
        return float(np.mean([self.rate(float(t)) for t in ts]))


def _peak(rate: RateFn, duration_s: float) -> float:
    ts = np.linspace(0.0, duration_s, 4001)
    return max(rate(float(t)) for t in ts) * 1.05 + 1e-9


def poisson_arrivals(rate: RateFn, duration_s: float, peak: float, seed: int) -> np.ndarray:
    """Non-homogeneous Poisson arrivals by thinning (Lewis & Shedler)."""
    rng = np.random.default_rng(seed)
    if peak <= 0 or duration_s <= 0:
        return np.empty(0)
    n = rng.poisson(peak * duration_s)
    cand = np.sort(rng.uniform(0.0, duration_s, n))
    rates = np.fromiter((rate(float(t)) for t in cand), dtype=float, count=len(cand))
    keep = rng.uniform(0.0, peak, len(cand)) < rates
    return cand[keep]


def stepped_poisson_arrivals(rate: RateFn, duration_s: float, step_s: float, seed: int) -> np.ndarray:
    """Poisson arrivals at `rate` of each step's middle over the step: one call of *rate* a step."""
    rng = np.random.default_rng(seed)
    starts = np.arange(0.0, duration_s, step_s)
    rates = np.fromiter((rate(float(t) + step_s / 2) for t in starts), dtype=float, count=len(starts))
    counts = rng.poisson(np.maximum(rates, 0.0) * step_s)
    times = np.repeat(starts, counts) + rng.uniform(0.0, step_s, int(counts.sum()))
    times.sort()
    return times[times < duration_s]


# --- built-in shapes ---------------------------------------------------------------------------

def steady(base_rps: float, duration_s: float) -> Scenario:
    return Scenario("steady", duration_s, lambda t: base_rps, "constant rate", base_rps)


def diurnal(base_rps: float, duration_s: float, period_s: float | None = None, amplitude: float = 0.5) -> Scenario:
    """A day compressed into *period_s*: trough (1-amplitude)·base, peak (1+amplitude)·base."""
    period = period_s or duration_s

    def rate(t: float) -> float:
        return base_rps * (1.0 - amplitude * math.cos(2 * math.pi * t / period))

    return Scenario("diurnal", duration_s, rate, "sinusoidal day", base_rps * (1 + amplitude))


def surge(base_rps: float, duration_s: float, factor: float = 3.0, at_s: float | None = None,
          ramp_s: float = 60.0, hold_s: float | None = None, name: str = "surge") -> Scenario:
    """Rate rises from base to factor·base within *ramp_s*, holds, then returns."""
    start = duration_s * 0.3 if at_s is None else at_s
    hold = duration_s * 0.3 if hold_s is None else hold_s

    def rate(t: float) -> float:
        if t < start:
            return base_rps
        if t < start + ramp_s:
            return base_rps * (1 + (factor - 1) * (t - start) / ramp_s)
        if t < start + ramp_s + hold:
            return base_rps * factor
        if t < start + 2 * ramp_s + hold:
            return base_rps * (factor - (factor - 1) * (t - start - ramp_s - hold) / ramp_s)
        return base_rps

    return Scenario(name, duration_s, rate, f"{factor:g}x surge within {ramp_s:g}s", base_rps * factor)


def flash_crowd(base_rps: float, duration_s: float, factor: float = 10.0, at_s: float | None = None,
                hold_s: float | None = None) -> Scenario:
    """A 10x step within seconds (ramp 5 s), held, then gone."""
    sc = surge(base_rps, duration_s, factor, at_s, ramp_s=5.0,
               hold_s=duration_s * 0.15 if hold_s is None else hold_s, name="flash-crowd")
    return Scenario("flash-crowd", sc.duration_s, sc.rate, f"{factor:g}x flash crowd", sc.peak_rps)


def lulls(base_rps: float, duration_s: float, depth: float = 0.35, lulls_s: tuple[float, ...] = (70.0, 85.0, 100.0,
          115.0, 130.0), back_s: float = 100.0, ramp_s: float = 5.0) -> Scenario:
    """The base rate with lulls at *depth* x it, each followed by the base rate back within *ramp_s*
    for *back_s*; the lulls take the lengths of *lulls_s* in turn. An autoscaler scales down about a
    down delay into a lull, and an HPA applies it up to a sync later: the lengths sweep the load's
    return across that moment, where a scale-down lands on a load the smaller fleet cannot carry
    (the demo's "beyond maxReplicas", decided a second before it began)."""
    if not 0 < depth < 1 or not lulls_s or min(lulls_s) <= ramp_s or back_s <= ramp_s:
        raise UsageError("lulls: need 0 < depth < 1, and lulls and returns longer than the ramp")
    starts, t, k = [], back_s, 0
    while t < duration_s:  # (lull start, return start)
        starts.append((t, t + lulls_s[k % len(lulls_s)]))
        t, k = starts[-1][1] + back_s, k + 1
    low = base_rps * depth

    def rate(t: float) -> float:
        for lull, back in starts:
            if lull <= t < back:
                return base_rps - (base_rps - low) * min(1.0, (t - lull) / ramp_s)
            if back <= t < back + ramp_s:
                return low + (base_rps - low) * (t - back) / ramp_s
        return base_rps

    lengths = "/".join(f"{x:g}" for x in lulls_s)
    return Scenario("lulls", duration_s, rate, f"lulls to {depth:g}x for {lengths} s in turn, the load back within "
                    f"{ramp_s:g} s for {back_s:g} s", base_rps)


DAY_S = 86400.0
# The peaks of `workday`: (hour it starts, factor on the day's curve, how long it holds in s). Logins
# as the offices open, and an evening batch.
WORKDAY_PEAKS = ((9.0, 2.5, 1200.0), (19.0, 2.0, 900.0))


def workday(base_rps: float, peaks: tuple[tuple[float, float, float], ...] = WORKDAY_PEAKS, shift_s: float = 0.0,
            ramp_s: float = 30.0) -> Scenario:
    """A real day (24 h, from midnight) as an inference service sees it: a night at 0.35x *base_rps*
    (04:00), an afternoon at 1.05x (16:00), and *peaks* at the same hours every day that rise within
    *ramp_s*, faster than a GPU replica starts; *shift_s* moves the peaks (the day before, a little
    later). What a seasonal forecast is for: the peaks are known, not detectable in time."""
    if base_rps <= 0 or ramp_s <= 0 or any(not (0 <= h < 24 and f >= 1 and hold > 0) for h, f, hold in peaks):
        raise UsageError("workday: need a base rate > 0, a ramp > 0 and peaks (hour 0-24, factor >= 1, hold > 0)")

    def bump(t: float) -> float:
        out = 1.0
        for hour, factor, hold in peaks:
            x = t - (hour * 3600 + shift_s)
            if 0 <= x < 2 * ramp_s + hold:
                up = min(1.0, x / ramp_s, (2 * ramp_s + hold - x) / ramp_s)
                out = max(out, 1 + (factor - 1) * up)
        return out

    def rate(t: float) -> float:
        return base_rps * (0.7 - 0.35 * math.cos(2 * math.pi * (t - 4 * 3600) / DAY_S)) * bump(t)

    hours = " and ".join(f"{f:g}x at {int(h):02d}:{int(h % 1 * 60):02d} for {hold / 60:g} min" for h, f, hold in peaks)
    return Scenario("workday", DAY_S, rate, f"a real 24 h day (night 0.35x, afternoon 1.05x) with peaks {hours}, "
                    f"each within {ramp_s:g} s", base_rps * 1.05 * max((f for _, f, _ in peaks), default=1.0),
                    step_s=1.0)


def weekend(base_rps: float, level: float = 0.5) -> Scenario:
    """A weekend day beside `workday(base_rps)`: the same shape at *level* x its rate, without the peaks."""
    day = workday(base_rps * level, peaks=())
    return dataclasses.replace(day, name="weekend", description=f"a weekend day: a workday's shape at {level:g}x "
                               "its rate, without its peaks")


def diurnal_surge(base_rps: float, duration_s: float, factor: float = 3.0) -> Scenario:
    """The demo default: a diurnal shape with a 3x surge inside 60 s at 40 % of the run."""
    day = diurnal(base_rps, duration_s, amplitude=0.3)
    ramp = min(60.0, duration_s * 0.1)
    bump = surge(1.0, duration_s, factor, at_s=duration_s * 0.4, ramp_s=ramp, hold_s=duration_s * 0.2)

    def rate(t: float) -> float:
        return day.rate(t) * bump.rate(t)

    return Scenario("diurnal-surge", duration_s, rate, "diurnal day with a 3x surge", day.peak_rps * factor)


SCENARIOS: dict[str, Callable[[float, float], Scenario]] = {
    "steady": steady,
    "diurnal": diurnal,
    "surge": surge,
    "flash-crowd": flash_crowd,
    "diurnal-surge": diurnal_surge,
}


def scenario(name: str, base_rps: float, duration_s: float) -> Scenario:
    """A built-in scenario by name, or a UsageError listing the known ones."""
    if base_rps <= 0:
        raise UsageError(f"base rate must be > 0 req/s, got {base_rps}")
    if duration_s <= 0:
        raise UsageError(f"duration must be > 0 s, got {duration_s}")
    try:
        factory = SCENARIOS[name]
    except KeyError:
        raise UsageError(f"unknown scenario {name!r}; choose one of {', '.join(sorted(SCENARIOS))}") from None
    return factory(base_rps, duration_s)


# --- trace replay --------------------------------------------------------------------------------

def _parse_timestamp(raw: str) -> tuple[float, bool]:
    """(the instant, whether it was written as a number). An ISO date-time without an offset is read as
    UTC: as local time, a trace that crosses a change of daylight saving time would jump an hour."""
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:  # "inf" and "nan" parse as floats but are no instant: the replay would turn them into NaN gaps
        if not math.isfinite(seconds):
            raise ValueError(f"{raw!r} is not a finite number of seconds")
        return seconds, True
    # Python 3.11 reads ISO 8601 whole: "2023-11-16 18:15:46.6805900", "…T18:15:46.5+01:00", "…Z".
    at = datetime.fromisoformat(raw)
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp(), False


# A header's last word for its column's unit (`timestamp_ms`, `time (us)`), in seconds.
HEADER_UNITS = {"s": 1.0, "sec": 1.0, "secs": 1.0, "seconds": 1.0, "ms": 1e-3, "msec": 1e-3, "millis": 1e-3,
                "milliseconds": 1e-3, "us": 1e-6, "µs": 1e-6, "micros": 1e-6, "microseconds": 1e-6,
                "ns": 1e-9, "nanos": 1e-9, "nanoseconds": 1e-9}
# Epoch seconds reach 1e11 only in the year 5138, while epoch milliseconds passed it in 1973: a number this
# large is a count of milli-, micro- or nanoseconds since the epoch, told apart by its size.
EPOCH_UNITS = ((1e17, 1e-9), (1e14, 1e-6), (1e11, 1e-3))


def trace_unit(header: str | None, first: float) -> tuple[float, str]:
    """Seconds per unit of a trace's numeric timestamps, and why: the unit its header's last word names,
    else the epoch unit their size gives, else seconds. Replayed as seconds, a trace stamped in epoch
    milliseconds spans a thousand times its length and is refused as too long, or replays an hour as
    42 days. Only the last word: in `us_east_time` "us" is no unit."""
    words = [w for w in re.split(r"[^a-zµ]+", (header or "").lower()) if w]
    if words and words[-1] in HEADER_UNITS:
        return HEADER_UNITS[words[-1]], f"the header's {words[-1]!r}"
    for floor, unit in EPOCH_UNITS:
        if abs(first) >= floor:
            return unit, f"their size ({first:.4g}: since the epoch)"
    return 1.0, "no unit in the header's last word"


UNIT_NAMES = {1.0: "seconds", 1e-3: "milliseconds", 1e-6: "microseconds", 1e-9: "nanoseconds"}
# The units a replay may be told its numeric timestamps are in, whatever the header or their size say
# (a type too, so that settings that take one are checked against the same names).
TraceUnit = Literal["s", "ms", "us", "ns"]
TRACE_UNITS: dict[str, float] = dict(zip(get_args(TraceUnit), (1.0, 1e-3, 1e-6, 1e-9), strict=True))


def check_trace_unit(unit: str | None, what: str = "a trace's timestamp unit") -> None:
    if unit is not None and unit not in TRACE_UNITS:
        raise UsageError(f"{what} must be one of {', '.join(TRACE_UNITS)}, got {unit!r}")


@dataclass(frozen=True)
class TraceReading:
    """A trace's arrivals, in seconds since its first, and how its timestamps were read."""

    timestamps: np.ndarray
    stamps: str  # "ISO date-times", or "numbers in milliseconds (the header's 'ms')"

    @property
    def text(self) -> str:
        """One line for a bench's progress and page: a unit read wrongly shows as a span no one recorded."""
        span = float(self.timestamps[-1])
        return f"{len(self.timestamps):,} requests over {span:,.0f} s ({span / 3600:.3g} h); timestamps read as " \
            f"{self.stamps}"


# Separators other than the comma that exports use: tab-separated files, and spreadsheets in locales
# whose decimal mark is the comma (`0,5;12`).
OTHER_DELIMITERS = ("\t", ";", "|")
DELIMITER_SAMPLE_LINES, DELIMITER_SAMPLE_CHARS = 20, 64 * 1024


def trace_delimiter(lines: Iterable[str]) -> str:
    """The field separator of a trace's first lines: one of `OTHER_DELIMITERS` that every line holds at
    least as often as a comma, else the comma. Read with commas, a tab-separated trace's whole row was
    its first column, and no row a timestamp."""
    sample = [line for line in lines if line.strip()]
    for delimiter in OTHER_DELIMITERS:
        if sample and all(line.count(delimiter) >= max(1, line.count(",")) for line in sample):
            return delimiter
    return ","


def _first_lines(fh: TextIO) -> list[str]:
    """A file's first lines, from at most `DELIMITER_SAMPLE_CHARS` of it (a 1 GB line is not read whole;
    a line the sample cuts is left out unless it is the only one), the file rewound."""
    text = fh.read(DELIMITER_SAMPLE_CHARS)
    fh.seek(0)
    lines = text.splitlines()
    if len(text) == DELIMITER_SAMPLE_CHARS and len(lines) > 1:
        lines.pop()
    return lines[:DELIMITER_SAMPLE_LINES]


# Words of a header that name its time column: `TIMESTAMP`, `arrival_time_ms`, `arrivalTime`, `ts`.
TIME_WORDS = frozenset({"timestamp", "time", "ts", "arrival", "date", "datetime"})


def time_column(header: Sequence[str]) -> int:
    """The column a header names as the time: the first with a word of `TIME_WORDS` (camelCase split),
    else the first. A trace whose first column is a request id read the ids as seconds, one a second."""
    for i, name in enumerate(header):
        words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).lower())
        if TIME_WORDS & set(words):
            return i
    return 0


def _is_timestamp(cell: str) -> bool:
    try:
        _parse_timestamp(cell)
    except ValueError:
        return False
    return True


def _csv_rows(path: Path, fh: Iterable[str], delimiter: str = ",") -> Iterator[tuple[int, list[str]]]:
    """The rows of a CSV that hold a value, by line; a row the csv module cannot read (a field past its
    128 KiB limit) is a UsageError naming its line."""
    reader = csv.reader(fh, delimiter=delimiter)
    try:
        for row in reader:
            if any(cell.strip() for cell in row):  # a blank line, or one of empty fields, says nothing
                yield reader.line_num, row
    except csv.Error as exc:
        raise UsageError(f"{path}:{reader.line_num}: not a CSV row the replay can read ({exc})") from None


MAX_JSON_LINE_CHARS = 1 << 20


def _jsonl_rows(path: Path, fh: TextIO) -> Iterator[tuple[int, list[str]]]:
    """A JSON Lines trace (one object a request, as LLM serving traces ship) as a CSV's rows: its first
    object's keys the header, then each object's values under them. A line that is no JSON object, is
    nested past Python's recursion limit or is longer than `MAX_JSON_LINE_CHARS` is a UsageError naming it."""
    keys: list[str] = []
    for lineno, line in enumerate(iter(lambda: fh.readline(MAX_JSON_LINE_CHARS + 1), ""), start=1):
        if len(line.rstrip("\r\n")) > MAX_JSON_LINE_CHARS:
            raise UsageError(f"{path}:{lineno}: a line longer than {MAX_JSON_LINE_CHARS:,} characters")
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise UsageError(f"{path}:{lineno}: not a JSON object ({str(exc)[:80] or type(exc).__name__})") from None
        if not isinstance(obj, dict):
            raise UsageError(f"{path}:{lineno}: not a JSON object, a {type(obj).__name__}")
        if not keys:
            if not obj:
                raise UsageError(f"{path}:{lineno}: the first object has no keys, so no timestamp")
            keys = [str(k) for k in obj]
            yield 0, keys
        yield lineno, [v if isinstance(v, str) else "" if v is None else json.dumps(v) for v in
                       (obj.get(k) for k in keys)]


def load_trace_timestamps(path: Path, max_rows: int = MAX_TRACE_ROWS) -> np.ndarray:
    """Seconds since the first request (`read_trace`)."""
    return read_trace(path, max_rows).timestamps


def read_trace(path: Path, max_rows: int = MAX_TRACE_ROWS, unit: str | None = None) -> TraceReading:
    """Seconds since the first request, from a CSV (or JSON Lines, `_jsonl_rows`) with a timestamp per
    request: an ISO date-time, or a number of seconds, or of the unit the header names or the epoch's
    size gives (`trace_unit`). The timestamp is the first column, or the one a header names as the
    time (`time_column`). A *unit* (`TRACE_UNITS`) given is the numbers' unit, whatever the header or
    their size say.

    A header row is allowed; any other unparsable row is a UsageError naming its line.
    """
    check_trace_unit(unit)
    if not path.is_file():
        raise UsageError(f"trace file {path} does not exist")
    out: list[float] = []
    header: list[str] = []
    column = 0
    numbers = True  # every timestamp a number (of the unit `trace_unit` finds), none a date-time
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as fh:  # a spreadsheet's BOM is no header
        first = _first_lines(fh)
        json_lines = next((line for line in first if line.strip()), "").lstrip().startswith("{")
        rows = _jsonl_rows(path, fh) if json_lines else _csv_rows(path, fh, trace_delimiter(first))
        for lineno, row in rows:
            if not header and not out and not _is_timestamp(row[0]):
                header, column = row, time_column(row)
                continue
            cell = row[column] if column < len(row) else ""
            try:
                at, number = _parse_timestamp(cell)
            except ValueError:
                name = "first column" if column == 0 else f"column {header[column]!r}"
                raise UsageError(f"{path}:{lineno}: {name} {cell!r} is not a timestamp "
                                 "(ISO date-time or seconds)") from None
            out.append(at)
            numbers &= number
            if len(out) > max_rows:
                raise UsageError(f"{path}: more than {max_rows} rows")
    if len(out) < 2:
        raise UsageError(f"{path}: needs at least two timestamped rows")
    ts = np.sort(np.asarray(out, dtype=float))
    unit_s, why = (1.0, "") if not numbers else (TRACE_UNITS[unit], "as given") if unit else \
        trace_unit(header[column] if header else None, float(ts[0]))
    ts = (ts - ts[0]) * unit_s
    stamps = (f"numbers in {UNIT_NAMES[unit_s]} ({why})" if numbers else "ISO date-times") + (
        f", from the column {header[column]!r}" if column else "")
    check_span(path, float(ts[-1]), hint="" if not numbers or unit or why.startswith("the header") else
               "; if the timestamps count milliseconds (or µs, ns) from the trace's start, end their column's "
               "header with the unit (e.g. `timestamp_ms`) or name it (--trace-unit ms)")
    return TraceReading(ts, stamps)


def check_span(path: Path, span_s: float, how: str = "", hint: str = "") -> None:
    """A replay's per-second counts are held whole: its span bounds their memory (`MAX_TRACE_SPAN_S`).
    A span under a second has no rate to replay: its arrivals would all land in the replay's first second.
    *hint*: what to do when the span is too long because the unit was guessed."""
    if span_s < 1.0:
        raise UsageError(f"{path}: spans {span_s:.3g} s{how}; a replay needs a second or more between its first "
                         "and last rows")
    if not span_s <= MAX_TRACE_SPAN_S:
        raise UsageError(f"{path}: spans {span_s / 86_400:.3g} days{how}; a replay spans at most "
                         f"{MAX_TRACE_SPAN_S / 86_400:g} days{hint}")


def check_positive(value: float, what: str) -> None:
    """A scale or rate a replay multiplies by: NaN, infinities and non-positive numbers are refused."""
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{what} must be a finite number > 0, got {value:g}")


def replay(path: Path, time_scale: float = 1.0, rate_scale: float = 1.0, target_rps: float | None = None,
           seed: int = 0, unit: str | None = None) -> Scenario:
    """A scenario replaying a recorded trace.

    time_scale < 1 compresses time (0.1 plays an hour in 6 minutes, keeping the rate shape).
    rate_scale multiplies the request rate by thinning (< 1) or by superposing jittered copies (> 1);
    target_rps, when given, picks rate_scale so the mean rate equals it; unit, the timestamps' (`read_trace`).
    """
    check_positive(time_scale, "time-scale")
    check_positive(rate_scale, "rate-scale")
    if target_rps is not None:
        check_positive(target_rps, "the target rate (req/s)")
    reading = read_trace(path, unit=unit)
    ts = reading.timestamps * time_scale
    check_span(path, float(ts[-1]), f" at time-scale {time_scale:g}")
    duration = float(ts[-1]) + 1e-6
    if target_rps is not None:
        rate_scale = target_rps / (len(ts) / duration)
    if rate_scale * len(ts) > MAX_REPLAY_ARRIVALS:
        raise UsageError(f"{path}: replayed at {len(ts) * rate_scale / duration:.4g} req/s it would hold "
                         f"{rate_scale * len(ts):.3g} arrivals; at most {MAX_REPLAY_ARRIVALS:,}")
    rng = np.random.default_rng(seed)
    whole, frac = int(rate_scale), rate_scale - int(rate_scale)
    parts = []
    # Copies are jittered by an exponential gap so they stay Poisson-like, not lock-step.
    mean_gap = duration / len(ts)
    for k in range(whole):
        parts.append(ts if k == 0 else ts + rng.exponential(mean_gap, len(ts)))
    if frac > 0:
        parts.append(ts[rng.uniform(size=len(ts)) < frac] + (rng.exponential(mean_gap, 1)[0] if whole else 0.0))
    arr = np.sort(np.concatenate(parts)) if parts else np.empty(0)
    arr = arr[arr < duration]
    counts_per_s = np.bincount(arr.astype(int), minlength=int(duration) + 1)

    def rate(t: float) -> float:
        i = int(t)
        return float(counts_per_s[i]) if 0 <= i < len(counts_per_s) else 0.0

    return Scenario(f"trace:{path.name}", duration, rate, f"replay of {path.name}", float(counts_per_s.max()),
                    timestamps=arr, reading=reading.text)
