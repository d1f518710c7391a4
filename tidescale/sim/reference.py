"""A naive per-request discrete-event simulation (one heap event per arrival, timer and completion).

It is the textbook way to write the model and the peer `bench sim` compares against; tests also
use it as an oracle: with the same seed it must produce exactly the batches FleetSim produces
(fixed replica set, round-robin routing).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from tidescale.sim.batcher import BatcherConfig, JitterStream, batch_to_send, mean_exec_table
from tidescale.sim.servicecurve import ServiceCurve

ARRIVAL, TIMER, DONE = 0, 1, 2


@dataclass
class _Replica:
    queue: deque[float]
    free_instances: int
    jitter: JitterStream
    block: list[float]
    pos: int = 0
    timer_at: float = -1.0
    formed: deque[tuple[list[float], float]] = field(default_factory=deque)  # formed, not started


@dataclass(frozen=True)
class ReferenceResult:
    """Per batch: replica, dispatch time, execution seconds, size; per request: latency."""

    batches: list[tuple[int, float, float, int]]
    latencies: np.ndarray


def simulate_naive(curve: ServiceCurve, cfg: BatcherConfig, replicas: int, arrivals: np.ndarray,
                   seed: int = 0) -> ReferenceResult:
    """Round-robin over a fixed set of Ready replicas, every request an event object."""
    mean = mean_exec_table(curve, cfg.max_batch_size)
    reps = [_Replica(deque(), cfg.instance_count, js, js.block())
            for js in (JitterStream(curve.jitter_sigma, seed, i) for i in range(replicas))]
    events: list[tuple[float, int, int, int, object]] = []
    seq = 0
    for k, t in enumerate(arrivals.tolist()):
        events.append((t, ARRIVAL, k, k % replicas, t))
    heapq.heapify(events)
    seq = len(arrivals)
    batches: list[tuple[int, float, float, int]] = []
    latencies: list[float] = []
    touched: set[int] = set()

    slots = cfg.prefetch_depth * cfg.instance_count

    def start_formed(r: int, now: float) -> None:
        nonlocal seq
        rep = reps[r]
        while rep.free_instances and rep.formed:
            batch, e = rep.formed.popleft()
            rep.free_instances -= 1
            batches.append((r, now, e, len(batch)))
            seq += 1
            heapq.heappush(events, (now + e, DONE, seq, r, batch))

    def try_dispatch(r: int, now: float) -> None:
        nonlocal seq
        rep = reps[r]
        start_formed(r, now)
        while rep.queue and (len(rep.formed) < slots if slots else rep.free_instances > 0):
            expired = cfg.max_queue_delay_s > 0 and now >= rep.queue[0] + cfg.max_queue_delay_s
            b = batch_to_send(cfg, len(rep.queue), expired)
            if b == 0:
                wake = rep.queue[0] + cfg.max_queue_delay_s
                if wake != rep.timer_at:
                    rep.timer_at = wake
                    seq += 1
                    heapq.heappush(events, (wake, TIMER, seq, r, None))
                return
            if rep.pos >= len(rep.block):
                rep.block, rep.pos = rep.jitter.block(), 0
            e = mean[b] * rep.block[rep.pos]
            rep.pos += 1
            rep.formed.append(([rep.queue.popleft() for _ in range(b)], e))
            start_formed(r, now)

    while events:
        t, kind, _, r, payload = heapq.heappop(events)
        if kind == ARRIVAL:
            reps[r].queue.append(t)
            touched.add(r)
            if events and events[0][0] == t and events[0][1] == ARRIVAL:
                continue  # simultaneous arrivals are all queued before the batcher looks
            for rr in sorted(touched):
                try_dispatch(rr, t)
            touched.clear()
            continue
        if kind == DONE:
            reps[r].free_instances += 1
            latencies.extend(t - a for a in payload)  # type: ignore[attr-defined]
        try_dispatch(r, t)
    return ReferenceResult(batches, np.asarray(latencies))
