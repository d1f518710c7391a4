"""When the HPA next reads the recommender's answer, learnt from the reads it was seen to make.

A panic that waits for a second fast reading skips the Azure trace's 2 s bursts, but through an HPA
a wait is only free while the HPA's next read of the answer is further off than the wait: one that
lands after it waits a whole sync (15 s) more. The lulls lost 0.25 points of requests that way
(docs/autoscaler.md). The HPA controller visits each HPA once per sync period, on a phase of its
own, so the reads already seen say when the next ones fall:

- KEDA's `metrics-api` trigger asks the recommender's `/desired` at each sync: the read itself;
- through prometheus-adapter the HPA reads Prometheus, which the recommender never sees; the HPA's
  `status.lastScaleTime` stamps each sync that scaled (to the second), and the answer it applied was
  Prometheus' last scrape of the recommender before it (`ADAPTER_READ_LEAD_S`).

A wait is free only where no read may fall within it. Where the clock does not know, it is not.

Pure: the service feeds it reads and asks it whether a wait is free (`HpaReadClock.wait_is_free`).
"""

from __future__ import annotations

import math
from collections import deque

# kube-controller-manager's --horizontal-pod-autoscaler-sync-period, at its default. Reads that do
# not keep to it (another period) make the clock unknown.
HPA_SYNC_PERIOD_S = 15.0
DRIFT_S = 1.0  # how far a read may fall from where the reads before it put it (the controller's work)
OFF_GRID_S = 3.0  # reads further than this from a grid of the period are on another grid
MAX_PHASES = 2  # the HPA's syncs and KEDA's polls; reads on more grids keep to no period of this length
MAX_READS = 8
MAX_READ_AGE_S = 300.0  # 20 syncs: the controller's phase drifts by its work per sync
# A sync stamped by `lastScaleTime` read the answer Prometheus scraped up to this long before the sync:
# the recommender's scrape interval (the chart's `monitoring.recommender.interval`).
ADAPTER_READ_LEAD_S = 2.0
STAMP_RESOLUTION_S = 1.0  # lastScaleTime is serialized to the second: the sync was up to this later


class HpaReadClock:
    """The reads of one target's answer seen lately, and where the next ones may fall. Each read seen
    spans a window of the cycle: `/desired`'s its instant give or take the drift; a `lastScaleTime`
    stamp's from the scrape before the sync to the second after it. Reads seen as they happen win over
    stamps: KEDA's HPA stamps its scale-ups too, and the two sources need not share a phase."""

    def __init__(self, period_s: float = HPA_SYNC_PERIOD_S) -> None:
        self.period_s = period_s
        self._seen: deque[float] = deque(maxlen=MAX_READS)
        self._stamped: deque[float] = deque(maxlen=MAX_READS)

    def observe(self, t: float) -> None:
        """A read of the answer seen at *t* (`/desired`)."""
        _remember(self._seen, t)

    def observe_scale(self, stamp: float) -> None:
        """A sync that scaled, stamped *stamp* by the HPA (`status.lastScaleTime`)."""
        _remember(self._stamped, stamp)

    def windows(self, now: float) -> list[tuple[float, float]]:
        """Where the recent reads of the better source put a read, one window per read (none: the
        clock does not know)."""
        seen = [(t - DRIFT_S, t + DRIFT_S) for t in self._seen if now - MAX_READ_AGE_S <= t <= now + DRIFT_S]
        if seen:
            return seen
        return [(t - ADAPTER_READ_LEAD_S - DRIFT_S, t + STAMP_RESOLUTION_S + DRIFT_S)
                for t in self._stamped if now - MAX_READ_AGE_S <= t <= now + DRIFT_S]

    def keeps_period(self, reads: list[tuple[float, float]]) -> bool:
        """Whether the reads sit on at most MAX_PHASES grids of the period (their windows' starts within
        OFF_GRID_S of one): the HPA's syncs, and with KEDA its own polls of `/desired`
        (`pollingInterval`, 15 s as the chart ships, on a phase of its own). Reads on more are on
        another period: the grid would lie."""
        if not reads:
            return False
        phases: list[float] = []
        for start, _ in reads:
            if not any(min((start - p) % self.period_s, (p - start) % self.period_s) <= OFF_GRID_S for p in phases):
                phases.append(start)
        return len(phases) <= MAX_PHASES

    def wait_is_free(self, now: float, wait_s: float) -> bool:
        """Whether no read may fall between *now* and *wait_s* later: an answer decided then still
        reaches the HPA's next read. False when the clock does not know (no recent read, or reads on
        more grids than MAX_PHASES): a panic then acts at once, as it does without a confirmation."""
        windows = self.windows(now)
        if not self.keeps_period(windows):
            return False
        for start, end in windows:
            since = (now - start) % self.period_s  # how long ago this window last opened
            if since <= end - start or self.period_s - since < wait_s:
                return False
        return True


def _remember(reads: deque[float], t: float) -> None:
    """*t* among *reads*, unless one within DRIFT_S is there already: the same read seen twice (an HPA
    read twice shows the same stamp twice; KEDA may ask `/desired` more than once per sync). Merged,
    a burst of GETs cannot push the reads of the syncs before it out of the MAX_READS kept. A time not
    finite is no read."""
    if math.isfinite(t) and not any(abs(t - seen) < DRIFT_S for seen in reads):
        reads.append(t)
