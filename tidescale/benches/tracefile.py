"""Per-request server-side timestamps from a finished Triton trace file (`mode=triton`, TIMESTAMPS).

The fidelity benchmark needs the times requests reached the scheduler (to replay them in the
simulator) and the server-side latency and queue time of each request (for P99 without client
noise). Unlike the exporter's tailer this reads a complete file at once into numpy arrays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from tidescale.contracts.errors import UsageError

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


def parse_trace(text: str, model: str | None = None) -> TracedRequests:
    """Requests with all four stamps, sorted by QUEUE_START; other entries are skipped."""
    try:
        entries = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UsageError(f"trace file is not valid JSON: {exc}") from None
    if not isinstance(entries, list):
        raise UsageError("a Triton trace file must hold a JSON array")
    stamps: dict[Any, dict[str, int]] = {}
    models: dict[Any, str] = {}
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("id"), int | str) or isinstance(e.get("id"), bool):
            continue
        if isinstance(e.get("model_name"), str):
            models[e["id"]] = e["model_name"]
        ts = e.get("timestamps")
        if not isinstance(ts, list):
            continue
        into = stamps.setdefault(e["id"], {})
        for s in ts:
            if isinstance(s, dict) and isinstance(s.get("name"), str) and type(s.get("ns")) is int:
                into[s["name"]] = s["ns"]
    rows = [tuple(st[n] for n in NEEDED) for key, st in stamps.items()
            if all(n in st for n in NEEDED) and (model is None or models.get(key) == model)]
    rows = [r for r in rows if r[0] <= r[1] <= r[2] <= r[3]]
    if not rows:
        return TracedRequests(np.empty(0), np.empty(0), np.empty(0))
    arr = np.asarray(sorted(rows, key=lambda r: r[1]), dtype=np.int64)
    t0 = int(arr[0, 0])
    return TracedRequests((arr[:, 1] - t0) / 1e9, (arr[:, 3] - arr[:, 0]) / 1e9, (arr[:, 2] - arr[:, 1]) / 1e9)


def read_trace(path: str, model: str | None = None) -> TracedRequests:
    with open(path, "rb") as fh:
        data = fh.read(MAX_TRACE_BYTES + 1)
    if len(data) > MAX_TRACE_BYTES:
        raise UsageError(f"trace file {path} is larger than {MAX_TRACE_BYTES} bytes")
    return parse_trace(data.decode("utf-8", errors="replace"), model)
