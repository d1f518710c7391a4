"""The cold start as the cluster measured it: each pod's *first* start-to-Ready time (pure).

kube-state-metrics' `kube_pod_status_ready_time` is the Ready condition's *last* transition. After
one readiness flap (a probe timeout under load, a GPU hiccup) a pod's ready time minus its start
time is the pod's age, not its cold start, and the slowest pod's value made every rising trend
project over hours: the trend cap doubled the fleet. So each pod's value is the smallest this
tracker has seen for it (a flap only ever moves the ready time later); pods seen starting (not yet
Ready when first seen, or started after the recommender) are preferred over pods found already
running, whose first reading may follow a flap; and the cold start is the median of the most
recently started pods, so one odd pod moves nothing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

MAX_TRACKED_PODS = 64  # the most recently started pods kept
RECENT_PODS = 10  # the median is over this many of them


@dataclass
class _Pod:
    start: float  # kube_pod_start_time
    cold_start: float | None  # the smallest ready - start seen; None before its first Ready
    seen_start: bool  # seen before its first Ready (or started after the tracker did)


class FirstReadyTracker:
    """Each pod's first start-to-Ready time, from kube-state-metrics' start and ready times."""

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at  # Unix time: pods started later were seen starting
        self.pods: dict[str, _Pod] = {}

    def observe(self, times: Mapping[str, tuple[float, float | None]]) -> None:
        """*times*: pod -> (start time, ready time or None while not Ready), Unix seconds."""
        for pod, (start, ready) in times.items():
            if not math.isfinite(start):
                continue
            known = self.pods.get(pod)
            if known is None or known.start != start:  # new, or another pod of the same name
                known = self.pods[pod] = _Pod(start, None, ready is None or start >= self.started_at)
            if ready is not None and math.isfinite(ready) and ready >= start:
                took = ready - start
                known.cold_start = took if known.cold_start is None else min(known.cold_start, took)
        if len(self.pods) > MAX_TRACKED_PODS:
            newest = sorted(self.pods, key=lambda p: self.pods[p].start)[-MAX_TRACKED_PODS:]
            self.pods = {p: self.pods[p] for p in newest}

    def cold_start(self) -> float | None:
        """The median first start-to-Ready time of the most recently started pods (those seen
        starting, where there are any); None before any pod was Ready."""
        ready = [p for p in self.pods.values() if p.cold_start is not None]
        trusted = [p for p in ready if p.seen_start] or ready
        recent = sorted(trusted, key=lambda p: p.start)[-RECENT_PODS:]
        return statistics.median(p.cold_start for p in recent if p.cold_start is not None) if recent else None
