"""What the simulator reports: Triton-like cumulative counters and per-request completions."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tidescale.sim.batcher import BatchRecords
from tidescale.sim.samples import sample_quantile


@dataclass
class ReplicaCounters:
    """Cumulative counters of one replica, as its Triton `/metrics` and `/v2/models/stats` would show."""

    name: str = ""
    ready: bool = False
    draining: bool = False
    requests: int = 0  # nv_inference_request_success
    failures: int = 0  # nv_inference_request_failure{reason="REJECTED"} (queue-policy timeouts)
    inference_count: int = 0  # nv_inference_count (a batch of n counts n)
    exec_count: int = 0  # nv_inference_exec_count
    request_duration_s: float = 0.0  # nv_inference_request_duration_us / 1e6
    queue_duration_s: float = 0.0  # nv_inference_queue_duration_us / 1e6
    compute_duration_s: float = 0.0  # compute_infer per request (each request counts its batch's time)
    pending: int = 0  # nv_inference_pending_request_count (gauge)
    busy_seconds: float = 0.0  # sum of execution time: rate() of it is a duty-cycle utilisation
    cpu_seconds: float = 0.0  # synthetic container CPU use (hpa-cpu policy)
    batch_counts: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))  # executions by size

    def add(self, rec: BatchRecords, max_batch: int) -> None:
        """Fold completed batches into the counters (vectorised, no per-request Python)."""
        self.failures += rec.rejected
        if not len(rec.size):
            return
        nreq = int(rec.size.sum())
        done = rec.dispatch + rec.exec_s
        self.requests += nreq
        self.inference_count += nreq
        self.exec_count += len(rec.size)
        # sum over requests of (done - arrival) and (dispatch - arrival), per batch: size*t - sum(arrivals)
        arr_sum = float(rec.arrivals.sum())
        self.request_duration_s += float((rec.size * done).sum()) - arr_sum
        self.queue_duration_s += float((rec.size * rec.dispatch).sum()) - arr_sum
        self.compute_duration_s += float((rec.size * rec.exec_s).sum())
        self.busy_seconds += float(rec.exec_s.sum())
        counts = np.bincount(rec.size, minlength=max_batch + 1)
        if len(self.batch_counts) < len(counts):
            self.batch_counts = np.pad(self.batch_counts, (0, len(counts) - len(self.batch_counts)))
        self.batch_counts[: len(counts)] += counts


@dataclass
class FleetCounters(ReplicaCounters):
    """Fleet totals (cumulative, including replicas already removed) and the live replicas."""

    dropped: int = 0  # arrivals while no replica was Ready (the Service had no endpoints)
    replicas: tuple[ReplicaCounters, ...] = ()


@dataclass(frozen=True)
class CompletedRequests:
    """Per-request results, completion order within each replica chunk (not globally sorted)."""

    arrival: np.ndarray
    latency: np.ndarray
    queue: np.ndarray
    batch_size: np.ndarray
    completion: np.ndarray

    @classmethod
    def from_records(cls, rec: BatchRecords) -> CompletedRequests:
        done = rec.dispatch + rec.exec_s
        disp_req = np.repeat(rec.dispatch, rec.size)
        done_req = np.repeat(done, rec.size)
        return cls(rec.arrivals, done_req - rec.arrivals, disp_req - rec.arrivals,
                   np.repeat(rec.size, rec.size).astype(np.int32), done_req)

    @classmethod
    def concat(cls, parts: list[CompletedRequests]) -> CompletedRequests:
        if not parts:
            e = np.empty(0)
            return cls(e, e, e, np.empty(0, dtype=np.int32), e)
        return cls(*(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("arrival", "latency", "queue", "batch_size", "completion")))

    def __len__(self) -> int:
        return len(self.arrival)

    def select(self, mask: np.ndarray) -> CompletedRequests:
        return CompletedRequests(self.arrival[mask], self.latency[mask], self.queue[mask],
                                 self.batch_size[mask], self.completion[mask])

    def latency_quantile(self, q: float) -> float:
        found = sample_quantile(self.latency, q)
        return float("nan") if found is None else found
