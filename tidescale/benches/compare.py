"""Comparison math of the fidelity benchmark (pure functions on arrays)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

GOAL_REL = 0.10


def rel_diff(sim: float, real: float) -> float | None:
    """(sim - real) / real, None when real is not positive."""
    if not real > 0:
        return None
    return (sim - real) / real


def batch_distribution(counts: np.ndarray) -> dict[str, Any]:
    """Executions by batch size → shares per execution and per request, mean and dominant size."""
    c = np.asarray(counts, dtype=float)
    execs = float(c.sum())
    sizes = np.arange(len(c))
    if execs <= 0:
        return {"executions": 0, "mean_batch": 0.0, "dominant_batch": 0, "exec_share": {}, "request_share": {}}
    reqs = c * sizes
    return {
        "executions": int(execs),
        "mean_batch": float(reqs.sum() / execs),
        "dominant_batch": int(np.argmax(c)),
        "exec_share": {int(b): round(float(c[b] / execs), 4) for b in np.nonzero(c)[0]},
        "request_share": {int(b): round(float(reqs[b] / reqs.sum()), 4) for b in np.nonzero(c)[0]},
    }


def total_variation(a: Mapping[int, float], b: Mapping[int, float]) -> float:
    """Half the L1 distance between two distributions over batch sizes (0 = identical, 1 = disjoint)."""
    keys = set(a) | set(b)
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys)


def counts_from_batch_stats(before: list[dict[str, Any]], after: list[dict[str, Any]], max_batch: int) -> np.ndarray:
    """Executions per batch size between two `/v2/models/stats` batch_stats snapshots."""
    def table(stats: list[dict[str, Any]]) -> np.ndarray:
        out = np.zeros(max_batch + 1, dtype=np.int64)
        for s in stats:
            b = int(s.get("batch_size", 0))
            count = int((s.get("compute_infer") or {}).get("count", 0))
            if 0 < b <= max_batch:
                out[b] += count
        return out
    return table(after) - table(before)


def exec_seconds_from_batch_stats(before: list[dict[str, Any]], after: list[dict[str, Any]],
                                  max_batch: int) -> dict[int, float]:
    """Mean instance occupancy per execution (compute input + infer + output) by batch size."""
    def sums(stats: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        ns = np.zeros(max_batch + 1)
        cnt = np.zeros(max_batch + 1)
        for s in stats:
            b = int(s.get("batch_size", 0))
            if not 0 < b <= max_batch:
                continue
            for key in ("compute_input", "compute_infer", "compute_output"):
                ns[b] += float((s.get(key) or {}).get("ns", 0))
            cnt[b] += float((s.get("compute_infer") or {}).get("count", 0))
        return ns, cnt
    ns0, c0 = sums(before)
    ns1, c1 = sums(after)
    dn, dc = ns1 - ns0, c1 - c0
    return {int(b): float(dn[b] / dc[b] / 1e9) for b in np.nonzero(dc > 0)[0]}


def queue_growth(arrival: np.ndarray, queue: np.ndarray) -> dict[str, float]:
    """Mean queue time in the first and last third of the run (by arrival) and the fitted slope."""
    if len(arrival) < 6:
        return {"first_third_ms": float("nan"), "last_third_ms": float("nan"), "slope_s_per_s": float("nan")}
    order = np.argsort(arrival)
    a, q = arrival[order], queue[order]
    third = len(a) // 3
    slope = float(np.polyfit(a, q, 1)[0]) if float(np.ptp(a)) > 0 else 0.0
    return {
        "first_third_ms": round(1e3 * float(q[:third].mean()), 3),
        "last_third_ms": round(1e3 * float(q[-third:].mean()), 3),
        "slope_s_per_s": round(slope, 4),
    }


def within_goal(*diffs: float | None) -> bool:
    return all(d is not None and abs(d) <= GOAL_REL for d in diffs)


def arrival_shape(arrivals: np.ndarray, window_s: float = 0.5) -> dict[str, float]:
    """How Poisson-like a stream is: mean rate, coefficient of variation of the gaps (1 for Poisson)
    and the most arrivals in any *window_s* window."""
    if len(arrivals) < 3:
        return {"rps": float("nan"), "gap_cv": float("nan"), "max_in_window": float(len(arrivals))}
    a = np.sort(arrivals)
    gaps = np.diff(a)
    span = float(a[-1] - a[0])
    peak = int(np.max(np.searchsorted(a, a + window_s) - np.arange(len(a))))
    return {"rps": round(len(a) / span, 1) if span > 0 else float("inf"),
            "gap_cv": round(float(gaps.std() / gaps.mean()), 2) if gaps.mean() > 0 else float("inf"),
            "span_s": round(span, 1), "max_in_window": float(peak), "window_s": window_s}
