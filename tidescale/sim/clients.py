"""Clients that retry a refused request, as a service mesh retries for them (issue 45, item 11).

Triton answers a request its queue policy rejects (`timeout_action: REJECT`) with HTTP 503
(gRPC UNAVAILABLE), and a Service with no Ready endpoint refuses the connection. Envoy, and so
Istio's default route, retries both: two retries, fully jittered exponential back-off from a
25 ms base, capped at ten times the base. A retry is a new arrival at the fleet. Triton counts
every attempt, so the rejections that tidescale reads as demand count a retried request once per
attempt, and the load grows while the fleet is short. The client sees one request, from its first
attempt to the answer of the last, or none if every attempt was refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tidescale.autoscaler.recommend import MAX_CLIENT_RETRIES
from tidescale.contracts.errors import UsageError
from tidescale.sim.results import FleetCounters


class FleetSimLike(Protocol):
    """What capped clients need of the fleet (FleetSim; a protocol, since the fleet imports this module)."""

    @property
    def now(self) -> float: ...

    def counters(self) -> FleetCounters: ...

    def offer(self, arrival_times: np.ndarray) -> None: ...


@dataclass(frozen=True)
class ClientRetries:
    """Retries per request (*max_retries*, after the first attempt) and Envoy's back-off: before retry
    k, a uniform wait in [0, min(*max_s*, (2^k - 1) × *base_s*)]."""

    max_retries: int = 2
    base_s: float = 0.025
    max_s: float = 0.25

    def __post_init__(self) -> None:
        if not 0 <= self.max_retries <= MAX_CLIENT_RETRIES:
            raise UsageError(f"client retries must be 0..{MAX_CLIENT_RETRIES}, got {self.max_retries}")
        if not (math.isfinite(self.base_s) and math.isfinite(self.max_s) and 0 < self.base_s <= self.max_s):
            raise UsageError(f"retry back-off needs 0 < base <= max, got base {self.base_s} s, max {self.max_s} s")

    def backoff(self, retry: int, rng: np.random.Generator, n: int) -> np.ndarray:
        """*n* waits before retry number *retry* (1 for the first)."""
        return rng.uniform(0.0, min(self.max_s, (2.0 ** retry - 1.0) * self.base_s), n)


class RetryLedger:
    """Which first attempt each retry belongs to, while it is in flight: the fleet sees attempts, the
    client's latency runs from the first. Bounded by the retries in flight (an entry leaves when its
    attempt is answered or refused)."""

    def __init__(self, retries: ClientRetries, seed: int) -> None:
        self.retries = retries
        self._rng = np.random.default_rng([seed, 503])
        self._origin: dict[float, tuple[float, int]] = {}  # attempt arrival -> (first arrival, retry number)

    def __len__(self) -> int:
        return len(self._origin)

    def refused(self, attempts: np.ndarray, refused_at: np.ndarray, now: float) -> np.ndarray:
        """The retries of the *attempts* refused at *refused_at* (sorted arrival times, none before *now*);
        attempts out of retries are dropped for good."""
        origin = self._origin
        firsts, numbers = [], []
        for a in attempts.tolist():
            first, k = origin.pop(a, (a, 0))
            firsts.append(first)
            numbers.append(k + 1)
        if not firsts:
            return np.empty(0)
        number = np.asarray(numbers)
        keep = number <= self.retries.max_retries
        out = np.empty(int(keep.sum()))
        placed = 0
        for k in np.unique(number[keep]).tolist():
            sel = keep & (number == k)
            out[placed:placed + int(sel.sum())] = np.maximum(
                now, refused_at[sel] + self.retries.backoff(k, self._rng, int(sel.sum())))
            placed += int(sel.sum())
        first = np.asarray(firsts)[keep][np.argsort(number[keep], kind="stable")]
        retry_number = np.sort(number[keep], kind="stable")
        order = np.argsort(out, kind="stable")
        out, first, retry_number = out[order], first[order], retry_number[order]
        for j in range(len(out)):
            t = float(out[j])
            while t in origin or (j and t <= out[j - 1]):  # an attempt time names one request
                t = math.nextafter(t, math.inf)
            out[j] = t
            origin[t] = (float(first[j]), int(retry_number[j]))
        return out

    def first_attempts(self, arrivals: np.ndarray) -> np.ndarray:
        """The first attempt's arrival of each answered attempt in *arrivals* (entries leave the ledger)."""
        if not self._origin:
            return arrivals
        origin = self._origin
        return np.fromiter((origin.pop(a, (a, 0))[0] for a in arrivals.tolist()), float, len(arrivals))


@dataclass(frozen=True)
class OpenRequestCap:
    """Clients that hold at most *max_open* requests open and drop, unsent, any request due while they
    do: the demo's load generator (`LoadGenerator(max_in_flight=...)`). Beyond what a fleet serves,
    the cap, not the fleet, bounds the latency of what is served: a request waits behind at most
    *max_open* others."""

    max_open: int
    step_s: float = 0.05  # how often the clients look at what is still open

    def __post_init__(self) -> None:
        if self.max_open < 1:
            raise UsageError(f"the clients' cap on open requests must be >= 1, got {self.max_open}")
        if not (math.isfinite(self.step_s) and self.step_s > 0):
            raise UsageError(f"the clients' step must be > 0 s, got {self.step_s}")


class CappedSender:
    """Offers a fleet the arrivals that capped clients send, step by step as the fleet answers.

    A request is open from its send until the fleet completes or refuses it (a batch counts as
    answered once dispatched, so the open count reads up to a batch per replica low; the clients'
    own timeout is not modelled). What is due while *max_open* are open is never sent: it stays
    unserved, as the load generator records it `dropped_max_in_flight`."""

    def __init__(self, cap: OpenRequestCap, arrivals: np.ndarray) -> None:
        self.cap = cap
        self.arrivals = arrivals
        self._pos = 0
        self.sent = 0
        self.not_sent = 0

    def offer_until(self, sim: FleetSimLike, to_t: float, advance: Callable[[float], None]) -> None:
        """Send what is due up to *to_t*, *advance* (the fleet, or the scrapes around it) step by step."""
        t = sim.now
        while t < to_t:
            t = min(to_t, t + self.cap.step_s)
            c = sim.counters()
            room = max(0, self.cap.max_open - (self.sent - (c.requests + c.failures + c.dropped)))
            end = int(np.searchsorted(self.arrivals, t, side="right"))
            due = self.arrivals[self._pos:end]
            self._pos = end
            send = due[:room]
            self.not_sent += len(due) - len(send)
            if len(send):
                sim.offer(send)
                self.sent += len(send)
            advance(t)
