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
from collections.abc import Iterator
from typing import Any

from exporters.errors import BadInput
from exporters.profiles.opclass import OpClass, classify_name, classify_op_type
from exporters.profiles.selftime import OpTotals, SelfTimeAggregator

READ_CHUNK = 1 << 20
MAX_EVENT_CHARS = 4 << 20
MAX_CLASS_CACHE = 50_000
_SKIP = re.compile(r"[\s,]*")
_WS = re.compile(r"\s*")
_DECODER = json.JSONDecoder()
_ID_TYPES = (int, str, float, type(None))


class _TextWindow:
    """A sliding window of decoded text over a byte stream."""

    def __init__(self, stream: io.BufferedReader) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self.text = ""
        self.pos = 0
        self.eof = False

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
        self.pos = 0
        return True

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
            # A number at the end of the window may continue in the next chunk.
            scalar_at_end = end == len(self.text) and not isinstance(obj, dict | list | str)
            if scalar_at_end and not self.eof and self.more():
                continue
            self.pos = end
            return obj


def iter_trace_events(stream: io.BufferedReader, metadata: dict[str, Any] | None = None) -> Iterator[Any]:
    """Yield each element of `traceEvents` (or of a bare top-level array) one at a time."""
    win = _TextWindow(stream)
    first = win.peek_char()
    if first == "[":
        win.pos += 1
        yield from _iter_array(win)
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
            yield from _iter_array(win)
        else:
            val = win.value()
            if metadata is not None and len(metadata) < 64:
                metadata[key] = val
        win.skip(_WS)
        if win.peek_char() == ",":
            win.pos += 1
    if not found:
        raise BadInput(400, "not a Chrome trace: no traceEvents array")


def _iter_array(win: _TextWindow) -> Iterator[Any]:
    while True:
        win.skip(_SKIP)
        if win.pos >= len(win.text):
            raise BadInput(400, "truncated trace JSON: traceEvents array never closes")
        if win.text[win.pos] == "]":
            win.pos += 1
            return
        yield win.value()


class ChromeOpMapper:
    """Turns trace events into (thread, start, duration, (op, class)) for the aggregator."""

    def __init__(self) -> None:
        self._cache: dict[tuple[Any, str], tuple[str, OpClass] | None] = {}
        self.tf_op_counts: dict[str, int] = {}

    def key(self, ev: dict[str, Any]) -> tuple[str, OpClass] | None:
        args = ev.get("args")
        long_name = args.get("long_name") if isinstance(args, dict) else None
        if isinstance(long_name, str):
            op_name, sep, op_type = long_name.rpartition(":")
            if not sep or not op_type:
                return None
            if len(self.tf_op_counts) < MAX_CLASS_CACHE or op_name in self.tf_op_counts:
                self.tf_op_counts[op_name] = self.tf_op_counts.get(op_name, 0) + 1
            return self._cached(("tf", op_type), op_type)
        name, cat = ev.get("name"), ev.get("cat")
        if not isinstance(name, str) or not isinstance(cat, str):
            return None
        return self._cached((cat, name), name)

    def _cached(self, cache_key: tuple[Any, str], name: str) -> tuple[str, OpClass] | None:
        hit = self._cache.get(cache_key, False)
        if hit is not False:
            return hit  # type: ignore[return-value]
        result = _classify(cache_key[0], name)
        if len(self._cache) < MAX_CLASS_CACHE:
            self._cache[cache_key] = result
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
    """Self time per op of a Chrome trace, the TF op-name counts and the top-level metadata."""
    agg = SelfTimeAggregator()
    mapper = ChromeOpMapper()
    metadata: dict[str, Any] = {}
    add = agg.add
    for ev in iter_trace_events(stream, metadata):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        key = mapper.key(ev)
        if key is None:
            continue
        ts, dur = ev.get("ts"), ev.get("dur")
        if not isinstance(ts, int | float) or not isinstance(dur, int | float):
            agg.totals.dropped_events += 1
            continue
        pid, tid = ev.get("pid"), ev.get("tid")
        thread = (pid, tid) if isinstance(pid, _ID_TYPES) and isinstance(tid, _ID_TYPES) else None
        add(thread, float(ts), float(dur), key)
    return agg.finish(), mapper.tf_op_counts, metadata
