"""What the service knows of one target between passes, and the rules that keep it honest.

The published count and what was asked for recently (`publish`) are what a replica reading is
checked against (`replica_disagreement`): a recommender that believes fewer replicas run than do
sees any lower need as a scale-up from there, and drops the fleet past its down delay.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from dataclasses import dataclass

from tidescale.autoscaler.coldstart import FirstReadyTracker
from tidescale.autoscaler.fastpath import FastReading, FastWindow
from tidescale.autoscaler.hpaclock import HpaReadClock
from tidescale.autoscaler.queries import TargetQueries
from tidescale.autoscaler.recommend import Recommender
from tidescale.autoscaler.settings import TargetSettings

# How long a published count may take to show as the Deployment's replicas in kube-state-metrics
# (the HPA's sync, its metric's scrape, kube-state-metrics' scrape): in direct mode a reading below
# every count asked for over this long (or 4 intervals) cannot be the Deployment's.
REPLICA_LAG_S = 120.0


def replica_lag_s(interval_s: float) -> float:
    """How long a published count is remembered for the direct-mode replica check."""
    return max(REPLICA_LAG_S, 4 * interval_s)


@dataclass
class TargetState:
    """What the service knows and exports about one target."""

    settings: TargetSettings
    recommender: Recommender
    queries: TargetQueries
    hpa: str  # the HPA that applies the answer (`Target.hpa`: its hpa_name, else the Deployment's name)
    published: int | None = None
    failsafe: str | None = None
    detail: str = ""
    last_success: float | None = None
    cold_start_source: str = "configured"
    decision: str = "hold_missing_data"
    pods: dict[str, str] = dataclasses.field(default_factory=dict)  # the fast path's pods: name -> host:port
    discovered_at: float = -math.inf  # when `pods` were last found (an evaluation, or the fast path's own)
    fast: FastWindow | None = None
    fast_reading: FastReading | None = None  # the fast path's last round
    current: int | None = None  # the Deployment's replicas at the last observation
    scale_write_failures: int = 0  # direct mode: failed writes of the scale subresource
    failing_reads: set[str] = dataclasses.field(default_factory=set)  # Kubernetes reads whose last try failed
    evaluated_at: float | None = None  # when its last slow evaluation ended (good or held), by the service's clock
    first_ready: FirstReadyTracker = dataclasses.field(default_factory=lambda: FirstReadyTracker(time.time()))
    asked: deque[tuple[float, int]] = dataclasses.field(default_factory=deque)  # (t, published) over REPLICA_LAG_S
    replica_disagreements: int = 0  # evaluations whose replica reading disagreed (held, counted)
    wrote: bool = False  # direct mode: this service has written the scale (its counts are not only readings)
    rewrite: bool = False  # direct mode: the Deployment reads below every count asked for; write it again
    hpa_reads: HpaReadClock = dataclasses.field(default_factory=HpaReadClock)  # when the HPA reads the answer

    def publish(self, count: int, now: float, lag_s: float) -> None:
        """Publish *count* (under the service's lock), remembering it for `lag_s` for the replica check."""
        self.published = count
        self.asked.append((now, count))
        while self.asked and self.asked[0][0] < now - lag_s:
            self.asked.popleft()

    def replica_disagreement(self, reading: int, hpa: tuple[int, int] | None, scale_mode: str,
                             lag_s: float) -> str | None:
        """Why the Deployment's replica *reading* cannot be the fleet's, or None (under the lock).

        Only a reading that is too *low* matters. Too low is 0 or less, less than the HPA reports both
        as its current and its desired count, or (direct mode, where the recommender writes the count
        itself) less than every count it asked for over the time one takes to show, once it has written
        one: until then its counts are readings it took as found (a restart's first answer may be a
        stale one, from before the previous writer's last scale-down), and a lower one is newer."""
        if self.published is None:
            return None  # the first answer: the fleet as found is all there is
        if reading <= 0:
            return f"the Deployment reads {reading} replicas where {self.published} were asked for"
        if hpa is not None:
            if reading < min(hpa):
                return (f"the Deployment reads {reading} replicas where its HPA reports {hpa[0]} "
                        f"(desired {hpa[1]})")
            return None
        if scale_mode == "direct" and self.wrote and self.asked:
            lowest = min(n for _, n in self.asked)
            if reading < lowest:
                return (f"the Deployment reads {reading} replicas, fewer than the {lowest} or more asked for "
                        f"over the last {lag_s:g} s")
        return None
