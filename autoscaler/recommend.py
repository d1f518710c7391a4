"""The recommender's math: desired replicas from load, capacity, queue and cold start (pure).

desired = ceil((projected rate + backlog / drain time) / (capacity × utilisation)), where the
projected rate looks ahead by the cold start (a replica asked for now helps only once Ready),
extrapolating the recent rate trend upwards only (no further than a level the arrivals held in
the last `return_window_s` while they are still under it), and at least the
count that lets the worst pod clear its backlog within a horizon by diverting new arrivals
(`drain_replicas`; Triton's queues are per pod). Arrivals are completions plus the queue's change
over the same samples, from the 1-minute rate or, when it reads a jump, a short one. Scale-up is
immediate; scale-down needs the lower count to have been enough for `down_delay_s` and to fit at a
lower utilisation (asymmetric hysteresis), judged on the lower of the two windows' rates: on the
way down the short window reads the fall sooner, and the largest need over `down_delay_s` keeps a
passing dip from counting; a scale-down below the level held waits as long as the dips below it
that came back lasted (`dip_hold_s`).
With `headroom` > 1 the fleet never drops below what headroom × the recent floor of the load needs
(standing replicas for a surge faster than detection + cold start), and with a seasonal forecast
(forecast.py: the demand a day or a week ago over the lookahead, at today's level) never below what
that needs, up or down. Capacity starts at the
load-test value and is refined from observed saturation.

Scale-down is measured against the larger of the replicas read and the count last recommended, so
a low or bad replica reading (a stale 3 where 12 run, a 0) never skips the down delay; and it is
refused while the latency SLO burns or while the completions per Ready replica sit at the ceiling
measured while it burned, from which the capacity is learned down (demand a client or Triton's
HTTP front end hides from the queue and the rejection counter still shows as slow requests).
That hidden demand also asks for one more replica at a time once the fleet has settled, while
each one added serves more (`hidden_demand`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tidescale.autoscaler.budget import cheapest_split, check_budget_shares
from tidescale.autoscaler.burst import BurstProfile
from tidescale.autoscaler.falls import line_fit, steady_fall
from tidescale.autoscaler.forecast import Forecast
from tidescale.contracts.errors import UsageError
from tidescale.contracts.slo import QUANTILE_WINDOW_S, SLO_LATENCY_THRESHOLD_S

# The share of a rate window's requests slower than the SLO beyond which they are "slow now": five
# times a P99's budget. Stop 55's "over half" missed stop 56's demo, whose clients waited 8-10 s
# under its overload while 9-30 % of the requests were slow inside Triton (the rest of the wait is
# in its HTTP front end, which its traces do not time), and its fleet went 4 -> 3 -> 2.
SLOW_NOW = 0.05
SIZINGS = ("fixed", "burst", "queue")  # RecommenderConfig.sizing
# The knobs of burst sizing: with the fixed sizing none of them acts.
BURST_KNOBS = ("sizing", "burst_window_s", "burst_smooth_s", "burst_delay_ratio", "burst_late_share",
               "max_burst_factor")
# The knobs of the steady fall (falls.py): with an infinite window neither acts.
FALL_KNOBS = ("fall_window_s", "fall_fit")


@dataclass(frozen=True)
class RecommenderConfig:
    """Tuning of one recommender. The defaults are what ships (the service and the chart use them) and
    what `tidescale bench autoscale` runs: both build this object through `RecommenderSettings`."""

    capacity_rps: float  # per replica at the SLO (from a load-test profile)
    min_replicas: int = 1
    max_replicas: int = 100
    cold_start_s: float = 60.0
    lookahead_extra_s: float = 30.0  # sync period + metric lag on top of the cold start
    trend_window_s: float = 30.0
    queue_window_s: float = 30.0  # queue growth over this window counts as unserved arrivals
    utilisation: float = 0.9  # scale up when the projected load needs more than this share
    down_utilisation: float = 0.8  # scale down only when the smaller fleet runs at most this share
    down_delay_s: float = 60.0  # Knative's stable window; at 120 s the benchmark's fleets cost more, served no more
    drain_s: float = math.inf  # clear a backlog within this long; off: Triton queues are per pod, so new
    # replicas cannot take over requests already queued (the queue's growth still counts as demand)
    max_capacity_gain: float = 1.0  # online refinement bounds, relative to the profile
    min_capacity_ratio: float = 0.5
    p99_window_s: float = QUANTILE_WINDOW_S  # range of the P99 the refinement reads (the recording rule's)
    rate_window_s: float = 60.0  # range of the completion rate (`arrival_rps`)
    fast_window_s: float = 30.0  # range of the short completion rate (`fast_arrival_rps`), when given
    max_drain_factor: float = 2.0  # the drain term asks for at most this many times the rate's need
    fast_jump: float = 1.1  # the short window's estimate wins when it exceeds the long one by this factor
    pod_drain_s: float = 240.0  # drain the worst pod's backlog within this long by diverting new
    # arrivals to more replicas (round robin gives each of N pods 1/N of them); inf turns it off
    headroom: float = 1.0  # keep capacity for this multiple of the recent floor of the load: standing
    # replicas for a surge that arrives faster than detection + cold start (1 = none; docs/autoscaler.md)
    headroom_window_s: float = 600.0  # the floor is the lowest arrival rate over this window
    # Retries the clients (or their mesh: Istio's default route retries 503 twice) make on a refused
    # request: each shows in Triton's rejection counter again, so the attempts are read back to the
    # requests behind them (`first_attempt_rate`). 0: a rejection is a request.
    client_retries: int = 0
    # Panic (the fast path, fastpath.py): when the arrival rate read straight from the pods over
    # `panic_window_s` exceeds `panic_threshold` x what the replicas asked for can carry, scale at once
    # to what that rate needs, and scale down to nothing below it for `panic_hold_s`.
    panic_threshold: float = 1.0
    # Fast readings in a row over the threshold before a panic (1: the first). 2 waits one more
    # reading (2 s) and so skips a burst that is gone by then, but only while the HPA's next read of
    # the answer is known to come after it (`hpaclock`); measured, not shipped: docs/autoscaler.md,
    # "Where the Azure trace's cost goes".
    panic_confirm_readings: int = 1
    panic_window_s: float = 6.0
    panic_hold_s: float = 60.0
    panic_lookahead_extra_s: float = 10.0  # the fast path's lag on top of the cold start
    # The slow path's projection is at most this many times the rate (`projected_rate`). 1.25 since
    # 2026-12-04 (was 2): the fast path's panic meets a step, and the slow path's 2x only overshot
    # after it (docs/benchmarks/autoscale-tuning-trend_cap-1.25.md: 2-4 % fewer replica-hours on nine
    # scenarios, node provisioning 0.27 points of requests fewer for 5 %).
    # While a pod holds a backlog that nothing sheds, the slow path projects under the panic's cap
    # instead (`Recommender.projection_cap`).
    trend_cap: float = 1.25
    panic_trend_cap: float = 2.0  # the same bound on the panic's projection
    panic_trend_window_s: float = 10.0  # the panic's trend: shorter than the slow path's, so the first
    # seconds of a ramp are not averaged with the flat minute before it (the first ask sets the fleet
    # that is Ready one cold start later)
    # Sizing: "fixed" sizes the projected rate at `utilisation` (down: `down_utilisation`) whatever the
    # traffic; "burst" sizes the larger of the projected rate and the rate x the burst factor of the
    # fast path's readings over `burst_window_s` at the full capacity, both ways (burst.py: the margin
    # a fluid queue needs so that at most `burst_late_share` of the arrivals wait `burst_delay_ratio` x
    # the SLO), the fixed pair until the readings span two minutes (`sizing()`). Opt-in:
    # docs/benchmarks/autoscale-burst-sizing.md measures it. "queue" splits the SLO between the
    # server's P99 and the bursts' wait at the cheapest point of `budget_shares` (budget.py; without
    # them, as "burst"). Opt-in: docs/benchmarks/autoscale-tuning-sizing-queue.md measures it.
    sizing: str = "fixed"
    # The server's latency-vs-load curve, from the capacity profile (`budget.shares_from_capacities`):
    # (fraction of the SLO, share of `capacity_rps` a replica carries with its P99 within it).
    budget_shares: tuple[tuple[float, float], ...] = ()
    burst_window_s: float = 600.0
    burst_smooth_s: float = 60.0  # a burst is the rate over its level: the larger mean of either half
    burst_delay_ratio: float = 0.5
    burst_late_share: float = 0.01
    max_burst_factor: float = 2.0
    # A steady fall (falls.py): while the arrivals over the last `fall_window_s` lie on a falling line
    # (R² >= `fall_fit`), a scale-down waits no down delay and fits the smaller fleet at `utilisation`,
    # not `down_utilisation` (inf: off). docs/benchmarks/autoscale-tuning-fall_window_s-240.md measured
    # it before it shipped: the diurnal day 4.2 % cheaper, the cold starts 0.8 %, nothing else changed.
    fall_window_s: float = 240.0
    fall_fit: float = 0.9
    # Replace the target's pods that crash-loop (queries.py), which are in the Deployment's count but
    # serve little, as far as the rest cannot carry the demand at all of their capacity. It costs
    # nothing while no pod loops; docs/benchmarks/autoscale-tuning-replace_crash_looping-False.md
    # measured it while pods do: where the fleet had no room for them, 0.37 points more requests and
    # 5 more of windows within the SLO for 8 % more replica-hours; where it had, 1 % and no change.
    replace_crash_looping: bool = True
    # A rise back to a level the arrivals held within `return_window_s` is projected no further than
    # that level: a return, not a surge (0: off). docs/benchmarks/autoscale-tuning-return_window_s-600.md
    # measured it before it shipped: the lulls 11 % cheaper at more windows within the SLO, the bursty
    # trace 1.8 % (held out: no clear difference), every other scenario identical.
    return_window_s: float = 600.0
    # A climb out of a dip (or within a trend window of its end) up to this share over the level held
    # still reads as that level: the reading that ends a dip carries a second's noise and the queue's
    # refill, and 1 % over the level projected the return as a surge (the lulls' fourth replica).
    # docs/benchmarks/autoscale-tuning-return_tolerance-0.md (0: off).
    return_tolerance: float = 0.05
    # A scale-down below the need of the level held (`return_window_s`) waits as long as the longest dip
    # below it that came back within that window lasted, plus `lookahead_extra_s` (the lag of reading
    # the return and acting on it), at most `dip_hold_s` (0: off; needs the return window). A dip that
    # outlasted it is a fall, and is not learned (`Recommender.track_dips`).
    # docs/benchmarks/autoscale-tuning-dip_hold_s-0.md measured it before it shipped: off, the lulls
    # would lose 4.8 points of requests for 7.8 % more replica-hours; no other scenario clearly moved.
    dip_hold_s: float = 300.0

    def __post_init__(self) -> None:
        if self.capacity_rps <= 0:
            raise UsageError(f"capacity must be > 0 req/s per replica, got {self.capacity_rps}")
        if self.min_replicas < 1 or self.min_replicas > self.max_replicas:
            raise UsageError(f"need 1 <= min replicas <= max replicas, got {self.min_replicas} > "
                             f"{self.max_replicas}" if self.min_replicas > self.max_replicas else
                             f"min replicas must be >= 1, got {self.min_replicas}")
        if not 0 < self.down_utilisation <= self.utilisation <= 1:
            raise UsageError("need 0 < down_utilisation <= utilisation <= 1")
        if self.cold_start_s < 0 or self.down_delay_s < 0 or self.drain_s <= 0 or self.pod_drain_s <= 0 \
                or self.max_drain_factor < 1:
            raise UsageError("cold start and down delay must be >= 0 s, drain times > 0 s, drain factor >= 1")
        check_headroom(self.headroom)
        if not 0 <= self.return_window_s < math.inf:
            raise UsageError(f"return_window_s must be >= 0 s and finite (0: off), got {self.return_window_s}")
        if not 0 <= self.return_tolerance <= 1:
            raise UsageError(f"return_tolerance must be a share from 0 to 1 (0: off), got {self.return_tolerance}")
        if not 0 <= self.dip_hold_s < math.inf:
            raise UsageError(f"dip_hold_s must be >= 0 s and finite (0: off), got {self.dip_hold_s}")
        if not self.headroom_window_s > 0:
            raise UsageError(f"headroom_window_s must be > 0, got {self.headroom_window_s}")
        if not 0 <= self.client_retries <= MAX_CLIENT_RETRIES:
            raise UsageError(f"client_retries must be 0..{MAX_CLIENT_RETRIES}, got {self.client_retries}")
        if self.sizing not in SIZINGS:
            raise UsageError(f"sizing must be one of {', '.join(SIZINGS)}, got {self.sizing!r}")
        object.__setattr__(self, "budget_shares", check_budget_shares(self.budget_shares))
        if not (self.burst_window_s > 0 and self.burst_smooth_s > 0 and self.burst_delay_ratio >= 0
                and 0 <= self.burst_late_share < 1 and self.max_burst_factor >= 1):
            raise UsageError("need burst_window_s > 0, burst_smooth_s > 0, burst_delay_ratio >= 0, "
                             "0 <= burst_late_share < 1 and max_burst_factor >= 1")
        if not (self.panic_threshold > 0 and self.panic_window_s > 0 and self.panic_hold_s >= 0
                and self.panic_trend_window_s > 0 and self.panic_trend_cap >= 1 and self.trend_cap >= 1):
            raise UsageError("need panic_threshold > 0, panic_window_s > 0, panic_trend_window_s > 0, "
                             "panic_hold_s >= 0 and trend caps >= 1")
        if not 1 <= self.panic_confirm_readings <= MAX_PANIC_CONFIRM_READINGS:
            raise UsageError(f"panic_confirm_readings must be 1..{MAX_PANIC_CONFIRM_READINGS}, got "
                             f"{self.panic_confirm_readings}")
        if not (self.fall_window_s > 0 and 0 < self.fall_fit <= 1):
            raise UsageError(f"need fall_window_s > 0 and 0 < fall_fit <= 1, got {self.fall_window_s} and "
                             f"{self.fall_fit}")


MAX_CLIENT_RETRIES = 10
MAX_PANIC_CONFIRM_READINGS = 10  # 20 s of fast readings: past that, the slow path has decided


def first_attempt_rate(completed_rps: float, rejected_rps: float, client_retries: int) -> float:
    """Requests a second behind *completed_rps* + *rejected_rps* attempts, when clients retry a refused
    one up to *client_retries* times. An attempt is refused with probability p = rejected / attempts,
    so a request makes 1 + p + ... + p^retries attempts on average (retries land within a second, in
    the same overload). Without the correction, a fleet refusing most attempts reads up to
    (1 + retries) × its demand and is scaled that far beyond it."""
    attempts = completed_rps + rejected_rps
    if client_retries == 0 or rejected_rps <= 0 or attempts <= 0:
        return attempts
    p = min(1.0, rejected_rps / attempts)
    return attempts / sum(p ** k for k in range(client_retries + 1))


def check_headroom(factor: float, name: str = "headroom") -> None:
    """A headroom multiplies capacity needs: below 1 it would under-provision, inf/NaN mean nothing."""
    if not (math.isfinite(factor) and factor >= 1):
        raise UsageError(f"{name} must be a finite factor >= 1, got {factor}")


@dataclass(frozen=True)
class Observation:
    """What the recommender sees at one evaluation (all from Prometheus, maybe lagging)."""

    t: float
    arrival_rps: float  # requests/s completed (Triton's counters), the queue growth is added here
    queue_depth: float  # pending requests summed over replicas
    ready_replicas: int
    current_replicas: int
    p99_s: float | None = None  # observed P99 (for capacity refinement), if known
    slo_latency_threshold_s: float | None = None
    fast_arrival_rps: float | None = None  # completions over a short rate window (reacts sooner), if known
    max_pod_queue: float | None = None  # max by pod of the pending gauge, if known (else queue / ready)
    rejected_rps: float = 0.0  # requests/s the queue policy rejected (timed out): demand too, never completed
    fast_rejected_rps: float | None = None  # the same over the short window (else rejected_rps)
    unschedulable_pods: int = 0  # the Deployment's pods the scheduler cannot place (kube-state-metrics)
    crash_looping_pods: int = 0  # the Deployment's pods that waited in CrashLoopBackOff lately (queries.py)
    slow_share: float | None = None  # share of the last rate window's requests slower than the SLO, if known
    forecast: Forecast | None = None  # the demand a season ago over the lookahead, at today's level (forecast.py)


@dataclass(frozen=True)
class Recommendation:
    desired: int
    reason: str
    projected_rps: float
    capacity_rps: float
    # The projection's cap when an unshed backlog lifted it above `trend_cap` (`projection_cap`), else
    # None: the Event says so, since a count sized for twice the rate read needs its cause beside it.
    lifted_trend_cap: float | None = None


def trend_slope(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope (units per second) of (t, value) samples; 0 with fewer than 2."""
    line = line_fit(samples)
    return 0.0 if line is None else line.slope


Value = TypeVar("Value")
WINDOW_READINGS = 256  # readings a sliding window keeps at most, about (`append_thinned`)


def append_thinned(readings: deque[tuple[float, Value]], t: float, value: Value, spacing_s: float,
                   merge: Callable[[Value, Value], Value] = lambda _old, new: new) -> None:
    """Append (t, value) to time-ordered *readings*, unless the reading before the newest is less than
    *spacing_s* old: then the newest becomes (t, merge(its value, value)). A window's readings then
    stay within twice window / spacing however short the evaluations' interval, the window's oldest
    reading is never the one dropped, and the newest time is always kept. A deque capped by count
    instead dropped the window's start when evaluations came fast or the window was long, so the
    readings never spanned it and the decision waiting on that span never came."""
    if len(readings) >= 2 and t - readings[-2][0] < spacing_s:
        readings[-1] = (t, merge(readings[-1][1], value))
    else:
        readings.append((t, value))


def queue_growth(samples: list[tuple[float, float]], window_s: float) -> float:
    """Change per second of a gauge over the samples a `[window]` range selector ending at the newest
    sample holds (left-open, as Prometheus selects them for `rate()`): the same samples the
    completion rate over that window came from. 0 with fewer than 2 such samples."""
    if len(samples) < 2:
        return 0.0
    t_end, v_end = samples[-1]
    inside = [(t, v) for t, v in samples if t > t_end - window_s + 1e-9]
    t0, v0 = inside[0]
    return (v_end - v0) / (t_end - t0) if t_end > t0 else 0.0


def asked_replicas(published: int | None, current: int | None) -> int:
    """What the fleet has asked for, which the panic weighs an overload against: the larger of the
    last published count and the Deployment's replicas (counting those not yet Ready, so a scale-up
    already under way is not asked for again)."""
    return max(published or 0, current or 0)


def replicas_for(rate_rps: float, capacity_rps: float, utilisation: float) -> int:
    """Fewest replicas that carry *rate_rps* at *utilisation* of their capacity."""
    if rate_rps <= 0:
        return 0
    return math.ceil(rate_rps / (capacity_rps * utilisation) - 1e-9)


def drain_replicas(rate_rps: float, pod_backlog: float, capacity_rps: float, horizon_s: float,
                   max_replicas: int) -> int:
    """Fewest replicas that let a pod holding *pod_backlog* queued requests clear it within *horizon_s*.

    Triton's queues are per pod and a round-robin Service gives each of N pods rate/N of the
    arrivals, so a backlogged pod drains at capacity - rate/N: new replicas cannot take over its
    queue, but they divert the arrivals that would otherwise wait behind it. Needs
    N >= rate / (capacity - backlog / horizon); when the backlog cannot clear within the horizon
    even with no new arrivals on it, *max_replicas*. 0 without a backlog.
    """
    if pod_backlog <= 0 or rate_rps <= 0 or math.isinf(horizon_s):
        return 0
    spare = capacity_rps - pod_backlog / horizon_s
    if spare <= 0:
        return max_replicas
    return min(max_replicas, math.ceil(rate_rps / spare - 1e-9))


def projected_rate(rate_rps: float, slope: float, lookahead_s: float, cap: float) -> float:
    """The rate *lookahead_s* ahead on a rising *slope*, at most *cap* x the measured rate: a step
    reads as a steep ramp in any window's averages, and projected over a cold start means nothing."""
    return min(rate_rps * cap, rate_rps + max(0.0, slope) * lookahead_s)


def held_return(rate_rps: float, projected_rps: float, level_rps: float, tolerance: float = 0.0) -> float:
    """*projected_rps* for a rate still at or under a *level_rps* the arrivals held minutes ago, at
    most that level: the rise out of a lull, or a bursty trace's climb back, reads as a steep ramp in
    the rate windows, and projected over a cold start it asked for replicas the level never needed
    (the benchmark's lulls: 5 where 3 serve). Past the level the trend is a surge's, untouched, but a
    rate within *tolerance* (a share) over it is still the level's, projected no further than itself:
    the reading that ends a dip carries noise and the queue's refill (`Recommender.returning`)."""
    if rate_rps <= level_rps * (1.0 + tolerance):
        return min(projected_rps, max(level_rps, rate_rps))
    return projected_rps


def reachable_under_tolerance(current: int, desired: int, tolerance: float = 0.1) -> int:
    """The count to publish when the cluster applies a symmetric tolerance (no per-direction field).

    An HPA with tolerance τ cannot land strictly inside (N(1-τ), N(1+τ)) except on N, so a small
    scale-up is rounded out to the smallest reachable count (never under-provision) and a small
    scale-down is held (never scale down by more than asked).
    """
    if desired > current:
        return max(desired, math.floor(current * (1 + tolerance)) + 1)
    if desired < current and desired / current >= 1 - tolerance:
        return current
    return desired


class Recommender:
    """Stateful wrapper around the pure math: keeps the rate history and the hold-down window."""

    def __init__(self, config: RecommenderConfig) -> None:
        self.config = config
        self.capacity_rps = config.capacity_rps
        # Time windows of readings, each thinned to about WINDOW_READINGS (`append_thinned`).
        self._rates: deque[tuple[float, float]] = deque()
        self._floor: deque[tuple[float, float]] = deque()  # (t, arrivals), increasing arrivals: a sliding minimum
        self._peak: deque[tuple[float, float]] = deque()  # (t, arrivals), decreasing arrivals: a sliding maximum
        self._young: deque[tuple[float, float]] = deque()  # (t, arrivals) of the last rate window, not yet a level
        self._down_candidates: deque[tuple[float, int]] = deque()  # (t, need), thinned: `append_thinned`
        self._queue: deque[tuple[float, float]] = deque()
        self._disturbed_at = -math.inf
        self._backlog_at = -math.inf  # when a pod last held more than it serves within the SLO
        self._rejected_at = -math.inf  # when the pods last rejected a request (a queue policy sheds)
        self._fleet: tuple[float, int, int] = (-math.inf, -1, -1)  # (since, Ready, spec) replicas read
        self._panic_until = -math.inf
        self._panic_floor = 0
        self._overloaded_readings = 0  # fast readings in a row over the panic threshold
        self._fast_rates: deque[tuple[float, float]] = deque()
        self._per_replica: deque[tuple[float, float]] = deque()  # (t, completions per Ready replica)
        self.ceiling: tuple[float, float] | None = None  # (t, completions per replica) measured while the SLO burned
        self._latency_step: tuple[int, float] | None = None  # (replicas, completions) at hidden demand's last ask
        self.bursts = BurstProfile(config.burst_window_s, config.burst_smooth_s, config.burst_late_share,
                                   config.max_burst_factor)
        self._slo_s = SLO_LATENCY_THRESHOLD_S  # the SLO the last evaluation was told (bursts' budgets)
        self._fall_rates: deque[tuple[float, float]] = deque()  # thinned to WINDOW_READINGS a window
        self.falling = False  # the arrivals fall steadily (`track_fall`): no hold-down, no band
        self._dip: tuple[float, int] | None = None  # (since, the level's need) of the dip under way
        # (came back at, lasted) of the dips that came back, decreasing durations: a sliding maximum
        self._dips: deque[tuple[float, float]] = deque()
        self._back_at = -math.inf  # when the last dip ended (the up reading needed the level's count again)
        self.last: Recommendation | None = None

    def record_interval(self, t: float, arrival_rps: float | None) -> None:
        """The fast path's reading of the fleet's arrivals over its newest interval (burst sizing's input)."""
        if self.config.sizing != "fixed":
            self.bursts.add(t, arrival_rps)

    def sizing(self, t: float) -> tuple[float, float, float]:
        """(margin, up share, down share): the fleet carries max(projected rate, rate x margin) at the
        share of its capacity, up and down. Fixed: no margin, the fixed pair of shares (the up share
        both ways while the arrivals fall steadily, `track_fall`). Burst: the
        burst factor of the readings held as the margin, all of the capacity both ways.

        The margin and the trend are not multiplied: the margin stands for the swings of the last
        minutes, the projection for a ramp, and a bursty trace's swings are what tilts its 30 s
        trend (sized as their product, the Azure trace's fleet of 3 sat at 4-6). A fixed gap below
        the factor for scale-down kept a fleet of 4 from ever returning to 3 there; the down delay
        and the largest need over it are the hysteresis left.

        Queue (with `budget_shares`): the margin and share of the cheapest split of the SLO between
        the server's P99 and the bursts' wait (`budget.cheapest_split`), both ways."""
        cfg = self.config
        if cfg.sizing == "queue" and cfg.budget_shares:
            split = cheapest_split(cfg.budget_shares, lambda wait_s: self.bursts.factor(t, wait_s), self._slo_s)
            if split is not None:
                return split[0], split[1], split[1]
        factor = None if cfg.sizing == "fixed" else self.bursts.factor(t, cfg.burst_delay_ratio * self._slo_s)
        if factor is None:
            return 1.0, cfg.utilisation, cfg.utilisation if self.falling else cfg.down_utilisation
        return factor, 1.0, 1.0

    def track_fall(self, t: float, arrival_rps: float) -> bool:
        """Record the evaluation's arrival rate and say whether the arrivals fall steadily (`falls.py`):
        then a scale-down waits no down delay and fits at the scale-up share (`sizing`), and the fast
        path's withdrawal judges it by the same share. Off (never) with `fall_window_s` inf.

        The readings are thinned to about `WINDOW_READINGS` a window (`append_thinned`, the newest
        replacing the one before it): a reading a second is plenty for a line over minutes."""
        cfg = self.config
        if not math.isfinite(cfg.fall_window_s):
            return False
        rates = self._fall_rates
        append_thinned(rates, t, arrival_rps, cfg.fall_window_s / WINDOW_READINGS)
        while rates and rates[0][0] < t - cfg.fall_window_s:
            rates.popleft()
        self.falling = steady_fall(rates, cfg.fall_window_s, cfg.fall_fit)
        return self.falling

    @staticmethod
    def burning(obs: Observation) -> bool:
        """Whether the latency SLO burns: the observed P99 beyond the SLO's."""
        slo = obs.slo_latency_threshold_s
        return obs.p99_s is not None and slo is not None and obs.p99_s > slo

    def refine_capacity(self, obs: Observation, steady: bool) -> None:
        """AIMD on the capacity: cut it by 10 % while fully Ready replicas miss the SLO (bursty traffic,
        a slower model version), give back 1 % of the profile value per evaluation while P99 is
        comfortably within it (up to the profile; beyond it, up to `max_capacity_gain` x the profile,
        only to the completions per Ready replica observed on a steady fleet at that P99: creeping up
        on no evidence, at a gain of 1.5, cost the diurnal day 0.24 % of its requests and one window in
        ten). Misses within a P99 window of a backlog (queue > SLO × rate) or of
        starting replicas are explained by those, so they cut nothing.
        Where such a miss comes while the completions per Ready replica hold a plateau (the fleet
        runs flat out), that plateau is a rate the replicas cannot serve within the SLO: the
        capacity drops to it at once (`ceiling`), not by 10 % per evaluation. That is the case of
        demand hidden from Triton's counters (a client's in-flight cap, Triton's HTTP front end):
        arrivals read as completions and the queue stays short, and only the latency tells.
        Bounded to [min_capacity_ratio, max_capacity_gain] × the profile."""
        cfg = self.config
        if obs.p99_s is None or obs.slo_latency_threshold_s is None or obs.ready_replicas <= 0:
            return
        lo, hi = cfg.capacity_rps * cfg.min_capacity_ratio, cfg.capacity_rps * cfg.max_capacity_gain
        if obs.queue_depth > obs.arrival_rps * obs.slo_latency_threshold_s or obs.ready_replicas < obs.current_replicas:
            self._disturbed_at = obs.t  # a backlog or missing replicas explain misses for a P99 window
        settled = obs.t - self._disturbed_at > cfg.p99_window_s
        if self.burning(obs) and settled:
            plateau = self.completion_plateau(obs.t)
            if plateau is not None:
                self.ceiling = (obs.t, plateau)
            self.capacity_rps = max(lo, min(self.capacity_rps * 0.9, plateau or math.inf))
        elif obs.p99_s < 0.5 * obs.slo_latency_threshold_s:
            # Give back what was cut, up to the profile: beyond it only what is observed counts.
            if self.capacity_rps < cfg.capacity_rps:
                self.capacity_rps = min(cfg.capacity_rps, self.capacity_rps + 0.01 * cfg.capacity_rps)
            if settled and steady:
                # Learned up: Ready replicas each completed this much over the rate window with the
                # P99 at half the SLO, so the profile undersold them (a faster version, a better
                # batch mix). Only what was observed, never beyond `max_capacity_gain` x the profile.
                # Below the profile the slow give-back above decides: a cut was made on misses.
                observed = min(hi, obs.arrival_rps / obs.ready_replicas)
                if observed > cfg.capacity_rps:
                    self.capacity_rps = max(self.capacity_rps, observed)

    def track_fleet(self, obs: Observation) -> bool:
        """Record the replicas read; whether they (Ready and spec, equal) have not changed for two rate windows: only
        then is the completion rate over the window a rate per replica of the fleet read. Right after
        a scale-up the readings lag the pods serving, and per replica they overstate."""
        since, ready, spec = self._fleet
        if (ready, spec) != (obs.ready_replicas, obs.current_replicas):
            self._fleet = (obs.t, obs.ready_replicas, obs.current_replicas)
            return False
        return obs.ready_replicas == obs.current_replicas and obs.t - since >= 2 * self.config.rate_window_s

    def hidden_demand(self, obs: Observation, steady: bool) -> bool:
        """Whether to ask for one more replica than run, on latency alone: over half the last rate
        window's requests are slower than the SLO on a *steady* fleet (all Ready, unchanged for two
        rate windows), with no pod backlog and no queue over the SLO's worth within that window.

        The demand then waits where Triton's counters do not see it (a client's in-flight cap,
        Triton's HTTP front end), so the completions that the rates read as arrivals understate it
        and no rate-based need grows. The demo's pods, four sharing two CPUs, complete a quarter of
        their profile under its overload; without this the fleet sat at 3 of its 4 replicas through
        it, every request taking seconds. One replica at a time, each once the fleet has settled
        again, and another only while the last one raised the completions by 5 %: a slow
        dependency or model version is not served faster by more replicas, and then the count
        stays (no scale-down while most requests are slow, `saturated`) without climbing to
        maxReplicas. Forgotten once most requests are fast again."""
        if obs.slow_share is None or obs.slow_share <= 0.5:
            self._latency_step = None
            return False
        window = self.config.rate_window_s
        quiet = obs.t - max(self._disturbed_at, self._backlog_at) > window  # `_backlog_at` read this evaluation
        if not (steady and quiet):
            return False
        last = self._latency_step
        if last is not None and obs.current_replicas > last[0] and obs.arrival_rps < 1.05 * last[1]:
            return False  # the last replica asked for served no more
        self._latency_step = (obs.current_replicas, obs.arrival_rps)
        return True

    def track_completions(self, obs: Observation) -> float | None:
        """Record the completions per Ready replica of *obs* (the window is `rate_window_s`); None
        without a Ready replica."""
        if obs.ready_replicas <= 0:
            return None
        per_replica = obs.arrival_rps / obs.ready_replicas
        append_thinned(self._per_replica, obs.t, per_replica, self.config.rate_window_s / WINDOW_READINGS)
        # The newest reading at or before the window's start stays, so the readings can span it.
        while len(self._per_replica) > 1 and self._per_replica[1][0] <= obs.t - self.config.rate_window_s:
            self._per_replica.popleft()
        return per_replica

    def completion_plateau(self, t: float) -> float | None:
        """The completions per Ready replica when they have held within 10 % of each other over a
        whole `rate_window_s` up to *t* (their mean), else None: a fleet at its ceiling, not one
        whose load is rising or falling."""
        if not self._per_replica or t - self._per_replica[0][0] < self.config.rate_window_s * 0.999:
            return None
        window = [v for _, v in self._per_replica]
        if min(window) < 0.9 * max(window) or max(window) <= 0:
            return None
        return sum(window) / len(window)

    def saturated(self, obs: Observation, per_replica: float | None) -> bool:
        """No scale-down now: the latency SLO burns, or the completions per Ready replica sit within
        10 % of the ceiling measured while it last burned (within `headroom_window_s`).

        A burn within a P99 window of a per-pod backlog (`pod_backlog`) is that backlog's, not the
        fleet's: its late completions keep the windowed P99 over the SLO for the pods' drain time
        plus the window, and the drain term already sizes the fleet for it. Held on the burn, a
        flash crowd on servers without a queue policy kept 40 replicas for nine minutes after its
        end (3.62x the oracle instead of 1.7x). Only while the replicas complete less than half
        their capacity, though: a fleet at maxReplicas, overloaded with a queue on its pods (the
        demo's "beyond maxReplicas"), is saturated whatever explains its P99.

        And only while the requests are served within the SLO now (`slow_share` over the last rate
        window at most `SLOW_NOW`, where the traces give it), or a backlog holds the slow ones
        (`backlog_holds_the_slow`): a backlog's late completions are the past, but when requests
        are slow now and no drain explains it, the burn is the fleet's own. Stop 54's demo went 4 -> 3 under
        its overload without it: four pods sharing two CPUs completed ~22-27 req/s each, "under
        half" a profile of 56, a pod's queue of 273 had "explained" the burn, and every request took
        seconds (demand the clients' in-flight cap and Triton's HTTP front end hide from its
        counters)."""
        idle = per_replica is not None and per_replica < 0.5 * self.capacity_rps
        slow_now = obs.slow_share is not None and obs.slow_share > SLOW_NOW and not self.backlog_holds_the_slow(obs)
        explained = idle and not slow_now and obs.t - self._backlog_at <= self.config.p99_window_s
        if self.burning(obs) and not explained:
            return True
        if self.ceiling is None or per_replica is None or obs.t - self.ceiling[0] > self.config.headroom_window_s:
            return False
        return per_replica >= 0.9 * self.ceiling[1]

    def backlog_holds_the_slow(self, obs: Observation) -> bool:
        """Whether a pod holds a backlog now and the queues hold at least a second of the slow
        completions (the slow share of the completion rate): a drain completes its queued
        requests at full speed, all of them slow, though new ones are served at once (a flash
        crowd's three pods of forty hold minutes of them). Queues that clear in under a second of
        the slow completions are an overloaded fleet's, whose requests are slow everywhere."""
        slow_per_s = (obs.slow_share or 0.0) * obs.arrival_rps
        return obs.t == self._backlog_at and obs.queue_depth >= slow_per_s  # a second of them

    def arrival_rates(self, obs: Observation) -> tuple[float, float]:
        """Arrivals = completions + rejections + queue growth: Triton counts a request only when it
        completes, so under overload the completion rate flattens at capacity while the queue absorbs
        the rest, or, with a queue timeout, the rejection counter does. Two readings: the one to
        scale up on (the long window's, or the short one's when it reads a jump), and the one to
        scale down on (the lower of the two: on the way down the short window sees the fall sooner,
        and the largest need over `down_delay_s` keeps a passing dip from counting). Without a short
        window both are the long one's."""
        cfg = self.config
        keep = max(cfg.queue_window_s, cfg.rate_window_s, cfg.fast_window_s)
        append_thinned(self._queue, obs.t, obs.queue_depth, keep / WINDOW_READINGS)
        while self._queue and self._queue[0][0] < obs.t - keep:
            self._queue.popleft()
        if obs.fast_arrival_rps is None:
            recent = [(t, q) for t, q in self._queue if t >= obs.t - cfg.queue_window_s]
            only = max(0.0, first_attempt_rate(obs.arrival_rps, obs.rejected_rps, cfg.client_retries)
                       + trend_slope(recent))
            return only, only
        # Arrivals over a window = completions over it + the queue's change over the same window:
        # matched windows, or a draining backlog's completions would read as arrivals.
        # The short window is noisier: it counts only when it reads a jump (a surge under way).
        samples = list(self._queue)
        fast_rejected = obs.rejected_rps if obs.fast_rejected_rps is None else obs.fast_rejected_rps
        retries = cfg.client_retries
        slow = first_attempt_rate(obs.arrival_rps, obs.rejected_rps, retries) + queue_growth(samples, cfg.rate_window_s)
        fast = first_attempt_rate(obs.fast_arrival_rps, fast_rejected, retries) + queue_growth(samples,
                                                                                              cfg.fast_window_s)
        return max(0.0, fast if fast > slow * cfg.fast_jump else slow), max(0.0, min(fast, slow))

    def recent_floor(self, t: float, arrival: float) -> float:
        """The lowest arrival rate over the last `headroom_window_s` (a monotonic-deque sliding minimum):
        headroom multiplies the load a surge starts from, not the surge once it is being served."""
        while self._floor and self._floor[-1][1] >= arrival:
            self._floor.pop()
        self._floor.append((t, arrival))
        while self._floor[0][0] < t - self.config.headroom_window_s:
            self._floor.popleft()
        return self._floor[0][1]

    def recent_peak(self, t: float, arrival: float) -> float:
        """The highest arrival rate the readings held between `return_window_s` and a rate window ago
        (a sliding maximum; inf when off or none): a level the arrivals held, not the rise now under
        way, whose own readings of the last rate window still climb through the window's average."""
        cfg = self.config
        if cfg.return_window_s <= 0:
            return math.inf
        young, peak = self._young, self._peak
        young.append((t, arrival))
        while young and young[0][0] <= t - cfg.rate_window_s:
            aged = young.popleft()
            while peak and peak[-1][1] <= aged[1]:
                peak.pop()
            peak.append(aged)
        while peak and peak[0][0] < t - cfg.return_window_s:
            peak.popleft()
        return peak[0][1] if peak else math.inf

    def track_dips(self, t: float, up_rps: float, down_rps: float, level_rps: float,
                   share: float) -> tuple[float, int]:
        """Follow the dips below the level held (*level_rps*, `recent_peak`) and say how long a
        scale-down below the level's need waits now (0: the down delay alone): the longest dip that
        came back within `return_window_s`, plus `lookahead_extra_s`, at most `dip_hold_s`; and that
        need (at the down *share*), which a scale-down after the down delay alone may still reach.

        A dip starts when the down reading needs fewer replicas than the level (both at the down
        *share*), and ends when the up reading needs the level's again. The down delay alone lets a
        fleet go 90 s into a lull, and a load back within a cold start lands on the smaller fleet (the
        benchmark's lulls lost 5-9 % of their requests so). A dip like those seen is not worth
        scaling into: history, not a longer fixed delay, which the bursty trace and the day pay for.
        A dip that outlasts `dip_hold_s` is a fall, and is not learned."""
        cfg = self.config
        if not math.isfinite(level_rps):
            self._dip = None
            return 0.0, 0
        level_need = replicas_for(level_rps, self.capacity_rps, share)
        if self._dip is None:
            if replicas_for(down_rps, self.capacity_rps, share) < level_need:
                self._dip = (t, level_need)
        elif replicas_for(up_rps, self.capacity_rps, share) >= self._dip[1]:
            lasted = t - self._dip[0]
            self._dip, self._back_at = None, t
            if lasted <= cfg.dip_hold_s:
                while self._dips and self._dips[-1][1] <= lasted:
                    self._dips.pop()
                self._dips.append((t, lasted))
        while self._dips and self._dips[0][0] < t - cfg.return_window_s:
            self._dips.popleft()
        if cfg.dip_hold_s <= 0 or not self._dips:
            return 0.0, level_need
        return min(cfg.dip_hold_s, self._dips[0][1] + cfg.lookahead_extra_s), level_need

    def returning(self, t: float) -> bool:
        """Whether the arrivals are in a dip below the level held, or came back to it within the trend
        window (whose readings still hold the climb): where `return_tolerance` applies."""
        return self._dip is not None or t - self._back_at <= self.config.trend_window_s

    def projection_cap(self, t: float) -> float:
        """The slow path's cap on its projection at *t*: `trend_cap`, or the panic's cap while a pod
        has held a backlog within the trend window and nothing was rejected in it.

        A backlog that is shed (a Triton queue policy rejects what waited too long) ends with the
        overload, and the panic meets the step. One that is not shed outlives the surge: Triton's
        queues are per pod, so replicas that come late only divert new arrivals. Asking too little
        during the climb then costs far more than the 25 % the cap saves. In bench autoscale without
        a queue policy, the cap of 1.25 cost 2.6-4.2 points of requests on the surges where 2 did not;
        lifting it only there kept the smooth scenarios' savings, and with a queue policy no run
        changed (docs/autoscaler.md, "The trend cap and unshed backlogs")."""
        cfg = self.config
        if t - self._backlog_at <= cfg.trend_window_s < t - self._rejected_at:
            return max(cfg.trend_cap, cfg.panic_trend_cap)
        return cfg.trend_cap

    def pod_backlog(self, obs: Observation) -> float:
        """Queued requests on the worst pod beyond what it serves within the SLO (0 if none)."""
        even = obs.queue_depth / max(1, obs.ready_replicas)  # round robin spreads it over Ready pods
        worst = even if obs.max_pod_queue is None else obs.max_pod_queue
        slo = obs.slo_latency_threshold_s if obs.slo_latency_threshold_s is not None else 0.0
        return max(0.0, worst - self.capacity_rps * slo)

    def panic(self, t: float, arrival_rps: float | None, asked: int, newest_rps: float | None = None,
              wait_free: Callable[[int], bool] | None = None) -> Recommendation | None:
        """The fast path's check at *t*, on *arrival_rps* read from the pods over the panic window.

        When that rate exceeds `panic_threshold` x what *asked* replicas carry (at the scale-up
        utilisation), the count that the rate projected over the cold start needs, at once: the
        projection uses the fast readings' own trend over `panic_trend_window_s`, so a ramp is met where it
        will be when new replicas are Ready, not where it is. That count then stands as a floor for
        `panic_hold_s`. None when there is no overload (the slow path decides).

        The window decides *whether*; the count starts from the higher of the window's rate and
        *newest_rps*, the pods' newest interval alone. Two seconds into a flash crowd the 6 s window
        still holds four seconds of calm, and through an HPA the first answer is the one that counts:
        a larger one waits for the next sync. The newest interval never triggers a panic by itself,
        so a 2 s burst of a bursty trace does not scale; with `panic_confirm_readings` above 1, nor
        does a burst whose window is over the threshold for fewer readings in a row, where the wait is
        free: *wait_free* says whether an answer that many fast readings later still reaches the HPA's
        next read of it (`hpaclock`; None: always, as in direct mode, where nothing reads it later).
        A wait past that read costs a whole sync, more than the burst it might have skipped.
        """
        cfg = self.config
        if arrival_rps is None or not math.isfinite(arrival_rps) or arrival_rps < 0:
            return None
        append_thinned(self._fast_rates, t, arrival_rps, cfg.panic_trend_window_s / WINDOW_READINGS)
        while self._fast_rates[0][0] < t - cfg.panic_trend_window_s:
            self._fast_rates.popleft()
        # Overloaded is past the share of their capacity the sizing lets *asked* carry (burst sizing:
        # all of it). At the fixed 0.9, burst sizing's fleet of 7 at 2,400 req/s (93 %) panicked
        # after each scale-down: the simulated 3x surge cost 1.92 replica-hours, not 1.77.
        _, up_share, _ = self.sizing(t)
        overloaded = arrival_rps > cfg.panic_threshold * asked * self.capacity_rps * up_share
        self._overloaded_readings = self._overloaded_readings + 1 if overloaded else 0
        to_confirm = cfg.panic_confirm_readings - self._overloaded_readings
        if not overloaded or (to_confirm > 0 and (wait_free is None or wait_free(to_confirm))):
            return None
        front = newest_rps if newest_rps is not None and math.isfinite(newest_rps) else 0.0
        projected = projected_rate(max(arrival_rps, front), trend_slope(list(self._fast_rates)),
                                   cfg.cold_start_s + cfg.panic_lookahead_extra_s, cfg.panic_trend_cap)
        # The count keeps the fixed share: the reading is the burst itself.
        need = min(cfg.max_replicas, replicas_for(projected, self.capacity_rps, cfg.utilisation))
        if need <= asked:
            return None
        self._panic_floor = max(need, self._panic_floor if t < self._panic_until else 0)
        self._panic_until = t + cfg.panic_hold_s
        self._down_candidates.clear()
        self.last = Recommendation(self._panic_floor, "panic", projected, self.capacity_rps)
        return self.last

    def withdraw(self, t: float, arrival_rps: float | None, published: int, current: int) -> Recommendation | None:
        """The fast path's check on a scale-down not yet applied (*published* below the *current*
        replicas): when the arrivals read from the pods over the panic window exceed what the
        *published* count carries at `down_utilisation` (with burst sizing: the rate x its margin at
        the full capacity, as `recommend` sizes), the scale-down is taken back whole (the
        replicas read are asked for again, at once) and the down delay starts again: the slow path
        would hold there anyway, its candidates gone. None otherwise.

        The slow path decides a scale-down on rates a minute old, and an HPA applies it at its next
        sync, up to 15 s later: a load that rises in between lands on the smaller fleet, and the
        panic, weighed against the replicas still running, does not see an overload until they are
        gone. Stop 61's demo went 2 -> 1 ten seconds into its overload, decided a second before it
        began. Judged at the down utilisation, the scale-down's own criterion, so a withdrawal
        asks only for what the slow path would not have let go now; and on the window's rate, as the
        panic decides: with the newest 2 s read too, the Azure trace's bursts took back scale-downs
        that were right and it cost 4 % more replica-hours (the window: 0.3 %, as many misses
        avoided). Only through an HPA: in direct mode the service applies a scale-down at once
        (`RecommenderService.evaluate_fast`)."""
        if arrival_rps is None or not math.isfinite(arrival_rps) or published >= current:
            return None
        margin, _, down_share = self.sizing(t)
        if arrival_rps * margin <= published * self.capacity_rps * down_share:
            return None
        self._down_candidates.clear()
        self.last = Recommendation(current, "withdrawn", arrival_rps, self.capacity_rps)
        return self.last

    def panic_floor(self, t: float) -> int:
        """The count the last panic holds the fleet at until its hold ends (0 when none)."""
        return self._panic_floor if t < self._panic_until else 0

    def recommend(self, obs: Observation) -> Recommendation:
        cfg = self.config
        if not all(math.isfinite(x) and x >= 0 for x in (obs.arrival_rps, obs.queue_depth, obs.rejected_rps)):
            raise ValueError("arrival rate, rejection rate and queue depth must be finite and >= 0")
        if obs.slo_latency_threshold_s is not None and math.isfinite(obs.slo_latency_threshold_s):
            self._slo_s = obs.slo_latency_threshold_s
        falling = self.track_fall(obs.t, obs.arrival_rps)
        margin, up_share, down_share = self.sizing(obs.t)
        per_replica = self.track_completions(obs)
        steady = self.track_fleet(obs)  # at every evaluation, so a change between two is seen
        self.refine_capacity(obs, steady)
        arrival, down_arrival = self.arrival_rates(obs)
        pod_backlog = self.pod_backlog(obs)
        if pod_backlog > 0:
            self._backlog_at = obs.t
        if obs.rejected_rps > 0:
            self._rejected_at = obs.t
        trend_cap = self.projection_cap(obs.t)
        hidden = self.hidden_demand(obs, steady)
        append_thinned(self._rates, obs.t, arrival, cfg.trend_window_s / WINDOW_READINGS)
        while self._rates and self._rates[0][0] < obs.t - cfg.trend_window_s:
            self._rates.popleft()
        slope = max(0.0, trend_slope(list(self._rates)))
        floor_rps = self.recent_floor(obs.t, arrival)
        lookahead = cfg.cold_start_s + cfg.lookahead_extra_s
        peak = self.recent_peak(obs.t, arrival)
        dip_delay, level_need = self.track_dips(obs.t, arrival * margin, down_arrival * margin, peak * margin,
                                                down_share)
        tolerance = cfg.return_tolerance if self.returning(obs.t) else 0.0
        trend_projected = projected_rate(arrival, slope, lookahead, trend_cap)
        projected = held_return(arrival, trend_projected, peak, tolerance)
        backlog_rps = obs.queue_depth / cfg.drain_s
        drain_need = drain_replicas(arrival, pod_backlog, self.capacity_rps, cfg.pod_drain_s, cfg.max_replicas)
        standing = replicas_for(floor_rps * cfg.headroom * margin, self.capacity_rps, up_share) \
            if cfg.headroom > 1 else 0
        # A season ago the demand peaked at this within the lookahead: be ready for it when the replicas
        # asked for now are, and keep them until that peak has passed (the down need holds it too).
        seasonal = 0 if obs.forecast is None else replicas_for(obs.forecast.rps * margin, self.capacity_rps, up_share)
        up_rate = max(projected, arrival * margin) + backlog_rps  # what the fleet must carry, up and down
        measured_need = max(standing, replicas_for(up_rate, self.capacity_rps, up_share))
        rate_need = max(seasonal, measured_need)
        drain_need = min(drain_need, math.ceil(cfg.max_drain_factor * max(rate_need, 1)))
        serving_need = max(rate_need, drain_need)
        projected_down = held_return(down_arrival, projected_rate(down_arrival, slope, lookahead, trend_cap),
                                     peak, tolerance)
        # (`replace_crash_looping`) A crash-looping pod is in the Deployment's count but serves little, so
        # the pods that do not loop must carry the demand on their own, at all of their capacity: the
        # fleet asks for one replacement per looping pod only as far as they fall short of that, and
        # the utilisation's margin over it stays theirs to lose. (Replacing each looping pod outright
        # bought nothing where the rest had that room, at 7 % more replica-hours: issue 45.)
        lost = min(max(0, obs.crash_looping_pods), obs.current_replicas) if cfg.replace_crash_looping else 0
        down_rate = max(projected_down, down_arrival * margin) + backlog_rps
        replaced_up = lost and lost + max(drain_need, replicas_for(up_rate, self.capacity_rps, 1.0))
        replaced_down = lost and lost + max(drain_need, replicas_for(down_rate, self.capacity_rps, 1.0))
        up_need = max(serving_need, replaced_up, obs.current_replicas + 1 if hidden else 0)
        down_need = max(replaced_down, drain_need, standing, seasonal,
                        replicas_for(down_rate, self.capacity_rps, down_share))
        queue_driven = arrival - obs.arrival_rps + backlog_rps > 0.1 * max(projected, 1e-9)
        reason = "latency" if up_need > max(serving_need, replaced_up) else \
            "replace" if up_need > obs.current_replicas >= serving_need else \
            "drain" if drain_need > rate_need and up_need > obs.current_replicas else \
            "forecast" if seasonal > measured_need and up_need > obs.current_replicas else \
            "queue" if queue_driven and up_need > obs.current_replicas else (
            ("return" if projected < trend_projected else "lookahead") if slope > 0 and serving_need > replicas_for(
                arrival * margin, self.capacity_rps, up_share) else "rate")
        # What a lower answer is a scale-down from: the replicas read, or the count last recommended
        # when more (a stale or bad reading, a scale-up the HPA has not applied yet). Measured
        # against the reading alone, a stale 3 where 12 run made 8 a "scale-up" past the down delay.
        current = max(obs.current_replicas, self.last.desired if self.last is not None else 0)
        if up_need > current:
            desired = up_need
            self._down_candidates.clear()
        elif self.saturated(obs, per_replica):
            # Saturated: whatever the rates say, fewer replicas would serve less; the delay restarts after.
            desired, reason = current, "saturated"
            self._down_candidates.clear()
        else:
            # Scale down to the largest count that sufficed (at the lower utilisation) over the delay.
            now_need = max(down_need, up_need)
            delay = 0.0 if falling else max(cfg.down_delay_s, dip_delay)
            # Candidates closer than delay / WINDOW_READINGS merge into the newest, which keeps the larger
            # need (a need held a fraction of a second longer): a long delay at a short interval.
            append_thinned(self._down_candidates, obs.t, now_need, delay / WINDOW_READINGS, max)
            # Keep the newest candidate at or before the window's start, so the span can reach the delay
            # with real clocks too: dropping every one older than the delay left a span just short of
            # it whenever evaluations drift by milliseconds, and scale-down never came (found on the
            # local cluster; the simulator's exact intervals hid it).
            while len(self._down_candidates) > 1 and self._down_candidates[1][0] <= obs.t - delay:
                self._down_candidates.popleft()
            span = obs.t - self._down_candidates[0][0]
            held = max(n for _, n in self._down_candidates)
            if span >= delay * 0.999 and held < current:
                desired, reason = held, "fall" if falling else reason
            elif now_need >= current:
                desired = current
            else:  # less is needed, but not for the down delay, or not for as long as dips came back
                recent = max((n for at, n in self._down_candidates if at >= obs.t - cfg.down_delay_s), default=held)
                if delay > cfg.down_delay_s and span >= cfg.down_delay_s * 0.999 and recent < current:
                    # The down delay alone would go to `recent`: down to the level's need, not into the dip.
                    keep = max(recent, level_need)
                    desired, reason = (keep, reason) if keep < current else (current, "dip")
                else:
                    desired, reason = current, "hold-down"
        floor = self.panic_floor(obs.t)
        if floor > desired:
            desired, reason = floor, "panic"
        if desired < cfg.min_replicas:
            desired, reason = cfg.min_replicas, "min"
        if desired > cfg.max_replicas:
            desired, reason = cfg.max_replicas, "max"
        lifted = trend_cap if trend_cap > cfg.trend_cap else None
        self.last = Recommendation(desired, reason, projected, self.capacity_rps, lifted)
        return self.last
