"""What the recommender reads from Prometheus: the PromQL of each target, and its answers read safely.

Every input to a decision is a query here (`TargetQueries`); `value` and `pod_values` turn an answer
into a number or say why it cannot be one (`DataProblem`: missing, NaN, stale), which the service
turns into a hold instead of a scale-down.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tidescale.autoscaler.coldstart import FirstReadyTracker
from tidescale.autoscaler.forecast import Forecast, SeasonReading, seasonal_forecast
from tidescale.autoscaler.recommend import Observation
from tidescale.autoscaler.settings import (
    ForecastSettings,
    RecommenderSettings,
    RecommenderTuning,
    TargetSettings,
    promql_range,
)
from tidescale.contracts import catalog
from tidescale.contracts import recorded as names
from tidescale.contracts.prometheus import InstantQueries, PrometheusUnavailable
from tidescale.contracts.promql import matcher, regex_escape, selector, triton_sum, triton_sum_rate
from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S, le_value


class DataProblem(Exception):
    """A value is missing, NaN or stale; `reason` is one of FAILSAFE_REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


# The resolution of the forecast's subqueries: a recording rule's, one sample a minute.
HISTORY_STEP_S = 60.0
# How long a pod counts as crash-looping after its container last waited in CrashLoopBackOff: the
# window of kube-prometheus' KubePodCrashLooping. The back-off itself lasts 10 s to 5 min and comes
# between a crash and the restart's cold start, so a reading of the reason *now* would miss most of
# a loop: the pod serves for a while, crashes, waits, starts again.
CRASH_LOOP_WINDOW_S = 300.0


@dataclass(frozen=True)
class SeasonQuery:
    """One season's reads (forecast.py), with the windows they cover, so that a simulated Prometheus
    answers the same question: each window ends `…_offset_s` before now."""

    period_s: float
    peak: str  # max of the demand over [now - period - margin, now - period + ahead + margin]
    level: str  # median of the demand over the level window ending one period ago
    peak_window_s: float
    peak_offset_s: float
    level_window_s: float


def median_over(demand: str, window_s: float, offset_s: float | None = None) -> str:
    """The median of the *demand* expression over *window_s* at `HISTORY_STEP_S`, ending *offset_s* ago."""
    offset = "" if offset_s is None else f" offset {promql_range(offset_s)}"
    return f"quantile_over_time(0.5, ({demand})[{promql_range(window_s)}:{promql_range(HISTORY_STEP_S)}]{offset})"


def season_query(demand: str, period_s: float, ahead_s: float, margin_s: float, level_window_s: float,
                 rate_window_s: float) -> SeasonQuery:
    """The PromQL of one season: subqueries of the *demand* expression at `HISTORY_STEP_S`, offset by
    what lies between now and the end of each window a period ago.

    The peak's window reaches `peak_read_late_s` further than the lookahead and its margin: a sample
    stamped s holds the demand over the rate window before s, so the first to hold a whole window of
    a peak is stamped up to a rate window and a step after the peak began. Read up to the margin
    alone, a peak counted a minute or two late: the benchmark's Monday, whose peak had come 90 s
    later a week before (within the 120 s margin), ordered its evening replicas 90 s before the
    peak, not the 150 s a 120 s cold start needs, and the fast path met the peak instead."""
    step = promql_range(HISTORY_STEP_S)
    start_ago = period_s + margin_s
    end_ago = max(0.0, period_s - ahead_s - margin_s - peak_read_late_s(rate_window_s))
    offset = math.floor(end_ago)  # PromQL offsets and ranges: whole seconds here
    whole = math.ceil(start_ago - offset)
    peak = f"max_over_time(({demand})[{promql_range(whole)}:{step}] offset {promql_range(offset)})"
    return SeasonQuery(period_s, peak, median_over(demand, level_window_s, period_s), float(whole),
                       float(offset), level_window_s)


def peak_read_late_s(rate_window_s: float) -> float:
    """How long after a peak began a sample of the demand a minute holds a whole rate window of it, at
    most: the rate window, and the step to the next sample."""
    return rate_window_s + HISTORY_STEP_S


@dataclass(frozen=True)
class TargetQueries:
    """PromQL for one target; every label value escaped, counters summed before any division."""

    completions: str
    fast_completions: str
    rejections: str
    fast_rejections: str
    queue: str
    max_pod_queue: str
    queue_age: str
    p99: str
    spec_replicas: str
    ready_replicas: str
    model_load: str
    pod_started: str  # per pod: kube_pod_start_time
    pod_ready_at: str  # per pod: kube_pod_status_ready_time (the Ready condition's *last* transition)
    pending: str  # the pending gauge's selector: its series name the pods the fast path reads
    hpa_current: str  # the replicas the HPA scaling the Deployment last found, and asked for
    hpa_desired: str
    unschedulable: str  # the Deployment's pods the scheduler cannot place (no node with a free GPU)
    crash_looping: str  # the Deployment's pods still there that waited in CrashLoopBackOff lately
    # The share of the last rate window's requests slower than the SLO (the traces' histogram, whose
    # buckets hold the SLO thresholds as exact boundaries): how the requests fare *now*, where the
    # recorded P99 holds five minutes of the past. No series (read as None) where the SLO is no
    # bucket boundary or nothing was served.
    slow_share: str
    # The demand now (the median over the forecast's level window) and each season's reads; none when
    # the forecast is off.
    demand_level: str | None = None
    seasons: tuple[SeasonQuery, ...] = ()

    def expressions(self) -> dict[str, str]:
        """Every query by name (a season's as `seasons[<period>].peak`/`.level`): what a test or a
        simulated Prometheus must know of."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if isinstance(getattr(self, f.name), str)}
        for s in self.seasons:
            out[f"seasons[{s.period_s:g}].peak"], out[f"seasons[{s.period_s:g}].level"] = s.peak, s.level
        return out

    @staticmethod
    def _of_deployment(t: TargetSettings, scope: Mapping[str, str]) -> str:
        """Matchers for the target Deployment's pods (`<deployment>-<replicaset hash>-<suffix>`; PromQL
        regexes are anchored, so `triton` never takes `triton-canary`'s pods), within *scope*."""
        of_deployment = f"{regex_escape(t.deployment)}-[a-z0-9]+-[a-z0-9]+"
        return ",".join([matcher("namespace", t.namespace), *(matcher(k, v) for k, v in scope.items()),
                         matcher("pod", of_deployment, "=~")])

    @classmethod
    def _per_pod(cls, name: str, t: TargetSettings, scope: Mapping[str, str]) -> str:
        """A kube-state-metrics series of each of the Deployment's pods, once per pod (however many
        jobs scrape kube-state-metrics): their start and Ready times make the cold start as the
        cluster measured it, image pull, server start and model load included (coldstart.py)."""
        return f"max by (namespace, pod) ({catalog.get(name).name}{{{cls._of_deployment(t, scope)}}})"

    @staticmethod
    def _hpa(name: str, t: TargetSettings, scope: Mapping[str, str]) -> str:
        """A status series of the HPA whose target is the Deployment (kube-state-metrics' info names
        it: the chart's, the user's or KEDA's `keda-hpa-…`), each series once."""
        info = selector(catalog.get("kube_horizontalpodautoscaler_info").name, namespace=t.namespace, **scope,
                        scaletargetref_kind="Deployment", scaletargetref_name=t.deployment)
        status = selector(catalog.get(name).name, namespace=t.namespace, **scope)
        return (f"max({status} * on (namespace, horizontalpodautoscaler) group_left "
                f"max by (namespace, horizontalpodautoscaler) ({info}))")

    @staticmethod
    def _p99(t: TargetSettings, scope: Mapping[str, str]) -> str:
        """The recorded P99 of the model on the target Deployment's pods (the exporter attributes each span
        to its sending pod's Deployment); else, for spans the exporter could not attribute, the recorded
        P99 of the model across Deployments. Both are the series the dashboards draw."""
        own = selector(names.TARGET_P99, namespace=t.namespace, **scope, deployment=t.deployment, model=t.model)
        across = selector(names.P99, namespace=t.namespace, **scope, model=t.model, stage="request")
        return f"max({own}) or max({across})"

    @classmethod
    def _triton(cls, name: str, t: TargetSettings, scope: Mapping[str, str], **labels: str) -> str:
        """A Triton series of the target's model on the target Deployment's pods only: two Deployments
        serving the same model (a canary, another GPU pool) are sized apart."""
        extra = "".join(f",{matcher(k, v)}" for k, v in labels.items())
        return f'{catalog.get(name).name}{{{cls._of_deployment(t, scope)},{matcher("model", t.model)}{extra}}}'

    @classmethod
    def for_target(cls, t: TargetSettings, tuning: RecommenderTuning | None = None,
                   scope: Mapping[str, str] | None = None, slo_s: float = SLO_LATENCY_THRESHOLD_S,
                   forecast: ForecastSettings | None = None, cold_start_s: float = 60.0) -> TargetQueries:
        """*scope*: label matchers on every series (`series_matchers`, e.g. this cluster's label);
        *slo_s*: the target's latency SLO (its P99 threshold); *forecast*: the seasonal forecast's
        settings (None or disabled: no forecast reads), looking ahead from the configured *cold_start_s*."""
        tuning, scope = tuning or RecommenderTuning(), scope or {}
        slow, fast = promql_range(tuning.rate_window_s), promql_range(tuning.fast_window_s)
        dep = {"namespace": t.namespace, **scope, "deployment": t.deployment}
        success = cls._triton("nv_inference_request_success", t, scope)
        pending = cls._triton("nv_inference_pending_request_count", t, scope)
        # Queue-policy timeouts (REJECTED; the reason label exists since Triton 24.08): demand that
        # never completes. Absent on older servers, and then read as 0.
        rejected = cls._triton("nv_inference_request_failure", t, scope, reason="REJECTED")
        # Each Triton series once, however many jobs scrape the pods (the chart's PodMonitor and the
        # platform team's own monitor): a sum over both copies would ask for twice the replicas.
        completions, rejections = triton_sum_rate(success, None, slow), triton_sum_rate(rejected, None, slow)
        # The demand a season ago: completions + rejections (Triton before 24.08 has no REJECTED series).
        demand = f"{completions} + ({rejections} or vector(0))"
        seasons: tuple[SeasonQuery, ...] = ()
        level: str | None = None
        if forecast is not None and forecast.enabled:
            ahead = forecast.ahead(cold_start_s, tuning)
            seasons = tuple(season_query(demand, p, ahead, forecast.margin_s, forecast.level_window_s,
                                         tuning.rate_window_s) for p in forecast.periods_s)
            level = median_over(demand, forecast.level_window_s)
        return cls(
            completions=completions,
            fast_completions=triton_sum_rate(success, None, fast),
            rejections=rejections,
            fast_rejections=triton_sum_rate(rejected, None, fast),
            queue=triton_sum(pending),
            max_pod_queue=f"max({triton_sum(pending, 'pod')})",
            queue_age=f"time() - max(timestamp({pending}))",
            p99=cls._p99(t, scope),
            spec_replicas=f"max({selector(catalog.get('kube_deployment_spec_replicas').name, **dep)})",
            ready_replicas=f"max({selector(catalog.get('kube_deployment_status_replicas_ready').name, **dep)})",
            model_load=f"max({cls._triton('nv_model_load_duration_secs', t, scope)})",
            pod_started=cls._per_pod("kube_pod_start_time", t, scope),
            pod_ready_at=cls._per_pod("kube_pod_status_ready_time", t, scope),
            pending=pending,
            hpa_current=cls._hpa("kube_horizontalpodautoscaler_status_current_replicas", t, scope),
            hpa_desired=cls._hpa("kube_horizontalpodautoscaler_status_desired_replicas", t, scope),
            unschedulable=f"count({cls._per_pod('kube_pod_status_unschedulable', t, scope)} > 0)",
            crash_looping=cls._crash_looping(t, scope),
            slow_share=cls._slow_share(t, scope, slo_s, slow),
            demand_level=level,
            seasons=seasons,
        )

    @classmethod
    def _crash_looping(cls, t: TargetSettings, scope: Mapping[str, str]) -> str:
        """How many of the Deployment's pods waited in CrashLoopBackOff within `CRASH_LOOP_WINDOW_S`,
        of those that still exist (a pod deleted by a scale-down keeps its series in the window)."""
        waiting = catalog.get("kube_pod_container_status_waiting_reason").name
        matchers = f'{cls._of_deployment(t, scope)},{matcher("reason", "CrashLoopBackOff")}'
        lately = f"max_over_time({waiting}{{{matchers}}}[{promql_range(CRASH_LOOP_WINDOW_S)}])"
        return (f"count((max by (namespace, pod) ({lately}) > 0) and on (namespace, pod) "
                f"{cls._per_pod('kube_pod_start_time', t, scope)})")

    @staticmethod
    def _slow_share(t: TargetSettings, scope: Mapping[str, str], slo_s: float, window: str) -> str:
        """1 - the requests within *slo_s* / all, over *window*, of the target's spans (attributed
        to its Deployment, as its recorded P99)."""
        hist = catalog.get("tidescale_request_duration_seconds").name
        labels = {"namespace": t.namespace, **scope, "deployment": t.deployment, "model": t.model,
                  "stage": "request"}
        within = selector(f"{hist}_bucket", **labels, le=le_value(slo_s))
        total = selector(f"{hist}_count", **labels)
        return f"1 - sum(rate({within}[{window}])) / sum(rate({total}[{window}]))"




def value(client: InstantQueries, expr: str, what: str, required: bool = True) -> float | None:
    """The first sample of *expr*; a missing or non-finite one is a DataProblem when *required*, else None."""
    rows = client.instant(expr)
    if not rows:
        if required:
            raise DataProblem("missing", f"{what}: no series")
        return None
    sample = rows[0][1]
    if math.isnan(sample) or math.isinf(sample):
        if required:
            raise DataProblem("nan", f"{what}: {sample}")
        return None
    return sample


def pod_values(client: InstantQueries, expr: str) -> dict[str, float]:
    """pod -> value of a per-pod query (rows without a pod name or a finite value are skipped)."""
    out: dict[str, float] = {}
    for row in client.query(expr):
        labels = row.get("metric") if isinstance(row, dict) else None
        pod = labels.get("pod") if isinstance(labels, dict) else None
        try:
            sample = float(row["value"][1])
        except (KeyError, IndexError, TypeError, ValueError, OverflowError):
            continue
        if isinstance(pod, str) and pod and math.isfinite(sample):
            out[pod] = sample
    return out


def observe(client: InstantQueries, q: TargetQueries, now: float, replicas: Callable[[], tuple[int, int]],
            slo_latency_threshold_s: float, stale_after_s: float, max_growth: float = 2.0) -> Observation:
    """One Observation of a target: raises PrometheusUnavailable, or DataProblem when a required input is
    missing, NaN or stale. *replicas* gives (spec, Ready) replicas (kube-state-metrics, or the demo's);
    *max_growth* bounds the seasonal forecast's level correction."""
    completions = value(client, q.completions, "completion rate")
    queue = value(client, q.queue, "queue depth")
    age = value(client, q.queue_age, "queue sample age")
    if age is not None and age > stale_after_s:
        raise DataProblem("stale", f"newest queue sample is {age:.0f}s old")
    current, ready = replicas()
    p99 = value(client, q.p99, "p99", required=False)
    rejected = value(client, q.rejections, "rejection rate", required=False)
    fast = value(client, q.fast_completions, "short-window completion rate", required=False)
    fast_rejected = value(client, q.fast_rejections, "short-window rejection rate", required=False)
    worst = value(client, q.max_pod_queue, "worst pod's queue", required=False)
    unschedulable = value(client, q.unschedulable, "unschedulable pods", required=False)
    crash_looping = value(client, q.crash_looping, "crash-looping pods", required=False)
    slow = value(client, q.slow_share, "share of requests slower than the SLO", required=False)
    forecast = read_forecast(client, q, max_growth)
    return Observation(now, completions or 0.0, queue or 0.0, ready, current, p99, slo_latency_threshold_s,
                       fast_arrival_rps=fast, max_pod_queue=worst, rejected_rps=rejected or 0.0,
                       fast_rejected_rps=fast_rejected, unschedulable_pods=int(unschedulable or 0),
                       crash_looping_pods=int(crash_looping or 0),
                       slow_share=None if slow is None else min(1.0, max(0.0, slow)), forecast=forecast)


def read_forecast(client: InstantQueries, q: TargetQueries, max_growth: float) -> Forecast | None:
    """The seasonal forecast from Prometheus' history (None: off, no history, or Prometheus cannot say:
    the forecast only ever adds to what the recommender sizes for, so going without it is safe)."""
    if q.demand_level is None or not q.seasons:
        return None
    try:
        now = value(client, q.demand_level, "demand level", required=False)
        readings = [SeasonReading(s.period_s, value(client, s.peak, "seasonal peak", required=False),
                                  value(client, s.level, "seasonal level", required=False)) for s in q.seasons]
    except PrometheusUnavailable:
        return None
    return seasonal_forecast(readings, now, max_growth)


def read_cold_start(client: InstantQueries, q: TargetQueries, tracker: FirstReadyTracker,
                    settings: RecommenderSettings) -> tuple[float, str] | None:
    """Cold start as measured: the median of recent pods' *first* start-to-Ready times
    (kube-state-metrics, tracked across evaluations by *tracker*), else the server's own model load
    time plus the pod start overhead, else the configured value; with where it came from. A measured
    one is clamped to [cold_start_min_s, cold_start_max_s]. None when Prometheus cannot say (the
    recommender keeps what it has)."""
    lo, hi = settings.cold_start_min_s, settings.cold_start_max_s
    try:
        started = pod_values(client, q.pod_started)
        ready = pod_values(client, q.pod_ready_at)
        tracker.observe({pod: (start, ready.get(pod)) for pod, start in started.items()})
        measured = tracker.cold_start()
        load = None if measured is not None else value(client, q.model_load, "model load time", required=False)
    except PrometheusUnavailable:
        return None
    if measured is not None:
        return min(hi, max(lo, measured)), "pod_ready"
    if load is not None and load >= 0:
        return min(hi, max(lo, load + settings.pod_start_overhead_s)), "model_load"
    return settings.cold_start_s, "configured"
