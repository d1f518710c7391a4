"""Replicas that lose readiness after they first serve: probe flaps and a crash-looping container.

Kubernetes takes a pod that is not Ready out of its Service's endpoints; kube-state-metrics'
`kube_pod_status_ready_time` then moves to the *last* time it became Ready, while `kube_pod_start_time`
stays. A recommender that learns its cold start as ready time minus start time reads a pod's age after
any such loss (`autoscaler/coldstart.py` guards against it). Two ways clusters do this:

- a readiness flap: the probe fails `failureThreshold` times in a row (a timeout under load, a GPU
  hiccup) and passes again a little later. Each Ready pod flaps at random, *flaps_per_hour* on average
  (Poisson), and is out of the endpoints for *flap_s* each time;
- a crash loop: a container that crashes *crash_up_s* after it becomes Ready (out of memory under load,
  a bad GPU), which the kubelet restarts after CrashLoopBackOff's back-off (10 s, doubled per restart,
  at most 5 min), and which then takes its start-to-Ready time again. The first *crash_looping* pods
  that start at or after *crash_from_s* crash-loop: pods that land on a bad node. (A scenario starts
  them at its surge, so that a policy that happened to add and remove pods before it is not spared.)
  With *crash_serving*, they are instead the *crash_looping* oldest pods Ready at *crash_from_s*, which
  crash there and loop from then on: a GPU that fails under pods already serving, so that the fleet
  loses capacity it had sized itself on rather than capacity it was still adding. The oldest, because
  a ReplicaSet scaling down deletes them last: the fault stays until a scale-down takes the looping
  pods while they are not Ready.

A pod out of the endpoints still works off what it has queued: Triton keeps running through a failed
probe. A crashed container would lose its queue instead; the model keeps it served, so a crash loop
costs at least what it shows here.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tidescale.contracts.errors import UsageError

BACKOFF_S, BACKOFF_MAX_S = 10.0, 300.0  # the kubelet's CrashLoopBackOff: 10 s, doubled per restart, capped


@dataclass(frozen=True)
class ReadinessFaults:
    """How a scenario's pods lose readiness once they serve (module docstring). The defaults lose none."""

    flaps_per_hour: float = 0.0
    flap_s: float = 30.0  # the probe's periodSeconds x failureThreshold, about
    crash_looping: int = 0
    crash_up_s: float = 60.0
    crash_from_s: float = 0.0  # simulated time from which the pods that start crash-loop
    crash_serving: bool = False  # the oldest pods serving at crash_from_s loop, not those started after

    def __post_init__(self) -> None:
        checks = {"flaps_per_hour": self.flaps_per_hour >= 0, "flap_s": self.flap_s > 0,
                  "crash_looping": self.crash_looping >= 0, "crash_up_s": self.crash_up_s > 0}
        bad = [k for k, ok in checks.items() if not ok]
        values = (self.flaps_per_hour, self.flap_s, self.crash_up_s, self.crash_from_s)
        if bad or not all(math.isfinite(v) for v in values):
            raise UsageError(f"invalid readiness faults ({', '.join(bad) or 'a value is not finite'}): {self}")

    def describe(self, crash_from: str | None = None) -> str:
        """The page's words for them; *crash_from* names the moment `crash_from_s` stands for."""
        parts = []
        if self.flaps_per_hour:
            parts.append(f"each Ready pod out of its endpoints {self.flaps_per_hour:g} times an hour "
                         f"(Poisson) for {self.flap_s:g} s")
        if self.crash_looping:
            since = crash_from or f"{self.crash_from_s:g} s"
            which = (f"the {self.crash_looping} oldest pod(s) serving at {since} crash there and loop"
                     if self.crash_serving else
                     f"the first {self.crash_looping} pod(s) started from {since} on crash-loop")
            parts.append(f"{which}: {self.crash_up_s:g} s Ready, "
                         f"then CrashLoopBackOff ({BACKOFF_S:g} s doubling to {BACKOFF_MAX_S:g} s) and a start again")
        return "; ".join(parts)

    def schedule(self, rng: np.random.Generator, first_ready: float, crash_loops: bool,
                 restart_s: Callable[[], float]) -> Outages | None:
        """The not-Ready windows of a pod first Ready at *first_ready* (None: it never loses readiness);
        *restart_s* draws a restarted container's start-to-Ready time."""
        if crash_loops:
            return self._crash_loop(first_ready, restart_s)
        if self.flaps_per_hour <= 0:
            return None
        mean_gap = 3600.0 / self.flaps_per_hour
        return Outages(first_ready, lambda up, _k: (up + float(rng.exponential(mean_gap)), self.flap_s))

    def crash_while_serving(self, first_ready: float, restart_s: Callable[[], float]) -> Outages:
        """The not-Ready windows of a pod first Ready at *first_ready* that crashes at `crash_from_s`
        and loops from then on (*crash_serving*); its readiness losses before are forgone."""
        return self._crash_loop(first_ready, restart_s, first_crash_s=self.crash_from_s)

    def _crash_loop(self, first_ready: float, restart_s: Callable[[], float],
                    first_crash_s: float | None = None) -> Outages:
        """A crash loop's windows: each crash `crash_up_s` after the pod is Ready again (the first at
        *first_crash_s* instead, where given), then the back-off and a restart."""
        def next_outage(up: float, k: int) -> tuple[float, float]:
            crash = up + self.crash_up_s if k or first_crash_s is None else max(first_crash_s, up)
            return crash, backoff_s(k) + restart_s()

        return Outages(first_ready, next_outage, waiting_s=backoff_s)


def backoff_s(restarts: int) -> float:
    """CrashLoopBackOff's wait before the restart after *restarts* earlier ones."""
    return min(BACKOFF_MAX_S, BACKOFF_S * 2.0 ** min(restarts, 16))


# (the time it was Ready again, how many windows before) -> (the next window's start, its length)
NextOutage = Callable[[float, int], tuple[float, float]]


class Outages:
    """One pod's not-Ready windows after its first Ready, drawn as simulated time reaches them; they
    follow one another, so their starts and ends interleave in order. A crash loop's windows each
    open with *waiting_s*(k), the k-th back-off, while its container waits in CrashLoopBackOff
    (`kube_pod_container_status_waiting_reason`); a flap's have none."""

    def __init__(self, first_ready: float, next_outage: NextOutage,
                 waiting_s: Callable[[int], float] | None = None) -> None:
        self.first_ready = first_ready
        self._next = next_outage
        self._waiting_s = waiting_s
        self.starts: list[float] = []
        self.ends: list[float] = []

    def _draw_past(self, t: float) -> None:
        """Draw windows until one starts after *t*."""
        while not self.starts or self.starts[-1] <= t:
            up = self.ends[-1] if self.ends else self.first_ready
            start, length = self._next(up, len(self.starts))
            self.starts.append(start)
            self.ends.append(start + length)

    def down(self, t: float) -> bool:
        """Out of the endpoints at *t* (its first Ready not reached is not this: see `Replica.ready`)."""
        self._draw_past(t)
        i = bisect.bisect_right(self.starts, t) - 1
        return i >= 0 and t < self.ends[i]

    def last_ready(self, t: float) -> float | None:
        """When it last became Ready at or before *t* (`kube_pod_status_ready_time`); None while down."""
        if t < self.first_ready or self.down(t):
            return None
        i = bisect.bisect_right(self.ends, t) - 1
        return self.ends[i] if i >= 0 else self.first_ready

    def waited_within(self, t: float, window_s: float) -> bool:
        """Whether its container waited in CrashLoopBackOff at some time in (*t* - *window_s*, *t*]:
        what `max_over_time` of the waiting reason over that window reads."""
        if self._waiting_s is None or t < self.first_ready:
            return False
        self._draw_past(t)
        last = bisect.bisect_right(self.starts, t) - 1  # the newest back-off begun: older ones ended before it
        return last >= 0 and self.starts[last] + self._waiting_s(last) > t - window_s

    def restarts(self, t: float) -> int:
        """Its container's restarts by *t* (`kube_pod_container_status_restarts_total`): one a crash;
        a flap restarts nothing."""
        if self._waiting_s is None or t < self.first_ready:
            return 0
        self._draw_past(t)
        return bisect.bisect_right(self.starts, t)

    def changes(self, after: float, until: float) -> list[float]:
        """The times in (*after*, *until*] it leaves or rejoins the endpoints, in order."""
        self._draw_past(until)
        lo_s, hi_s = bisect.bisect_right(self.starts, after), bisect.bisect_right(self.starts, until)
        lo_e, hi_e = bisect.bisect_right(self.ends, after), bisect.bisect_right(self.ends, until)
        return sorted(self.starts[lo_s:hi_s] + self.ends[lo_e:hi_e])
