"""Triton 2.51's dynamic batcher thread, step by step (per arrival, slower than ReplicaBatcher).

Real traces showed a pattern the batch-stepped model misses: while the instance is busy, the first
request forms a payload as soon as its queue delay expires; that payload is queued for the instance
and keeps accepting requests, but the batcher thread is only woken by an arrival when
`queued >= next_preferred_batch_size_` (the value it last computed), so a lone early request often
executes alone and the others wait for the next batch. This class replays the scheduler's state
machine (`DynamicBatchScheduler::BatcherThread`/`GetDynamicBatch`/`Enqueue` and the rate limiter's
payload slots, 2 per instance) in simulated time: events are arrivals, the batcher's timed wait,
and instances finishing.

A queue policy that REJECTs after a timeout changes two things, as in Triton. `GetDynamicBatch`
applies it at its cursor, so the requests that waited longer are rejected when the batcher next
looks at the queue, and the timed wait is cut short to the oldest pending request's timeout. And no
payload is prefetched: Triton's scheduler queue supports prefetching only without a default timeout
(`PriorityQueue::support_prefetching_`), and without it the rate limiter has a payload slot only
while an instance waits for one (`PayloadSlotAvailable`: `WaitingConsumerCount() > 0`). So the
batch forms when an instance frees, from the requests that have not expired; nothing waits in a
queued payload where the policy cannot reach it. (A first version of this model kept prefetching
with a timeout and rejected a payload's expired requests when it started: at 120 % load it ran
batches of 17 where a real replica ran 29, docs/benchmarks/fidelity-queue-timeout.md.)
"""

from __future__ import annotations

import dataclasses
from collections import deque

from tidescale.sim.batcher import BatcherConfig, BatchRecords, JitterStream, ReplicaBatcher
from tidescale.sim.servicecurve import ServiceCurve

INF = float("inf")
SLOTS_PER_INSTANCE = 2  # RateLimiter::PayloadSlotAvailable with prefetching: queued payloads < 2 x instances
IDLE_WAIT_S = 0.5  # BatcherThread's default_wait_microseconds: an empty queue is looked at again after this


class _Payload:
    __slots__ = ("enqueued", "size")

    def __init__(self) -> None:
        self.size = 0
        self.enqueued = False


class TritonBatcher(ReplicaBatcher):
    """Same interface as ReplicaBatcher; `run` walks arrivals, timer and instance events in time order."""

    __slots__ = ("_curr", "_now", "_np", "_prefetch", "_prefs", "_rejected", "_saturated", "_sched", "_seen",
                 "_sorted_prefs", "_stale", "_timer", "_zero_delay")

    def __init__(self, cfg: BatcherConfig, curve: ServiceCurve, jitter: JitterStream) -> None:
        super().__init__(cfg, curve, jitter)
        self._prefs = frozenset(cfg.preferred_batch_sizes)
        self._sorted_prefs = sorted(self._prefs)
        self._zero_delay = cfg.max_queue_delay_s == 0
        self._curr = _Payload()
        self._stale = False  # the current payload started executing (IsStaleState)
        self._saturated = False
        self._np = 0  # next_preferred_batch_size_ (minus the payload)
        self._sched: deque[_Payload] = deque()  # enqueued payloads not yet started
        self._seen = 0  # arrivals[:seen] have reached the scheduler queue or a payload
        self._timer = INF
        self._rejected = 0  # rejected by the queue policy since the last flush (no longer in arrivals)
        # Triton prefetches payloads only without a queue timeout (PriorityQueue::support_prefetching_)
        self._prefetch = self._timeout == INF
        self._now = -INF  # the last event's time: an instance freeing after it is an event to come

    # --- scheduler pieces (names follow Triton's) --------------------------------------------------

    def _next_preferred(self, total: int) -> int:
        """The smallest preferred size above *total*, else the smallest preferred, else 0."""
        for p in self._sorted_prefs:
            if p > total:
                return p
        return self._sorted_prefs[0] if self._sorted_prefs else 0

    def _apply_policy(self, t: float) -> None:
        """Reject the queued requests whose timeout expired by *t* (ApplyPolicyAtCursor, REJECT).

        Arrivals are FIFO with one timeout, so the expired ones are a prefix of the queue. They leave
        `arrivals` at once (the payloads before them are recorded only when they start, and flush
        hands arrivals to records in order); flush reports how many."""
        a, head, seen, timeout = self.arrivals, self.head, self._seen, self._timeout
        k = head
        while k < seen and a[k] + timeout <= t:  # the same sum as the timed wait's: that wake-up rejects
            k += 1
        if k == head:
            return
        if self.rejections is not None:
            self.rejections.append((t, a[head:k]))
        del a[head:k]
        self._seen -= k - head
        self._rejected += k - head

    def _get_dynamic_batch(self, t: float) -> tuple[float, int]:
        """(wake-up time or 0, requests to move into the payload); mirrors GetDynamicBatch."""
        if self._timeout < INF:
            self._apply_policy(t)
            if self.head == self._seen:
                return 0.0, 0  # every queued request expired: nothing pending
        payload = self._curr.size
        queued = self._seen - self.head
        best, pending, send_now = 0, 0, False
        for _ in range(queued):
            if payload + pending > 0:
                if payload + pending + 1 > self._maxpref and best == 0:
                    best = pending
                    self._saturated = True
                if payload + pending + 1 > self._maxb:
                    send_now = True
                    break
            pending += 1
            if payload + pending in self._prefs:
                best = pending
        deadline = self.arrivals[self.head] + self._delay  # compared, never subtracted: no float drift
        exceeded = self._delay > 0 and t >= deadline
        if best and not exceeded:
            if self._zero_delay:
                self._saturated = True
            return 0.0, best
        if pending == 0:
            return 0.0, 0
        if send_now or payload + pending >= self._maxpref:
            self._saturated = True
            return 0.0, pending
        if exceeded or self._zero_delay:
            return 0.0, pending
        nxt = self._next_preferred(payload + pending)
        self._np = nxt - payload if nxt else 0
        if not self._saturated and payload and payload not in self._prefs:
            return 0.0, pending
        expiry = self.arrivals[self.head] + self._timeout  # ClosestTimeout: the oldest pending request's
        return min(deadline, expiry), 0

    def _batcher(self, t: float) -> None:
        """One wake-up of the batcher thread at time t."""
        while True:
            if self._saturated or self._stale:
                self._curr, self._saturated, self._stale, self._np = _Payload(), False, False, 0
            if self.head == self._seen:
                # queue empty: sleep until an Enqueue or a payload callback wakes us, or the idle wait ends
                # (what finds a request whose Enqueue did not wake the batcher after the rest expired)
                self._timer = t + IDLE_WAIT_S
                return
            if not self._slot_free(t):
                return  # no payload slot: woken when an instance takes a payload, or frees without one
            wake, take = self._get_dynamic_batch(t)
            if take:
                self._curr.size += take
                self.head += take
                if not self._curr.enqueued:
                    self._curr.enqueued = True
                    self._sched.append(self._curr)
                    self._start_ready(t)
                continue
            if wake > 0:
                self._timer = wake
            elif self.head == self._seen:
                continue  # the queue policy emptied the queue: the thread loops on, to its idle wait
            return

    def _slot_free(self, t: float) -> bool:
        """RateLimiter::PayloadSlotAvailable: with prefetching, fewer than 2 queued payloads per
        instance; without, an instance waiting for a payload (idle, none queued for it)."""
        if self._prefetch:
            return len(self._sched) < SLOTS_PER_INSTANCE * len(self.free)
        return len(self._sched) < sum(1 for f in self.free if f <= t)

    def _start_ready(self, t: float) -> None:
        """Idle instances take queued payloads now (each start wakes the batcher via its callback)."""
        while self._sched:
            f = min(self.free)
            if f > t:
                return
            self._start(self._sched.popleft(), t, self.free.index(f))

    def _start(self, p: _Payload, t: float, instance: int) -> None:
        if p is self._curr:
            self._stale = True
        if self._jpos >= len(self._jit):
            self._jit, self._jpos = self._jitter.block(), 0
        e = self._exec[p.size] * self._jit[self._jpos]
        self._jpos += 1
        self.disp.append(t)
        self.execs.append(e)
        self.sizes.append(p.size)
        self.free[instance] = t + e

    # --- the event loop ----------------------------------------------------------------------------

    def run(self, to_t: float) -> None:
        a = self.arrivals
        while True:  # the queue policy shortens `a` as the batcher runs: its length is read each turn
            t_arr = a[self._seen] if self._seen < len(a) else INF
            t_free = min(self.free) if self._sched else self._next_release()
            t = min(t_arr, t_free, self._timer)
            if t > to_t or t == INF:
                return
            self._now = t
            if t_arr <= t:  # arrivals first at equal times
                self._seen += 1
                queued = self._seen - self.head
                if self._saturated or self._stale or queued >= self._np:
                    self._batcher(t)
            elif t_free <= t and self._sched:
                self._start(self._sched.popleft(), t, self.free.index(t_free))
                self._batcher(t)  # the payload callback wakes the batcher
            elif t_free <= t:
                self._batcher(t)  # an instance waits for a payload: the batcher's slot wait ends
            else:
                self._timer = INF
                self._batcher(t)

    def _next_release(self) -> float:
        """Without prefetching, the batcher waits for a slot while requests queue: the next instance to
        free after the last event ends that wait (with prefetching, a queued payload's start does)."""
        if self._prefetch or self._seen == self.head:
            return INF
        return min((f for f in self.free if f > self._now), default=INF)

    # --- bookkeeping the base class does not know about ----------------------------------------------

    def in_flight(self, t: float) -> int:
        return super().in_flight(t) + sum(p.size for p in self._sched)

    def busy_until(self) -> float:
        return INF if self._sched else max(self.free)

    def flush(self, now: float) -> BatchRecords:
        before = len(self.arrivals)
        rec = super().flush(now)
        self._seen -= before - len(self.arrivals)
        if self._rejected:
            rec, self._rejected = dataclasses.replace(rec, rejected=rec.rejected + self._rejected), 0
        return rec
