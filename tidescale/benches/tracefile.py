"""Per-request server-side timestamps from a finished Triton trace file (`mode=triton`, TIMESTAMPS).

The fidelity benchmark needs the times requests reached the scheduler (to replay them in the
simulator) and the server-side latency and queue time of each request (for P99 without client
noise). Unlike the exporter's tailer this reads a complete file at once into numpy arrays; what
counts as an entry, a header and a stamp is the exporter's rule (`exporters.tracefile`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tidescale.contracts import jsonio
from tidescale.contracts.errors import UsageError
from tidescale.exporters.tracefile import entry_id, entry_model, entry_stamps

NEEDED = ("REQUEST_START", "QUEUE_START", "COMPUTE_START", "REQUEST_END")
MAX_TRACE_BYTES = 256 << 20


@dataclass(frozen=True)
class TracedRequests:
    """Seconds; `queue_start` is relative to the first traced request's REQUEST_START."""

    queue_start: np.ndarray
    latency: np.ndarray  # REQUEST_END - REQUEST_START
    queue: np.ndarray  # COMPUTE_START - QUEUE_START

    def __len__(self) -> int:
        return len(self.latency)

    def after(self, skip: int) -> TracedRequests:
        """Without the first *skip* requests (warm-up), re-based at the first one kept."""
        qs = self.queue_start[skip:]
        base = float(qs[0]) if len(qs) else 0.0
        return TracedRequests(qs - base, self.latency[skip:], self.queue[skip:])


def stamps_by_request(texts: Iterable[str], *, skip_unreadable: bool = False
                      ) -> tuple[dict[Any, dict[str, int]], dict[Any, str]]:
    """Every request's stamps and model, by trace id, over *texts* (a trace file and its rotations,
    which share one server's ids); entries that are not an entry are skipped. A text that is no
    JSON array is a UsageError, or skipped with *skip_unreadable* (a file cut short as its server
    was stopped)."""
    stamps: dict[Any, dict[str, int]] = {}
    models: dict[Any, str] = {}
    for text in texts:
        try:
            entries = jsonio.loads(text)
        except ValueError as exc:
            if skip_unreadable:
                continue
            raise UsageError(f"trace file is not valid JSON: {exc}") from None
        if not isinstance(entries, list):
            if skip_unreadable:
                continue
            raise UsageError("a Triton trace file must hold a JSON array")
        for e in entries:
            ident = entry_id(e)
            if ident is None:
                continue
            header = entry_model(e)
            if header is not None:
                models[ident] = header[0]
            stamps.setdefault(ident, {}).update(entry_stamps(e))
    return stamps, models


def parse_trace(text: str, model: str | None = None) -> TracedRequests:
    """Requests with all four stamps, sorted by QUEUE_START; other entries are skipped."""
    stamps, models = stamps_by_request([text])
    rows = [tuple(st[n] for n in NEEDED) for key, st in stamps.items()
            if all(n in st for n in NEEDED) and (model is None or models.get(key) == model)]
    rows = [r for r in rows if r[0] <= r[1] <= r[2] <= r[3]]
    if not rows:
        return TracedRequests(np.empty(0), np.empty(0), np.empty(0))
    ordered = sorted(rows, key=lambda r: r[1])
    t0 = ordered[0][0]
    # Differences in Python ints first: stamps are uint64 nanoseconds, beyond int64 at the top.
    arr = np.asarray([[(v - t0) / 1e9 for v in r] for r in ordered], dtype=np.float64)
    return TracedRequests(arr[:, 1], arr[:, 3] - arr[:, 0], arr[:, 2] - arr[:, 1])


RECEIVED = ("HTTP_RECV_START", "GRPC_RECV_START")
SENT = ("HTTP_SEND_END", "GRPC_SEND_END")


@dataclass(frozen=True)
class ServerWindows:
    """Seconds per traced request, in the order the frontend received them: the exporter's request
    stage, and the frontend's whole window around it (which the request stage does not see)."""

    request: np.ndarray  # REQUEST_START -> REQUEST_END
    frontend: np.ndarray  # the frontend's receive start -> the later of REQUEST_END and its send end


def server_windows(texts: Iterable[str], skip: int = 0) -> ServerWindows:
    """The windows of every request with its frontend's stamps (an ensemble's children have none),
    without the first *skip* received (a warm-up); a text that is no JSON array is skipped."""
    stamps, _ = stamps_by_request(texts, skip_unreadable=True)
    rows: list[tuple[int, int, int]] = []
    for st in stamps.values():
        received = next((st[n] for n in RECEIVED if n in st), None)
        sent = next((st[n] for n in SENT if n in st), None)
        start, end = st.get("REQUEST_START"), st.get("REQUEST_END")
        if received is None or sent is None or start is None or end is None or not received <= start <= end:
            continue
        rows.append((received, end - start, max(end, sent) - received))
    kept = sorted(rows)[skip:]
    return ServerWindows(np.asarray([r[1] / 1e9 for r in kept], dtype=np.float64),
                         np.asarray([r[2] / 1e9 for r in kept], dtype=np.float64))


def read_text(path: str) -> str:
    with open(path, "rb") as fh:
        data = fh.read(MAX_TRACE_BYTES + 1)
    if len(data) > MAX_TRACE_BYTES:
        raise UsageError(f"trace file {path} is larger than {MAX_TRACE_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


def read_trace(path: str, model: str | None = None) -> TracedRequests:
    return parse_trace(read_text(path), model)
