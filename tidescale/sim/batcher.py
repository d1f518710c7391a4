"""One replica's dynamic batcher and model instances, stepped batch by batch.

The dispatch rule follows Triton's `DynamicBatchScheduler::GetDynamicBatch`: when an instance is
free, the pending requests (capped at max_batch_size) are examined; if a preferred batch size is
reachable and the oldest request has not yet waited max_queue_delay, the largest reachable
preferred size is sent; if the delay has expired (or the queue delay is 0, or the batch reached
the largest preferred size) everything pending is sent; otherwise the batcher waits for the next
arrival that reaches a target size or for the delay to expire, whichever comes first.

Requests are served FIFO, so a batch is a contiguous run of the replica's arrival list: the hot
loop works on a Python list of floats with an index pointer and `bisect`, one iteration per batch.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass

import numpy as np

from tidescale.contracts.errors import UsageError
from tidescale.sim.servicecurve import ServiceCurve

JITTER_BLOCK = 8192
SCHEDULERS = ("stepped", "triton-2.51")


@dataclass(frozen=True)
class BatcherConfig:
    """The `dynamic_batching` block and `instance_group.count` of a Triton model config."""

    max_batch_size: int = 32
    preferred_batch_sizes: tuple[int, ...] = (8, 16)
    max_queue_delay_s: float = 0.002
    instance_count: int = 1
    # Batches the scheduler may form ahead per instance while instances are busy, each fixed when
    # formed (an approximation of Triton's rate-limiter payload queue). 0, the default, forms a
    # batch when an instance is free, which matched real Triton 2.51 best (docs/fastsim.md).
    prefetch_depth: int = 0
    # "stepped": the fast batch-by-batch model; "triton-2.51": Triton's batcher thread replayed
    # event by event (payload slots, wake-up conditions), slower but closer to real traces.
    scheduler: str = "stepped"
    # `dynamic_batching { default_queue_policy { timeout_action: REJECT default_timeout_microseconds } }`:
    # a request still queued this long after it arrived is rejected when the scheduler next looks
    # (server-side shedding: a backlog then cannot outlive the overload that built it). None: no timeout.
    queue_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise UsageError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        prefs = tuple(sorted(set(self.preferred_batch_sizes)))
        for p in prefs:
            if not 1 <= p <= self.max_batch_size:
                raise UsageError(f"preferred batch size {p} must be in 1..max_batch_size ({self.max_batch_size})")
        if self.max_queue_delay_s < 0:
            raise UsageError(f"max_queue_delay_s must be >= 0, got {self.max_queue_delay_s}")
        if self.instance_count < 1:
            raise UsageError(f"instance_count must be >= 1, got {self.instance_count}")
        if self.prefetch_depth < 0:
            raise UsageError(f"prefetch_depth must be >= 0, got {self.prefetch_depth}")
        if self.scheduler not in SCHEDULERS:
            raise UsageError(f"unknown scheduler {self.scheduler!r}; choose one of {', '.join(SCHEDULERS)}")
        if self.queue_timeout_s is not None and not self.queue_timeout_s > 0:
            raise UsageError(f"queue_timeout_s must be > 0, got {self.queue_timeout_s}")
        object.__setattr__(self, "preferred_batch_sizes", prefs)

    @property
    def max_preferred(self) -> int:
        """Triton's max_preferred_batch_size_: the largest preferred size, else max_batch_size."""
        return self.preferred_batch_sizes[-1] if self.preferred_batch_sizes else self.max_batch_size

    def best_preferred_table(self) -> list[int]:
        """best[q]: the largest preferred size <= q (0 when none), for q in 0..max_batch_size."""
        best, cur = [], 0
        prefs = set(self.preferred_batch_sizes)
        for q in range(self.max_batch_size + 1):
            if q in prefs:
                cur = q
            best.append(cur)
        return best

    def next_target_table(self) -> list[int]:
        """target[q]: the smallest size > q at which the batcher would send without waiting."""
        targets = [*self.preferred_batch_sizes, self.max_preferred]
        return [min((s for s in targets if s > q), default=self.max_batch_size)
                for q in range(self.max_batch_size + 1)]


def batch_to_send(cfg: BatcherConfig, pending: int, expired: bool) -> int:
    """How many requests the batcher sends now (0 = keep waiting); *pending* counts queued requests.

    *expired*: the oldest pending request has waited at least max_queue_delay (only when > 0).
    """
    if pending <= 0:
        return 0
    q = min(pending, cfg.max_batch_size)
    if not expired:
        best = cfg.best_preferred_table()[q]
        if best:
            return best
        if q < cfg.max_preferred and cfg.max_queue_delay_s > 0:
            return 0
    return q


def mean_exec_table(curve: ServiceCurve, max_batch: int) -> list[float]:
    """exec[b]: mean execution seconds of a batch of b (index 0 unused)."""
    return [0.0] + [curve.exec_seconds(b) for b in range(1, max_batch + 1)]


class JitterStream:
    """Multiplicative lognormal execution noise with mean 1, drawn in blocks from a seeded RNG."""

    def __init__(self, sigma: float, seed: int, replica_index: int) -> None:
        self.sigma = sigma
        self.rng = np.random.default_rng([seed, replica_index])

    def block(self) -> list[float]:
        if self.sigma <= 0:
            return [1.0] * JITTER_BLOCK
        mu = -0.5 * self.sigma * self.sigma
        return self.rng.lognormal(mu, self.sigma, JITTER_BLOCK).tolist()


@dataclass
class BatchRecords:
    """Batches dispatched since the last flush, with the arrivals they served (FIFO order), and how
    many requests the queue policy rejected meanwhile (Triton counts them as REJECTED failures)."""

    dispatch: np.ndarray
    exec_s: np.ndarray
    size: np.ndarray
    arrivals: np.ndarray
    rejected: int = 0


class ReplicaBatcher:
    """The batcher and instances of one replica: arrivals in, batch records out."""

    __slots__ = ("_best", "_delay", "_exec", "_jit", "_jitter", "_jpos", "_maxb", "_maxpref", "_next", "_slots",
                 "_timeout", "arrivals", "disp", "execs", "free", "head", "rejections", "sizes", "starts")

    def __init__(self, cfg: BatcherConfig, curve: ServiceCurve, jitter: JitterStream) -> None:
        self._maxb = cfg.max_batch_size
        self._maxpref = cfg.max_preferred
        self._delay = cfg.max_queue_delay_s
        self._timeout = float("inf") if cfg.queue_timeout_s is None else cfg.queue_timeout_s
        self._best = cfg.best_preferred_table()
        self._next = cfg.next_target_table()
        self._exec = mean_exec_table(curve, cfg.max_batch_size)
        self._jitter = jitter
        self._jit: list[float] = []
        self._jpos = 0
        self.arrivals: list[float] = []  # routed arrivals not yet flushed; [head:] are pending
        self.head = 0
        self.free = [float("-inf")] * cfg.instance_count  # when each instance is next idle
        self._slots = cfg.prefetch_depth * cfg.instance_count
        self.starts: deque[float] = deque(maxlen=max(1, self._slots))  # starts of the last formed batches
        self.disp: list[float] = []
        self.execs: list[float] = []
        self.sizes: list[int] = []
        # (when, the arrivals) of each rejection since the fleet last took them; None: not kept (no
        # client retries them)
        self.rejections: list[tuple[float, list[float]]] | None = None

    @property
    def pending(self) -> int:
        return len(self.arrivals) - self.head

    def in_flight(self, t: float) -> int:
        """Requests in formed batches not complete at *t* (executing or prefetched); rejection
        records (negative sizes) are neither, and do not count towards the batches looked at."""
        n, k, seen = 0, len(self.disp) - 1, 0
        while k >= 0 and seen < len(self.free) + self._slots:
            if self.sizes[k] > 0:
                seen += 1
                if self.disp[k] + self.execs[k] > t:
                    n += self.sizes[k]
            k -= 1
        return n

    def busy_until(self) -> float:
        return max(self.free)

    def run(self, to_t: float) -> None:
        """Form every batch whose formation time is <= to_t (all arrivals <= to_t are routed).

        Without prefetch a batch forms when an instance is free; with prefetch depth k a batch may
        form while the instances are busy as long as fewer than k x instances formed batches are
        waiting to start, and it is then fixed (later arrivals go to the next batch). With a queue
        timeout, the requests that waited longer are rejected at formation time, recorded as a
        "batch" of negative size and no execution.
        """
        a = self.arrivals
        n = len(a)
        i = self.head
        if i >= n:
            return
        maxb, maxpref, delay = self._maxb, self._maxpref, self._delay
        best, nxt, mean = self._best, self._next, self._exec
        free, starts, slots = self.free, self.starts, self._slots
        single = len(free) == 1
        f = free[0] if single else min(free)
        jit, jp = self._jit, self._jpos
        nj = len(jit)
        disp, execs, sizes = self.disp.append, self.execs.append, self.sizes.append
        waits = delay > 0.0
        timeout = self._timeout
        rejected = self.rejections
        while i < n:
            ai = a[i]
            gate = (starts[0] if len(starts) == slots else ai) if slots else f
            t = ai if ai > gate else gate
            if t > to_t:
                break
            if ai < t - timeout:  # FIFO: the expired requests are a prefix of the pending ones
                k = bisect_left(a, t - timeout, i, n)
                if rejected is not None:
                    rejected.append((t, a[i:k]))
                disp(t)
                execs(0.0)
                sizes(i - k)
                i = k
                continue
            j = i + 1  # light load: usually one request pending, so look before bisecting
            q = 1 if j == n or a[j] > t else bisect_right(a, t, j, i + maxb if i + maxb < n else n) - i
            if waits and t >= ai + delay:
                b = q
            else:
                b = best[q]
                if not b:
                    if q < maxpref and waits:
                        deadline = ai + delay
                        k = i + nxt[q] - 1
                        t = a[k] if k < n and a[k] < deadline else deadline
                        if t > to_t:
                            break
                        m = i + q  # a[i:m] are already counted; count later ones only if needed
                        if m < n and a[m] <= t:
                            q = bisect_right(a, t, m, i + maxb if i + maxb < n else n) - i
                        b = q if t >= deadline else (best[q] or q)
                    else:
                        b = q
            if jp >= nj:
                jit = self._jit = self._jitter.block()
                jp, nj = 0, len(jit)
            e = mean[b] * jit[jp]
            jp += 1
            if f > t:
                t = f  # formed early (prefetched): starts when an instance frees
            disp(t)
            execs(e)
            sizes(b)
            i += b
            if slots:
                starts.append(t)
            if single:
                f = t + e
            else:
                free[free.index(f)] = t + e
                f = min(free)
        if single:
            free[0] = f
        self.head = i
        self._jpos = jp

    def flush(self, now: float) -> BatchRecords:
        """Remove and return the leading batches complete by *now*, with their arrivals."""
        if not self.disp:
            return _EMPTY
        d = np.asarray(self.disp)
        e = np.asarray(self.execs)
        done = d + e <= now
        k = len(done) if bool(done.all()) else int(np.argmin(done))
        if k == 0:
            return _EMPTY
        s = np.asarray(self.sizes[:k], dtype=np.int64)
        nreq = int(np.abs(s).sum())
        arr = np.asarray(self.arrivals[:nreq])
        del self.disp[:k], self.execs[:k], self.sizes[:k], self.arrivals[:nreq]
        self.head -= nreq
        served = s > 0
        if bool(served.all()):
            return BatchRecords(d[:k], e[:k], s, arr)
        return BatchRecords(d[:k][served], e[:k][served], s[served], arr[np.repeat(served, np.abs(s))],
                            rejected=int(-s[~served].sum()))


_EMPTY = BatchRecords(np.empty(0), np.empty(0), np.empty(0, dtype=np.int64), np.empty(0))
