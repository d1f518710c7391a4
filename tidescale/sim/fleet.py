"""N replicas of one model behind a Kubernetes Service, stepped in simulated time.

Routing of round-robin (IPVS rr) and random (kube-proxy iptables) does not depend on replica
state, so arrivals are split per replica with numpy slicing and each replica's batcher runs
independently up to the target time. Least-loaded routing (an L7 proxy's least-request) needs
replica state, so it routes per `routing_quantum_s` slice with the loads at the slice start.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from tidescale.contracts.errors import UsageError
from tidescale.sim.batcher import BatcherConfig, JitterStream, ReplicaBatcher
from tidescale.sim.clients import ClientRetries, RetryLedger
from tidescale.sim.connections import ClientConnections
from tidescale.sim.readiness import Outages, ReadinessFaults
from tidescale.sim.results import CompletedRequests, FleetCounters, ReplicaCounters
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.startup import PodStartup
from tidescale.sim.triton_batcher import TritonBatcher

ROUTINGS = ("round-robin", "random", "least-loaded", "connections")
KEEPALIVE_CONNECTIONS = 64  # idle connections the clients keep (httpx's default; the demo's load generator)
FLUSH_RECORDS = 20_000  # fold a replica's batch records into counters past this many (bounded memory)
# With clients that retry, the fleet is stepped this finely: a refused request is retried no sooner
# than the next step (Envoy's back-offs are 0-250 ms).
RETRY_STEP_S = 0.05
Chunk = tuple[float, CompletedRequests]  # (last completion time, the requests) of one flush


@dataclass
class Replica:
    """One pod: lifecycle times, its batcher and its cumulative counters."""

    index: int
    added_at: float
    ready_at: float  # inf while it waits for a node
    batcher: ReplicaBatcher
    counters: ReplicaCounters
    removed_at: float | None = None
    history: list[Chunk] = field(default_factory=list)
    started_at: float = 0.0  # when a node took it (kube_pod_start_time); inf while it waits for one
    outages: Outages | None = None  # its readiness losses after its first Ready (None: it has none)

    @property
    def name(self) -> str:
        return self.counters.name

    def ready(self, t: float) -> bool:
        return (self.removed_at is None and self.ready_at <= t
                and (self.outages is None or not self.outages.down(t)))

    def last_ready(self, t: float) -> float | None:
        """When it last became Ready at or before *t* (`kube_pod_status_ready_time`); None while not Ready."""
        if self.outages is not None:
            return self.outages.last_ready(t)
        return self.ready_at if self.ready_at <= t else None

    def deletion_rank(self, t: float) -> tuple[bool, int, int, int, int]:
        """Where a ReplicaSet scaling down puts it (the lowest goes first; Kubernetes' `ActivePodsWithRanks`,
        LogarithmicScaleDown on, as since 1.22): not Ready before Ready; of two Ready, the one Ready
        for less time, in powers of two of nanoseconds; then the more restarts; then the newer, in the
        same powers of two. Where Kubernetes breaks a tie of the powers of two by UID, at random, the
        model goes on down the rules, then takes the newest."""
        ready = self.ready(t)
        restarts = 0 if self.outages is None else self.outages.restarts(t)
        since_ready = self.last_ready(t) if ready else None
        return (ready, _log2_ns(t - since_ready) if since_ready is not None else 0, -restarts,
                _log2_ns(t - self.added_at), -self.index)

    def drained(self, t: float) -> bool:
        return self.removed_at is not None and self.batcher.pending == 0 and self.batcher.busy_until() <= t


def _log2_ns(seconds: float) -> int:
    """The power of two of nanoseconds a duration is in: the ReplicaSet's rank of a pod's age (-1: none)."""
    return int(math.log2(seconds * 1e9)) if seconds > 0 else -1


class FleetSim:
    """Discrete-event model of a Triton fleet: dynamic batcher, service curve, cold start, drain."""

    def __init__(self, curve: ServiceCurve, config: BatcherConfig, initial_replicas: int, cold_start_s: float,
                 seed: int = 0, routing: str = "round-robin", keep_history_s: float | None = 600.0,
                 routing_quantum_s: float = 0.01, cpu_base_cores: float = 0.05,
                 cpu_seconds_per_request: float = 0.0005, startup: PodStartup | None = None,
                 retries: ClientRetries | None = None, faults: ReadinessFaults | None = None,
                 keepalive: int = KEEPALIVE_CONNECTIONS) -> None:
        """*startup*: how new replicas start (`PodStartup`: varying starts, waits for GPU nodes);
        None: each is Ready *cold_start_s* after it is asked for. *retries*: clients retry what the
        queue policy rejects or what finds no Ready replica (`sim/clients.py`); None: they do not.
        *faults*: how replicas lose readiness once they serve (`sim/readiness.py`); None: never.
        *routing* "connections": clients that keep up to *keepalive* idle connections, each on the pod
        kube-proxy picked when it opened (`sim/connections.py`); the others spread every request."""
        if routing not in ROUTINGS:
            raise UsageError(f"unknown routing {routing!r}; choose one of {', '.join(ROUTINGS)}")
        if initial_replicas < 0:
            raise UsageError(f"initial_replicas must be >= 0, got {initial_replicas}")
        if cold_start_s < 0:
            raise UsageError(f"cold_start_s must be >= 0, got {cold_start_s}")
        if routing_quantum_s <= 0:
            raise UsageError(f"routing_quantum_s must be > 0, got {routing_quantum_s}")
        self.curve, self.config, self.cold_start_s, self.seed = curve, config, cold_start_s, seed
        self.routing, self.keep_history_s, self.routing_quantum_s = routing, keep_history_s, routing_quantum_s
        self.cpu_base_cores, self.cpu_seconds_per_request = cpu_base_cores, cpu_seconds_per_request
        self.now = 0.0
        self._rng = np.random.default_rng([seed, 1 << 30])
        self._replicas: list[Replica] = []
        self._next_index = 0
        self._rr = 0
        self._connections = ClientConnections(keepalive, np.random.default_rng([seed, 1 << 27]))
        self._offered = np.empty(0)
        self._offered_pos = 0
        self._last_offered = 0.0
        self._retired = ReplicaCounters(name="retired", batch_counts=np.zeros(config.max_batch_size + 1, np.int64))
        self._retired_alive_s = 0.0
        self._retired_history: list[Chunk] = []
        self._dropped = 0
        self.startup = startup
        self._start_rng = np.random.default_rng([seed, 1 << 29])
        free = None if startup is None else startup.free_gpus
        self._gpus = math.inf if free is None else float(initial_replicas + free)
        self._nodes_due: list[float] = []  # when the nodes asked for unschedulable pods join (a heap)
        self._ledger = None if retries is None or retries.max_retries == 0 else RetryLedger(retries, seed)
        self._retrying = np.empty(0)  # retries not yet routed (sorted)
        self._refused: list[tuple[np.ndarray, np.ndarray]] = []  # (attempts, when) not yet retried
        self.faults = faults
        self._fault_rng = np.random.default_rng([seed, 1 << 28])
        self._crash_loops_left = 0 if faults is None else faults.crash_looping
        before = cold_start_s if startup is None else startup.container_s
        for _ in range(initial_replicas):
            self._add_replica(ready_at=0.0, started_at=-before)

    # --- inputs -----------------------------------------------------------------------------------

    def offer(self, arrival_times: np.ndarray) -> None:
        """Append future arrivals (sorted, >= the current time and the last offered one)."""
        arr = np.asarray(arrival_times, dtype=float)
        if arr.ndim != 1:
            raise UsageError("arrival times must be a 1-D array")
        if not len(arr):
            return
        if not np.all(np.isfinite(arr)):
            raise UsageError("arrival times must be finite")
        if len(arr) > 1 and bool(np.any(np.diff(arr) < 0)):
            raise UsageError("arrival times must be sorted")
        if arr[0] < self.now or arr[0] < self._last_offered:
            raise UsageError(f"arrival at {arr[0]:.6f}s is before the current time {self.now:.6f}s "
                             "or the last offered arrival")
        rest = self._offered[self._offered_pos:]
        self._offered = np.concatenate([rest, arr]) if len(rest) else arr
        self._offered_pos = 0
        self._last_offered = float(arr[-1])

    def set_replicas(self, n: int) -> None:
        """Desired replica count now: adds cold replicas, or drains the ones a ReplicaSet deletes first
        (`Replica.deletion_rank`: not Ready, then Ready the shortest time, then restarted the most)."""
        if n < 0:
            raise UsageError(f"replica count must be >= 0, got {n}")
        active = [r for r in self._replicas if r.removed_at is None]
        for _ in range(n - len(active)):
            self._start_replica()
        if n < len(active):
            victims = sorted(active, key=lambda r: r.deletion_rank(self.now))[: len(active) - n]
            for r in victims:
                r.removed_at = self.now
                r.counters.draining = True
            self._retire_drained()
            self._place(self.now)

    def advance(self, to_t: float) -> None:
        """Process everything up to simulated time *to_t* (arrivals offered beyond it wait)."""
        if to_t < self.now:
            raise UsageError(f"cannot advance backwards from {self.now}s to {to_t}s")
        if self._ledger is None:
            self._advance(to_t)
            return
        t = self.now
        while t < to_t:
            t = min(to_t, t + RETRY_STEP_S)
            self._advance(t)
            self._retry_refused()

    def _advance(self, to_t: float) -> None:
        self._crash_serving(to_t)
        while self._nodes_due and self._nodes_due[0] <= to_t:
            joined = heapq.heappop(self._nodes_due)
            self._gpus += 1
            self._place(joined)
        if self.routing in ("least-loaded", "connections"):
            self._advance_in_quanta(to_t)
        else:
            self._route_until(to_t)
            for r in self._replicas:
                r.batcher.run(to_t)
        self.now = to_t
        for r in self._replicas:
            if len(r.batcher.disp) > FLUSH_RECORDS:
                self._flush(r)
        self._retire_drained()
        self._place(self.now)

    # --- state ------------------------------------------------------------------------------------

    @property
    def replicas_ready(self) -> int:
        return sum(1 for r in self._replicas if r.ready(self.now))

    @property
    def replicas_total(self) -> int:
        """Replicas not being drained, including those still starting."""
        return sum(1 for r in self._replicas if r.removed_at is None)

    @property
    def unschedulable(self) -> int:
        """Replicas asked for that no node has taken yet (`kube_pod_status_unschedulable`)."""
        return sum(1 for r in self._replicas if r.removed_at is None and math.isinf(r.started_at))

    def crash_looping(self, window_s: float) -> int:
        """Replicas whose container waited in CrashLoopBackOff within the last *window_s*
        (`max_over_time` of kube-state-metrics' waiting reason), of those still in the Deployment."""
        return sum(1 for r in self._replicas if r.removed_at is None and r.outages is not None
                   and r.outages.waited_within(self.now, window_s))

    def pod_times(self) -> list[tuple[str, float, float | None]]:
        """(pod, start time, Ready time or None) of each replica a node has taken, as kube-state-metrics
        reports `kube_pod_start_time` and `kube_pod_status_ready_time`."""
        return [(r.name, r.started_at, r.last_ready(self.now))
                for r in self._replicas if r.removed_at is None and r.started_at <= self.now]

    @property
    def queue_depth(self) -> int:
        return sum(r.batcher.pending for r in self._replicas)

    def counters(self) -> FleetCounters:
        """Cumulative fleet counters at `now` (completed requests only, like Triton's)."""
        per: list[ReplicaCounters] = []
        total = FleetCounters(name="fleet", batch_counts=self._retired.batch_counts.copy(), dropped=self._dropped)
        _accumulate(total, self._retired)
        alive_s = self._retired_alive_s
        for r in self._replicas:
            self._flush(r)
            c = r.counters
            c.ready = r.ready(self.now)
            c.pending = r.batcher.pending
            r_alive = self.now - r.added_at
            c.cpu_seconds = self.cpu_base_cores * r_alive + self.cpu_seconds_per_request * c.requests
            alive_s += r_alive
            _accumulate(total, c)
            total.batch_counts += c.batch_counts
            per.append(_copy(c))
        total.cpu_seconds = self.cpu_base_cores * alive_s + self.cpu_seconds_per_request * total.requests
        total.replicas = tuple(per)
        return total

    def first_attempts(self, done: CompletedRequests) -> np.ndarray:
        """The arrival of each of *done*'s requests as its client sent it first (its own arrival, unless
        it is a retry); call it once per completed request."""
        return done.arrival if self._ledger is None else self._ledger.first_attempts(done.arrival)

    def completed(self, since_t: float = float("-inf")) -> CompletedRequests:
        """Requests completed in (since_t, now], as far back as keep_history_s allows."""
        chunks: list[Chunk] = []
        for r in self._replicas:
            self._flush(r)
            chunks.extend(r.history)
        chunks.extend(self._retired_history)
        allc = CompletedRequests.concat([c for last, c in chunks if last > since_t])
        return allc.select((allc.completion > since_t) & (allc.completion <= self.now))

    # --- internals --------------------------------------------------------------------------------

    def _start_replica(self) -> None:
        """A replica asked for now: it starts at once, or waits for a node asked for it."""
        if self.startup is None:
            self._add_replica(ready_at=self.now + self.cold_start_s, started_at=self.now)
            return
        self._add_replica(ready_at=math.inf, started_at=math.inf)
        if not self._place(self.now):
            heapq.heappush(self._nodes_due, self.now + self.startup.node_wait(self._start_rng))

    def _place(self, t: float) -> bool:
        """Give free GPUs to waiting replicas, oldest first, at *t*; whether none is left waiting. A
        draining replica holds its GPU until it is gone."""
        if self.startup is None:
            return True
        held = sum(1 for r in self._replicas if not math.isinf(r.started_at))
        waiting = [r for r in self._replicas if r.removed_at is None and math.isinf(r.started_at)]
        for r in waiting:
            if held >= self._gpus:
                return False
            r.started_at, r.ready_at = t, t + self.startup.container(self._start_rng)
            self._schedule_outages(r)
            held += 1
        return True

    def _add_replica(self, ready_at: float, started_at: float) -> None:
        i = self._next_index
        self._next_index += 1
        jitter = JitterStream(self.curve.jitter_sigma, self.seed, i)
        counters = ReplicaCounters(name=f"replica-{i}",
                                   batch_counts=np.zeros(self.config.max_batch_size + 1, dtype=np.int64))
        batcher = (TritonBatcher if self.config.scheduler == "triton-2.51" else ReplicaBatcher)(
            self.config, self.curve, jitter)
        if self._ledger is not None:
            batcher.rejections = []
        replica = Replica(i, self.now, ready_at, batcher, counters, started_at=started_at)
        self._replicas.append(replica)
        if math.isfinite(ready_at):
            self._schedule_outages(replica)

    def _schedule_outages(self, r: Replica) -> None:
        """Draw how *r* loses readiness once it serves (its `ready_at` known), where faults are modelled."""
        if self.faults is None:
            return
        faults = self.faults
        crash_loops = (self._crash_loops_left > 0 and not faults.crash_serving
                       and r.started_at >= faults.crash_from_s)
        self._crash_loops_left -= crash_loops
        r.outages = faults.schedule(self._fault_rng, r.ready_at, crash_loops, self._restart_s)

    def _restart_s(self) -> float:
        """A restarted container's start-to-Ready time."""
        return self.cold_start_s if self.startup is None else self.startup.container(self._fault_rng)

    def _crash_serving(self, to_t: float) -> None:
        """Where the faults crash pods already serving (`ReadinessFaults.crash_serving`) and simulated
        time reaches their moment: make the oldest pods Ready then loop from it."""
        faults = self.faults
        if faults is None or not faults.crash_serving or self._crash_loops_left <= 0 \
                or faults.crash_from_s > to_t:
            return
        at = max(self.now, faults.crash_from_s)
        serving = sorted((r for r in self._replicas if r.ready(at)), key=lambda r: r.index)
        for r in serving[:self._crash_loops_left]:
            r.outages = faults.crash_while_serving(r.ready_at, self._restart_s)
        self._crash_loops_left = 0

    def _flush(self, r: Replica) -> None:
        rec = r.batcher.flush(self.now)
        r.counters.add(rec, self.config.max_batch_size)
        if not len(rec.size):
            return
        if self.keep_history_s is None or self.keep_history_s > 0:
            chunk = CompletedRequests.from_records(rec)
            r.history.append((float(chunk.completion.max()), chunk))
            self._trim_history(r.history)

    def _trim_history(self, history: list[Chunk]) -> None:
        if self.keep_history_s is None:
            return
        horizon = self.now - self.keep_history_s
        if history and history[0][0] < horizon:
            history[:] = [c for c in history if c[0] >= horizon]

    def _retire_drained(self) -> None:
        keep = []
        for r in self._replicas:
            if r.drained(self.now):
                self._take_rejections(r)
                self._flush(r)
                _accumulate(self._retired, r.counters)
                self._retired.batch_counts += r.counters.batch_counts
                self._retired_alive_s += self.now - r.added_at
                self._retired_history.extend(r.history)
                self._trim_history(self._retired_history)
            else:
                keep.append(r)
        self._replicas = keep

    def _take_offered(self, to_t: float, side: str = "right") -> np.ndarray:
        """Offered arrivals up to *to_t* (inclusive with side='right'), removed from the buffer."""
        off = self._offered
        end = int(np.searchsorted(off, to_t, side=side))  # type: ignore[call-overload]
        start = self._offered_pos
        self._offered_pos = max(start, end)
        taken = off[start:end] if end > start else off[:0]
        if not len(self._retrying):
            return taken
        k = int(np.searchsorted(self._retrying, to_t, side=side))  # type: ignore[call-overload]
        retries, self._retrying = self._retrying[:k], self._retrying[k:]
        return np.sort(np.concatenate([taken, retries]), kind="stable") if len(retries) else taken

    def _refuse(self, x: np.ndarray) -> None:
        """*x* found no Ready replica: refused at once (a connection refused, or a 503 from the proxy)."""
        self._dropped += len(x)
        if self._ledger is not None:
            self._refused.append((x, x))

    def _take_rejections(self, r: Replica) -> None:
        rejected = r.batcher.rejections
        if rejected:
            for when, arrivals in rejected:
                self._refused.append((np.asarray(arrivals), np.full(len(arrivals), when)))
            rejected.clear()

    def _retry_refused(self) -> None:
        """Turn what was refused since the last step into retries (those with retries left)."""
        for r in self._replicas:
            self._take_rejections(r)
        if not self._refused or self._ledger is None:
            return
        attempts = np.concatenate([a for a, _ in self._refused])
        when = np.concatenate([w for _, w in self._refused])
        self._refused.clear()
        retries = self._ledger.refused(attempts, when, self.now)
        if len(retries):
            self._retrying = np.sort(np.concatenate([self._retrying, retries]), kind="stable")

    def _ready_changes(self, to_t: float) -> list[float]:
        """The times in (now, *to_t*] a replica joins or leaves the endpoints."""
        changes = {r.ready_at for r in self._replicas if r.removed_at is None and self.now < r.ready_at <= to_t}
        for r in self._replicas:
            if r.outages is not None and r.removed_at is None:
                changes.update(r.outages.changes(self.now, to_t))
        return sorted(changes)

    def _route_until(self, to_t: float) -> None:
        """Route offered arrivals <= to_t, in segments between readiness changes: each segment's to the
        replicas Ready at its start."""
        segment_start = self.now
        for boundary in self._ready_changes(to_t):
            ready = [r for r in self._replicas if r.ready(segment_start)]
            self._route(self._take_offered(boundary, side="left"), ready)
            segment_start = boundary
        self._route(self._take_offered(to_t), [r for r in self._replicas if r.ready(to_t)])

    def _route(self, x: np.ndarray, ready: list[Replica]) -> None:
        if not len(x):
            return
        m = len(ready)
        if m == 0:
            self._refuse(x)
            return
        if self.routing == "random":
            pick = self._rng.integers(0, m, len(x))
            for j, r in enumerate(ready):
                r.batcher.arrivals.extend(x[pick == j].tolist())
            return
        for j, r in enumerate(ready):
            r.batcher.arrivals.extend(x[(j - self._rr) % m:: m].tolist())
        self._rr = (self._rr + len(x)) % m

    def _advance_in_quanta(self, to_t: float) -> None:
        """Route each quantum's arrivals from the replicas' state at its start: to the one with the
        fewest outstanding requests (least-loaded), or over the clients' connections (connections)."""
        t = self.now
        while t < to_t:
            t_end = min(to_t, t + self.routing_quantum_s)
            for r in self._replicas:
                r.batcher.run(t)
            x = self._take_offered(t_end)
            if len(x):
                ready = [r for r in self._replicas if r.ready(t)]
                if not ready:
                    self._refuse(x)
                elif self.routing == "connections":
                    loads = [r.batcher.pending + r.batcher.in_flight(t) for r in ready]
                    pick = self._connections.route(len(x), [r.index for r in ready], sum(loads))
                    for j, r in enumerate(ready):
                        r.batcher.arrivals.extend(x[pick == j].tolist())
                else:
                    heap = [(r.batcher.pending + r.batcher.in_flight(t), j) for j, r in enumerate(ready)]
                    heapq.heapify(heap)
                    for a in x.tolist():
                        load, j = heap[0]
                        ready[j].batcher.arrivals.append(a)
                        heapq.heapreplace(heap, (load + 1, j))
            t = t_end
        for r in self._replicas:
            r.batcher.run(to_t)


_SUMMED = ("requests", "failures", "inference_count", "exec_count", "request_duration_s", "queue_duration_s",
           "compute_duration_s", "pending", "busy_seconds")


def _accumulate(total: ReplicaCounters, part: ReplicaCounters) -> None:
    for name in _SUMMED:
        setattr(total, name, getattr(total, name) + getattr(part, name))


def _copy(c: ReplicaCounters) -> ReplicaCounters:
    return dataclasses.replace(c, batch_counts=c.batch_counts.copy())
