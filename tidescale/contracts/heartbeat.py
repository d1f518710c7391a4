"""Heartbeats: a loop that stops making progress fails liveness, not only a loop that dies.

A loop stuck in a call that never returns (a Prometheus that trickles one byte every 2 s, a read
with no overall deadline) is alive to every supervisor: no exception, no exit. Its service kept
answering `/healthz` with ok while its exported values went stale. Each such loop beats when it
finishes a round; `/healthz` fails once one has not beaten for its `stall_after_s`, and Kubernetes
restarts the pod, which is what a stuck thread needs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable


class Heartbeat:
    """When a loop last finished a round (counted from its creation until the first)."""

    def __init__(self, name: str, stall_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not stall_after_s > 0:
            raise ValueError("stall_after_s must be positive")
        self.name = name
        self.stall_after_s = stall_after_s
        self.clock = clock
        self._last = clock()
        self.beats = 0  # rounds finished (each loop beats from one thread only)

    def beat(self) -> None:
        self._last = self.clock()  # one float store: safe to read from any thread
        self.beats += 1

    def age_s(self) -> float:
        return self.clock() - self._last

    def stalled(self) -> bool:
        return self.age_s() > self.stall_after_s


def stall_after(stall_after_s: float, interval_s: float, rounds: int = 3) -> float:
    """The stall limit of a loop that runs every *interval_s*: the setting, but never fewer than
    *rounds* intervals (a slow setting of the interval must not make every round look stuck)."""
    return max(stall_after_s, rounds * interval_s)


def stalled(heartbeats: Iterable[Heartbeat]) -> list[str]:
    """What `/healthz` says of each stalled loop: `evaluation (no round for 312 s)`."""
    return [f"{h.name} (no round finished for {h.age_s():.0f} s)" for h in heartbeats if h.stalled()]
