"""Op self time from nested intervals: a per-thread stack, bounded buffering, bounded tables.

An op's self time is its duration minus the time covered by ops nested inside it on the
same thread (TF runs a function's ops inside `StatefulPartitionedCall`; PyTorch nests
`aten::` ops in `record_function` annotations). Profilers mostly write a thread's events in
start order, but not always: each thread keeps a small reorder buffer, sorted in chunks,
and events that arrive later than the processed horizon are processed where they land and
counted (`late_events`). Memory is bounded by the buffer per thread, the number of
threads and the number of distinct op types, never by the trace length.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from tidescale.exporters.profiles.opclass import OP_CLASSES, OpClass

REORDER_EVENTS = 4096          # events per thread sorted together before processing
MAX_THREADS = 4096
MAX_STACK_DEPTH = 512
MAX_DISTINCT_OPS = 5000
OVERFLOW_OP = "<more op types>"
_EPS_US = 1e-6


@dataclass
class OpTotals:
    """Self time per (op, op class), in microseconds, plus what had to be approximated."""

    self_us: dict[tuple[str, OpClass], float] = field(default_factory=dict)
    occurrences: dict[tuple[str, OpClass], int] = field(default_factory=dict)
    events: int = 0
    late_events: int = 0
    dropped_events: int = 0
    overflow_ops: int = 0

    def add(self, key: tuple[str, OpClass], self_us: float) -> None:
        if key not in self.self_us and len(self.self_us) >= MAX_DISTINCT_OPS:
            self.overflow_ops += 1
            key = (OVERFLOW_OP, key[1])
        self.self_us[key] = self.self_us.get(key, 0.0) + self_us
        self.occurrences[key] = self.occurrences.get(key, 0) + 1

    def merge(self, other: OpTotals) -> None:
        for key, us in other.self_us.items():
            self.add(key, us)
            self.occurrences[key] += other.occurrences[key] - 1
        self.events += other.events
        self.late_events += other.late_events
        self.dropped_events += other.dropped_events
        self.overflow_ops += other.overflow_ops

    def class_self_us(self) -> dict[OpClass, float]:
        out: dict[OpClass, float] = dict.fromkeys(OP_CLASSES, 0.0)
        for (_, op_class), us in self.self_us.items():
            out[op_class] += us
        return out


class _Thread:
    """One thread's reorder buffer and open-interval stack."""

    __slots__ = ("buffer", "horizon", "stack")

    def __init__(self) -> None:
        # Buffer entries: (start, -duration, key), so plain tuple order puts parents first.
        self.buffer: list[tuple[float, float, tuple[str, OpClass]]] = []
        # Stack entries: [end, start, key, child_time]
        self.stack: list[list] = []  # type: ignore[type-arg]
        self.horizon = float("-inf")


class SelfTimeAggregator:
    """Feed op intervals with `add(thread, start_us, dur_us, key)` (or straight into
    `buffer(thread)` for speed, then `drain_if_full`), then call `finish()`."""

    def __init__(self, reorder_events: int = REORDER_EVENTS) -> None:
        self._threads: dict[Hashable, _Thread] = {}
        self.reorder = reorder_events
        self.limit = 2 * reorder_events
        self.totals = OpTotals()

    def buffer(self, thread: Hashable) -> list[tuple[float, float, tuple[str, OpClass]]] | None:
        """The thread's reorder buffer (append `(start, -dur, key)`); None past the thread cap."""
        state = self._threads.get(thread)
        if state is None:
            if len(self._threads) >= MAX_THREADS:
                return None
            state = self._threads[thread] = _Thread()
        return state.buffer

    def drain_if_full(self, thread: Hashable) -> None:
        state = self._threads[thread]
        if len(state.buffer) >= self.limit:
            self._drain(state, keep=self.reorder)

    def add(self, thread: Hashable, start_us: float, dur_us: float, key: tuple[str, OpClass]) -> None:
        if dur_us < 0 or dur_us != dur_us or start_us != start_us:
            self.totals.dropped_events += 1
            return
        buf = self.buffer(thread)
        if buf is None:
            self.totals.dropped_events += 1
            return
        buf.append((start_us, -dur_us, key))
        if len(buf) >= self.limit:
            self.drain_if_full(thread)

    def _drain(self, state: _Thread, keep: int) -> None:
        buf = state.buffer
        buf.sort()
        cut = len(buf) - keep
        ready, state.buffer = buf[:cut], buf[cut:]
        stack = state.stack
        totals = self.totals
        totals.events += len(ready)
        self_us, occurrences = totals.self_us, totals.occurrences
        horizon = state.horizon
        late = 0
        for start, neg_dur, key in ready:
            if start < horizon - _EPS_US:
                late += 1
            else:
                horizon = start
            end = start - neg_dur
            while stack and stack[-1][0] <= start + _EPS_US:
                c_end, c_start, c_key, child = stack.pop()
                us = c_end - c_start - child
                if c_key in self_us:
                    self_us[c_key] += us if us > 0 else 0.0
                    occurrences[c_key] += 1
                else:
                    totals.add(c_key, max(0.0, us))
            if stack:
                parent = stack[-1]
                parent[3] += (end if end < parent[0] else parent[0]) - start
                if len(stack) >= MAX_STACK_DEPTH:
                    totals.dropped_events += 1
                    continue
            stack.append([end, start, key, 0.0])
        state.horizon = horizon
        totals.late_events += late

    def _close(self, entry: list) -> None:  # type: ignore[type-arg]
        end, start, key, child = entry
        self.totals.add(key, max(0.0, end - start - child))

    def finish(self) -> OpTotals:
        """Process what is buffered, close every open interval, return the totals."""
        for state in self._threads.values():
            self._drain(state, keep=0)
            while state.stack:
                self._close(state.stack.pop())
        self._threads.clear()
        return self.totals
