"""Chrome trace JSON (TF trace viewer, torch.profiler) read as a stream of events.

The file is one JSON object (or a bare array) whose `traceEvents` array can hold millions
of events. Instead of `json.load` (the whole document in memory, several times its size in
Python objects) the reader decodes one event at a time with the C decoder
(`JSONDecoder.raw_decode`) from a sliding text buffer, so memory is one read chunk plus
the largest event. Other top-level keys are small and decoded whole (bounded).

Op recovery (docs/profiles.md): TF events carry `args.long_name = "<op_name>:<op_type>"`
(type after the last colon; runtime events such as `ExecutorState::Process` have no
long_name and are not ops); torch.profiler writes `cat: cpu_op` (`aten::*` names),
`user_annotation` (record_function, classified by name), `kernel`, `gpu_memcpy`,
`gpu_memset`.
"""

from __future__ import annotations

import codecs
import io
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles.opclass import OpClass, classify_name, classify_op_type
from tidescale.exporters.profiles.selftime import OpTotals, SelfTimeAggregator

READ_CHUNK = 1 << 20
MAX_EVENT_CHARS = 4 << 20
# Work is bounded by trace events, not bytes: at most this many elements in traceEvents, and
# elements that are no trace event (not an object with "ph": padding such as `0,` or `{},`,
# which inflates 1000x from gzip and decodes one at a time) at most JUNK_ALLOWANCE more than
# the real events.
MAX_TRACE_EVENTS = 20_000_000
JUNK_ALLOWANCE = 10_000
MAX_CLASS_CACHE = 50_000
BOUNDARY_SEARCH_CHARS = 1 << 16
# `},{"` — a `{"` cannot occur inside a JSON string (quotes there are escaped), so a match is
# never inside a string; inside a nested array the segment does not decode and is retried.
_BOUNDARY = re.compile(r'\}\s*,\s*(?=\{\s*")')
# Flat `args` objects without a TF `long_name` are not needed for op shares; emptying them
# before decoding halves the work on torch.profiler traces (their args hold shapes and inputs).
_ARGS = re.compile(r'"args":\s*\{(?![^{}]*"long_name")[^{}]*\}')
_EMPTY_ARGS = '"args":{}'

_SKIP = re.compile(r"[\s,]*")
_WS = re.compile(r"\s*")
_DECODER = json.JSONDecoder()
_loads: Callable[[str], Any]
try:  # orjson decodes batches ~1.4x faster; the stdlib decoder is the fallback
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    _loads = json.loads
_NUMBERS = (int, float)
# Timestamps and durations at or beyond 1e18 µs (31,700 years) are refused: past it a sum of
# event durations can overflow to infinity and every share would read NaN.
MAX_TIME_US = 1e18


class _TextWindow:
    """A sliding window of decoded text over a byte stream."""

    def __init__(self, stream: io.BufferedReader) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self.text = ""
        self.pos = 0
        self.eof = False
        self.strip_args = False
        # After a batch fails to decode, the rest of that window goes event by event, so a
        # corrupt region costs one failed batch, never one per event (quadratic).
        self.slow_until = -1

    def more(self) -> bool:
        """Append a chunk (dropping consumed text); False at end of input."""
        if self.eof:
            return False
        data = self._stream.read(READ_CHUNK)
        try:
            chunk = self._decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise BadInput(400, f"profile is not UTF-8 JSON: {exc.reason}") from None
        if not data:
            self.eof = True
        if len(self.text) - self.pos > MAX_EVENT_CHARS:
            raise BadInput(413, f"one JSON value in the trace is longer than {MAX_EVENT_CHARS} characters")
        self.text = self.text[self.pos:] + chunk
        self.slow_until -= self.pos
        self.pos = 0
        return True

    def ensure(self, chars: int) -> None:
        """Read until the window holds *chars* unconsumed characters (or the input ends)."""
        while len(self.text) - self.pos < chars and self.more():
            pass

    def skip(self, pattern: re.Pattern[str]) -> None:
        while True:
            m = pattern.match(self.text, self.pos)
            assert m is not None
            self.pos = m.end()
            if self.pos < len(self.text) or not self.more():
                return

    def peek_char(self) -> str:
        self.skip(_WS)
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str) -> None:
        if self.peek_char() != char:
            found = self.text[self.pos:self.pos + 20] or "end of input"
            raise BadInput(400, f"malformed trace JSON: expected {char!r}, found {found!r}")
        self.pos += 1

    def value(self) -> Any:
        """Decode the next JSON value, reading more text until it is complete."""
        self.skip(_WS)
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if self.more():
                    continue
                raise BadInput(400, f"truncated or malformed trace JSON: {exc.msg}") from None
            except RecursionError:
                raise BadInput(400, "trace JSON nests arrays or objects too deeply to decode") from None
            except ValueError as exc:  # e.g. an integer past the interpreter's digit limit
                raise BadInput(400, f"malformed trace JSON: {exc}"[:200]) from None
            # A number at the end of the window may continue in the next chunk.
            scalar_at_end = end == len(self.text) and not isinstance(obj, dict | list | str)
            if scalar_at_end and not self.eof and self.more():
                continue
            self.pos = end
            return obj


def iter_trace_events(stream: io.BufferedReader, metadata: dict[str, Any] | None = None) -> Iterator[Any]:
    """Yield each element of `traceEvents` (or of a bare top-level array) one at a time."""
    for batch in iter_trace_event_batches(stream, metadata):
        yield from batch


def iter_trace_event_batches(stream: io.BufferedReader, metadata: dict[str, Any] | None = None,
                             keep_args: bool = True) -> Iterator[list[Any]]:
    """The elements of `traceEvents` (or of a bare top-level array) in decoded batches.

    With `keep_args=False`, flat `args` objects without a `long_name` may come back empty
    (all op shares need), which halves decoding of torch.profiler traces.
    """
    win = _TextWindow(stream)
    win.strip_args = not keep_args
    first = win.peek_char()
    if first == "[":
        win.pos += 1
        yield from _iter_batches(win)
        return
    win.expect("{")
    found = False
    while True:
        if win.peek_char() == "}":
            break
        key = win.value()
        if not isinstance(key, str):
            raise BadInput(400, "malformed trace JSON: object key is not a string")
        win.expect(":")
        if key == "traceEvents":
            win.expect("[")
            found = True
            yield from _iter_batches(win)
        else:
            val = win.value()
            if metadata is not None and len(metadata) < 64:
                metadata[key] = val
        win.skip(_WS)
        if win.peek_char() == ",":
            win.pos += 1
    if not found:
        raise BadInput(400, "not a Chrome trace: no traceEvents array")


def _iter_batches(win: _TextWindow) -> Iterator[list[Any]]:
    """The array's elements in batches: every complete event in the window decoded at once."""
    while True:
        win.skip(_SKIP)
        if win.pos >= len(win.text):
            raise BadInput(400, "truncated trace JSON: traceEvents array never closes")
        if win.text[win.pos] == "]":
            win.pos += 1
            return
        win.ensure(READ_CHUNK)
        batch = None
        if win.pos >= win.slow_until:
            batch = _batch(win)
            if batch is None:
                win.slow_until = len(win.text)
        yield batch or [win.value()]


def _batch(win: _TextWindow) -> list[Any] | None:
    """Decode the window's complete events with one C call, or None when no safe cut is found.

    A cut is made at the last `},{"` (whitespace allowed) in the window: never inside a
    string, and a cut inside a nested array leaves the segment unbalanced, so the segment
    decodes only when the cut is a real event boundary; otherwise the previous candidate is
    tried, then the one-event slow path.
    """
    text, pos = win.text, win.pos
    if text[pos] != "{":
        return None
    hi = len(text)
    for _ in range(3):
        last = None
        for last in _BOUNDARY.finditer(text, max(pos, hi - BOUNDARY_SEARCH_CHARS), hi):  # noqa: B007
            pass
        if last is None:
            return None
        cut = last.start() + 1
        segment = text[pos:cut]
        events = _decode_segment(segment, win.strip_args)
        if events is None:
            hi = last.start()
            continue
        win.pos = cut
        return events
    return None


def _decode_segment(segment: str, strip_args: bool) -> list[Any] | None:
    """The events of `segment` (args emptied if asked), or None if it is not a JSON sequence.

    If emptying args broke the JSON (a brace inside an args string), the segment is decoded
    as written.
    """
    if strip_args:
        try:
            return _loads("[" + _ARGS.sub(_EMPTY_ARGS, segment) + "]")  # type: ignore[no-any-return]
        except (ValueError, RecursionError):
            pass
    try:
        return _loads("[" + segment + "]")  # type: ignore[no-any-return]
    except (ValueError, RecursionError):  # the one-event path names the problem
        return None


def _check_work(seen: int, junk: int) -> None:
    """BadInput once the trace's work outgrows its events (checked once per decoded batch)."""
    if seen > MAX_TRACE_EVENTS:
        raise BadInput(413, f"trace holds more than {MAX_TRACE_EVENTS} events; profile a shorter window")
    if junk > JUNK_ALLOWANCE + (seen - junk):
        raise BadInput(400, f"traceEvents holds {junk} elements that are not trace events (objects with "
                            f"\"ph\") against {seen - junk} that are: padded or not a Chrome trace")


def _check_time(ts: Any, dur: Any) -> None:
    """BadInput for a timestamp or duration no float sum survives (NaN, infinity, 1e308, 400 digits).

    Missing, non-numeric and negative values only drop their event (counted in a warning).
    """
    for what, value in (("dur", dur), ("ts", ts)):
        if value.__class__ in _NUMBERS and not abs(value) < MAX_TIME_US:
            raise BadInput(400, f"trace event {what} {show_number(value)} is not a finite number below "
                                f"{MAX_TIME_US:g} µs")


def show_number(value: float) -> str:
    """*value* for an error message: a 400-digit integer as its first digits and its length."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}… ({len(text)} digits)"


class ChromeOpMapper:
    """Turns trace events into (thread, start, duration, (op, class)) for the aggregator."""

    def __init__(self) -> None:
        self.cache: dict[tuple[Any, Any], tuple[str, OpClass] | None] = {}
        self.tf_op_counts: dict[str, int] = {}

    def tf_key(self, long_name: Any) -> tuple[str, OpClass] | None:
        """A TF op from `args.long_name = "<op_name>:<op_type>"` (counted per op name)."""
        if not isinstance(long_name, str):
            return None
        op_name, sep, op_type = long_name.rpartition(":")
        if not sep or not op_type:
            return None
        if len(self.tf_op_counts) < MAX_CLASS_CACHE or op_name in self.tf_op_counts:
            self.tf_op_counts[op_name] = self.tf_op_counts.get(op_name, 0) + 1
        return self._cached(("tf", op_type), op_type)

    def key(self, ev: dict[str, Any]) -> tuple[str, OpClass] | None:
        args = ev.get("args")
        if isinstance(args, dict) and "long_name" in args:
            return self.tf_key(args["long_name"])
        name, cat = ev.get("name"), ev.get("cat")
        if not isinstance(name, str) or not isinstance(cat, str):
            return None
        return self._cached((cat, name), name)

    def _cached(self, cache_key: tuple[Any, str], name: str) -> tuple[str, OpClass] | None:
        hit = self.cache.get(cache_key, False)
        if hit is not False:
            return hit  # type: ignore[return-value]
        result = _classify(cache_key[0], name)
        if len(self.cache) < MAX_CLASS_CACHE:
            self.cache[cache_key] = result
        return result


def _classify(cat: Any, name: str) -> tuple[str, OpClass] | None:
    if cat == "tf" or cat == "cpu_op" or cat == "kernel":
        return (name, classify_op_type(name))
    if cat == "user_annotation":
        return (name, classify_name(name))
    if cat in ("gpu_memcpy", "gpu_memset"):
        return (name, "memcpy")
    return None


def chrome_op_totals(stream: io.BufferedReader) -> tuple[OpTotals, dict[str, int], dict[str, Any]]:
    """Self time per op of a Chrome trace, the TF op-name counts and the top-level metadata.

    The inner loop is the hot path of a 1 GB trace, so it is written flat: the class of a
    (cat, name) pair is cached, events go straight into the thread's reorder buffer.
    """
    agg = SelfTimeAggregator()
    mapper = ChromeOpMapper()
    metadata: dict[str, Any] = {}
    totals = agg.totals
    cache = mapper.cache
    buffers: dict[Any, list[Any] | None] = {}
    limit = agg.limit
    dropped = 0
    seen = junk = 0
    for batch in iter_trace_event_batches(stream, metadata, keep_args=False):
        seen += len(batch)
        _check_work(seen, junk)
        for ev in batch:
            if ev.__class__ is not dict:
                junk += 1
                continue
            ph = ev.get("ph")
            if ph != "X":
                if ph is None:
                    junk += 1
                continue
            args = ev.get("args")
            if args.__class__ is dict and "long_name" in args:
                key = mapper.tf_key(args["long_name"])
            else:
                try:
                    key = cache[(ev.get("cat"), ev.get("name"))]
                except KeyError:
                    key = mapper.key(ev)
                except TypeError:  # unhashable cat/name: not an op we know
                    continue
            if key is None:
                continue
            ts, dur = ev.get("ts"), ev.get("dur")
            if (ts.__class__ not in _NUMBERS or dur.__class__ not in _NUMBERS or not 0 <= dur < MAX_TIME_US
                    or not -MAX_TIME_US < ts < MAX_TIME_US):
                _check_time(ts, dur)
                dropped += 1
                continue
            thread = (ev.get("pid"), ev.get("tid"))
            try:
                buf = buffers[thread]
            except KeyError:
                buf = buffers[thread] = agg.buffer(thread)
            except TypeError:  # unhashable pid/tid
                dropped += 1
                continue
            if buf is None:
                dropped += 1
                continue
            buf.append((ts, -dur, key))
            if len(buf) >= limit:
                agg.drain_if_full(thread)
                buffers[thread] = agg.buffer(thread)
    _check_work(seen, junk)
    totals.dropped_events += dropped
    return agg.finish(), mapper.tf_op_counts, metadata
