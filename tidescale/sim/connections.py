"""Clients that keep their connections, behind a Service that balances connections (kube-proxy).

A ClusterIP Service picks a Ready pod when a connection opens, not per request. An HTTP/1.1 client
with keep-alive (httpx, requests, Triton's HTTP client) or a gRPC client (one HTTP/2 connection)
sends its requests on the connections it holds, so the pods it first reached keep its load: pods
that become Ready later get only the connections opened after that. `bench closed-loop` saw it on
the local cluster: the first pod served 99 % of a 3x surge while two or three were Ready.

The model, per routing step: connections to pods that left the endpoints are closed (the clients
reconnect); the pool grows to the requests outstanding plus one, each new connection on a Ready pod
picked at random; idle connections beyond *keepalive* close; each request rides one of the open
connections at random (all as likely).
"""

from __future__ import annotations

import numpy as np

from tidescale.contracts.errors import UsageError


class ClientConnections:
    """The clients' open connections per pod (by the simulator's replica index)."""

    def __init__(self, keepalive: int, rng: np.random.Generator) -> None:
        if keepalive < 1:
            raise UsageError(f"keep-alive connections must be >= 1, got {keepalive}")
        self.keepalive = keepalive
        self._rng = rng
        self.held: dict[int, int] = {}

    def route(self, requests: int, ready: list[int], outstanding: int) -> np.ndarray:
        """Which of *ready* (replica indices) each of *requests* new requests goes to (positions in
        *ready*), with *outstanding* requests still open on the connections."""
        alive = set(ready)
        self.held = {i: c for i, c in self.held.items() if i in alive and c > 0}
        pool = sum(self.held.values())
        need = outstanding + 1
        if pool < need:
            for i in self._rng.choice(ready, size=need - pool).tolist():
                self.held[i] = self.held.get(i, 0) + 1
        elif pool > max(need, self.keepalive):
            self._close(pool - max(need, self.keepalive))
        ids = list(self.held)
        weights = np.asarray([self.held[i] for i in ids], dtype=float)
        picks = self._rng.choice(len(ids), size=requests, p=weights / weights.sum())
        position = {r: k for k, r in enumerate(ready)}
        return np.asarray([position[ids[j]] for j in range(len(ids))], dtype=np.int64)[picks]

    def _close(self, n: int) -> None:
        """Close *n* idle connections, each pod's in proportion to what it holds."""
        ids = list(self.held)
        slots = np.repeat(np.arange(len(ids)), [self.held[i] for i in ids])
        for j in self._rng.choice(slots, size=n, replace=False).tolist():
            self.held[ids[j]] -= 1
        self.held = {i: c for i, c in self.held.items() if c > 0}
