"""The recommender service: reads Prometheus, exports `tidescale_desired_replicas` for the HPA.

Each interval, per target Deployment: completions/s and queue-policy rejections/s over the long and
the short rate window, the queue depth of its model summed over pods and on its worst pod (Triton's
counters and pending gauge), its replica counts (kube-state-metrics, or callbacks in the demo), and
optionally the observed P99 (tidescale's histogram recording rule): every input the recommender reads.
Fail-safe: when Prometheus is down or a value is missing, NaN or stale, the last good recommendation is held (never a
scale-down on missing data) and `tidescale_recommender_failsafe{reason}` says why.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from tidescale.autoscaler.capacity import load_capacity
from tidescale.autoscaler.coldstart import FirstReadyTracker
from tidescale.autoscaler.decisions import DECISIONS, decision, event_message
from tidescale.autoscaler.fastpath import FastReading, FastWindow
from tidescale.autoscaler.manifests import Target
from tidescale.autoscaler.podreader import PodReader, discover_pods
from tidescale.autoscaler.recommend import (
    Observation,
    Recommender,
    RecommenderConfig,
    asked_replicas,
    reachable_under_tolerance,
)
from tidescale.contracts import catalog
from tidescale.contracts import recorded as names
from tidescale.contracts.errors import UsageError
from tidescale.contracts.heartbeat import Heartbeat, stall_after
from tidescale.contracts.kubeapi import EventSeriesApi, ScaleApi, deployment_event, post_event_once
from tidescale.contracts.prometheus import MAX_ANSWER_BYTES, PrometheusAuth, PrometheusClient, PrometheusUnavailable
from tidescale.contracts.promql import LABEL_NAME, matcher, regex_escape, selector, triton_sum, triton_sum_rate
from tidescale.contracts.redact import redact_url
from tidescale.contracts.settings import Host, InfOff, ServingSettings, SettingsModel
from tidescale.contracts.slo import QUANTILE_WINDOW_S, SLO_P99_S

log = logging.getLogger(__name__)

# Labels the target's queries match on themselves: a series matcher may not override them.
QUERY_LABELS = frozenset({"namespace", "deployment", "pod", "model", "reason", "stage", "le", "__name__"})
FAILSAFE_REASONS = ("prometheus_down", "missing", "nan", "stale", "stuck")
EVENT_COMPONENT = "tidescale-recommender"
# Another replica's Event for the same change, seen within this long (or two intervals), is the
# same report; event_twin_window_s() keeps it shorter than a real repeat can come.
EVENT_TWIN_WINDOW_S = 60.0
MAX_TARGETS = 200
# How long a published count may take to show as the Deployment's replicas in kube-state-metrics
# (the HPA's sync, its metric's scrape, kube-state-metrics' scrape): in direct mode a reading below
# every count asked for over this long (or 4 intervals) cannot be the Deployment's.
REPLICA_LAG_S = 120.0
_DEFAULTS = RecommenderConfig(capacity_rps=1.0)


def _default(name: str) -> Any:
    return getattr(_DEFAULTS, name)


class RecommenderTuning(SettingsModel):
    """Every tuning knob of the recommender (`recommender.tuning` / `TIDESCALE_RECOMMENDER_TUNING__…`).

    The defaults are RecommenderConfig's, which the benchmark runs: change one here and the
    benchmark's figures no longer describe your deployment. `p99_window_s` is not a knob: it is
    the range of the P99 recording rule the service reads (5 m).
    """

    model_config = ConfigDict(ser_json_inf_nan="strings")  # inf ("off") as "Infinity"
    lookahead_extra_s: float = Field(default=_default("lookahead_extra_s"), ge=0, allow_inf_nan=False)
    trend_window_s: float = Field(default=_default("trend_window_s"), gt=0, allow_inf_nan=False)
    queue_window_s: float = Field(default=_default("queue_window_s"), gt=0, allow_inf_nan=False)
    utilisation: float = Field(default=_default("utilisation"), gt=0, le=1)
    down_utilisation: float = Field(default=_default("down_utilisation"), gt=0, le=1)
    down_delay_s: float = Field(default=_default("down_delay_s"), ge=0, allow_inf_nan=False)
    drain_s: InfOff = Field(default=_default("drain_s"), gt=0)  # inf: off
    max_capacity_gain: float = Field(default=_default("max_capacity_gain"), ge=1, allow_inf_nan=False)
    min_capacity_ratio: float = Field(default=_default("min_capacity_ratio"), gt=0, le=1)
    rate_window_s: float = Field(default=_default("rate_window_s"), ge=1, allow_inf_nan=False)
    fast_window_s: float = Field(default=_default("fast_window_s"), ge=1, allow_inf_nan=False)
    max_drain_factor: float = Field(default=_default("max_drain_factor"), ge=1, allow_inf_nan=False)
    fast_jump: float = Field(default=_default("fast_jump"), ge=1, allow_inf_nan=False)
    pod_drain_s: InfOff = Field(default=_default("pod_drain_s"), gt=0)  # inf: off
    headroom_window_s: float = Field(default=_default("headroom_window_s"), gt=0, allow_inf_nan=False)
    panic_threshold: float = Field(default=_default("panic_threshold"), gt=0, allow_inf_nan=False)
    panic_window_s: float = Field(default=_default("panic_window_s"), gt=0, allow_inf_nan=False)
    panic_hold_s: float = Field(default=_default("panic_hold_s"), ge=0, allow_inf_nan=False)
    panic_lookahead_extra_s: float = Field(default=_default("panic_lookahead_extra_s"), ge=0, allow_inf_nan=False)
    panic_trend_cap: float = Field(default=_default("panic_trend_cap"), ge=1, allow_inf_nan=False)
    panic_trend_window_s: float = Field(default=_default("panic_trend_window_s"), gt=0, allow_inf_nan=False)
    trend_cap: InfOff = Field(default=_default("trend_cap"), ge=1)  # inf: off

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values (inf as "Infinity"), as recorded by the benchmark and printed by the CLI."""
        return json.loads(self.model_dump_json())  # type: ignore[no-any-return]


# RecommenderConfig fields that are not tuning: set per target, from the profile, or by their own setting.
NOT_TUNING = ("capacity_rps", "min_replicas", "max_replicas", "cold_start_s", "headroom", "p99_window_s")


def promql_range(seconds: float) -> str:
    """A PromQL range for *seconds*: whole seconds as `60s`, anything finer in milliseconds."""
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{round(seconds * 1000)}ms"


class FastPathSettings(SettingsModel):
    """`recommender.fastPath`: Triton's counters read straight from its pods (fastpath.py).

    The pods are the ones Prometheus scrapes for the target's model (their `instance` label), so
    the recommender needs no Kubernetes permission for it, only network access to Triton's metrics
    port. Off: the recommender reacts on Prometheus' data alone (a scrape and a rate window later)."""

    enabled: bool = True
    interval_s: float = Field(default=2.0, ge=0.5, le=30, allow_inf_nan=False)
    timeout_s: float = Field(default=1.0, gt=0, le=10, allow_inf_nan=False)
    scheme: str = Field(default="http", pattern="^https?$")
    path: str = Field(default="/metrics", pattern=r"^/[A-Za-z0-9._~/-]{0,200}$")
    max_pods: int = Field(default=200, ge=1, le=2000)  # per target: bounds the work of one round


class TargetSettings(SettingsModel):
    """One Deployment to recommend for."""

    deployment: str
    namespace: str
    model: str
    min_replicas: int = Field(default=1, ge=1)
    max_replicas: int = Field(default=20, ge=1)
    capacity_rps: float | None = Field(default=None, gt=0)  # overrides the profile for this target
    # The P99 this model's SLO allows (the chart fills it from the model's `slo` group); None: slo_p99_s.
    slo_p99_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _min_le_max(self) -> TargetSettings:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) must not exceed max_replicas ({self.max_replicas})")
        return self


class RecommenderSettings(ServingSettings):
    """`recommender:` section / `TIDESCALE_RECOMMENDER_*` (the server's bounds: `ServingSettings`)."""

    section: ClassVar[str] = "recommender"
    model_config = SettingsConfigDict(env_prefix="TIDESCALE_RECOMMENDER_", extra="forbid")

    prometheus_url: str = "http://localhost:9090"
    prometheus_auth: PrometheusAuth = Field(default_factory=PrometheusAuth)
    host: Host = "0.0.0.0"
    port: int = Field(default=9108, ge=0, le=65535)
    # Bounded: a wait of 1e300 s raised OverflowError in the loop, which stopped for good.
    interval_s: float = Field(default=15.0, gt=0, le=3600)
    query_timeout_s: float = Field(default=5.0, gt=0, le=600)  # the deadline of each query, answer included
    query_max_bytes: int = Field(default=MAX_ANSWER_BYTES, ge=1 << 10, le=1 << 30)  # decompressed
    # A target whose evaluation has not ended for this long (None: 4 intervals, at least 60 s) holds
    # its last answer as `stuck`: an evaluation that hangs is a fail-safe, not a silent stall.
    stuck_after_s: float | None = Field(default=None, gt=0, le=86400)
    stale_after_s: float = Field(default=120.0, gt=0)
    # Liveness fails when the evaluation or the fast path has not finished a round for this long (at
    # least 3 of its intervals): a round stuck in a call that never returns, not only a dead thread.
    stall_after_s: float = Field(default=300.0, gt=0, le=86400, allow_inf_nan=False)
    slo_p99_s: float = Field(default=SLO_P99_S, gt=0)
    profile: Path | None = None  # perf_analyzer CSV: capacity at the SLO
    capacity_rps: float | None = Field(default=None, gt=0)
    cold_start_s: float = Field(default=60.0, ge=0)
    # Where Triton reports nv_model_load_duration_secs (24.11+), the cold start is that plus this
    # (scheduling, container and server start): learned, not typed; cold_start_s is the fallback.
    pod_start_overhead_s: float = Field(default=15.0, ge=0)
    # A learned cold start is kept within these (a pod with no readiness probe reads 0 s; a bad
    # clock or a flap the tracker could not see through, hours): `cold_start_s` itself is not clamped.
    cold_start_min_s: float = Field(default=5.0, ge=0)
    cold_start_max_s: float = Field(default=900.0, gt=0)
    headroom: float = Field(default=1.0, ge=1.0, allow_inf_nan=False)  # standing capacity: x the 10-min floor
    # Post a Kubernetes Event on the target Deployment whenever the recommendation changes, saying why
    # (the chart turns it on and grants `create events` in the serving namespace).
    kube_events: bool = False
    hpa_tolerance_rounding: bool = False  # cluster without behavior.*.tolerance (k8s < 1.33)
    tuning: RecommenderTuning = Field(default_factory=RecommenderTuning)
    fast_path: FastPathSettings = Field(default_factory=FastPathSettings)
    # hpa: publish tidescale_desired_replicas for the HPA (or KEDA) to apply at its next sync.
    # direct: write each target Deployment's scale subresource at once, as Knative's KPA does; no HPA
    # may manage the Deployment then, and only one recommender may run (docs/autoscaler.md).
    scale_mode: Literal["hpa", "direct"] = "hpa"
    # Label matchers on every series the recommender reads, for a Prometheus API that holds several
    # clusters (Thanos Query, Mimir): {cluster: prod-eu}, this cluster's external label, keeps another
    # cluster's Deployment of the same name out of the demand. Empty: a Prometheus of this cluster.
    series_matchers: dict[str, str] = Field(default_factory=dict, max_length=8)
    targets: list[TargetSettings] = Field(default_factory=list, max_length=MAX_TARGETS)

    @model_validator(mode="after")
    def _cold_start_range(self) -> RecommenderSettings:
        if self.cold_start_min_s > self.cold_start_max_s:
            raise ValueError(f"cold_start_min_s ({self.cold_start_min_s:g}) must not exceed cold_start_max_s "
                             f"({self.cold_start_max_s:g})")
        return self

    @field_validator("series_matchers")
    @classmethod
    def _matchers(cls, v: dict[str, str]) -> dict[str, str]:
        """Label names PromQL accepts, none of the labels the queries set themselves, short values."""
        for name, value in v.items():
            if not LABEL_NAME.match(name):
                raise ValueError(f"series_matchers: {name!r} is not a Prometheus label name")
            if name in QUERY_LABELS:
                raise ValueError(f"series_matchers: {name!r} is a label the recommender's queries set "
                                 f"themselves ({', '.join(sorted(QUERY_LABELS))})")
            if not value or len(value) > 256:
                raise ValueError(f"series_matchers: the value of {name!r} must be 1..256 characters")
        return v

    def config_for(self, t: TargetSettings) -> RecommenderConfig:
        """The recommender for *t*: the one place the service and the benchmark build it."""
        return RecommenderConfig(self.capacity_for(t), t.min_replicas, t.max_replicas, cold_start_s=self.cold_start_s,
                                 headroom=self.headroom, **self.tuning.model_dump())

    def effective_config(self) -> dict[str, Any]:
        """What `autoscale recommend --print-config` prints: every setting, tuning resolved, per target."""
        out = self.model_dump(mode="json", exclude={"targets", "tuning"})
        out["prometheus_url"] = redact_url(self.prometheus_url)  # printed: never a password
        out["tuning"] = self.tuning.as_json()
        out["targets"] = [
            {**t.model_dump(mode="json"), "recommender": _jsonable(dataclasses.asdict(self.config_for(t)))}
            for t in self.targets
        ]
        return out

    def stuck_after(self) -> float:
        """How long a target may go without an evaluation ending before it counts as stuck."""
        return self.stuck_after_s if self.stuck_after_s is not None else max(60.0, 4 * self.interval_s)

    def slo_for(self, t: TargetSettings) -> float:
        return t.slo_p99_s if t.slo_p99_s is not None else self.slo_p99_s

    def capacity_for(self, t: TargetSettings) -> float:
        if t.capacity_rps is not None:
            return t.capacity_rps
        if self.capacity_rps is not None:
            return self.capacity_rps
        if self.profile is not None:
            return load_capacity(self.profile, self.slo_for(t))
        raise UsageError(f"target {t.namespace}/{t.deployment}: give capacity_rps or a profile (perf_analyzer CSV)")


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    """inf is a legal setting ("off") but not JSON: write it as the string pydantic reads back."""
    return {k: ("Infinity" if isinstance(v, float) and math.isinf(v) else v) for k, v in values.items()}


class DataProblem(Exception):
    """A value is missing, NaN or stale; `reason` is one of FAILSAFE_REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


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
        """The model's P99 on the target Deployment's pods (the exporter attributes each span to its
        sending pod's Deployment), over the recording rules' window; else, for spans the exporter
        could not attribute, the model's P99 across Deployments."""
        buckets = selector(f"{catalog.get('tidescale_request_duration_seconds').name}_bucket", namespace=t.namespace,
                           **scope, deployment=t.deployment, model=t.model, stage="request")
        own = f"histogram_quantile(0.99, sum by (le) (rate({buckets}[{promql_range(QUANTILE_WINDOW_S)}])))"
        return f'{own} or max({selector(names.P99, namespace=t.namespace, **scope, model=t.model, stage="request")})'

    @classmethod
    def _triton(cls, name: str, t: TargetSettings, scope: Mapping[str, str], **labels: str) -> str:
        """A Triton series of the target's model on the target Deployment's pods only: two Deployments
        serving the same model (a canary, another GPU pool) are sized apart."""
        extra = "".join(f",{matcher(k, v)}" for k, v in labels.items())
        return f'{catalog.get(name).name}{{{cls._of_deployment(t, scope)},{matcher("model", t.model)}{extra}}}'

    @classmethod
    def for_target(cls, t: TargetSettings, tuning: RecommenderTuning | None = None,
                   scope: Mapping[str, str] | None = None) -> TargetQueries:
        """*scope*: label matchers on every series (`series_matchers`, e.g. this cluster's label)."""
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
        return cls(
            completions=triton_sum_rate(success, None, slow),
            fast_completions=triton_sum_rate(success, None, fast),
            rejections=triton_sum_rate(rejected, None, slow),
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
        )


ReplicasFn = Callable[[TargetSettings], tuple[int, int]]


def event_twin_window_s(interval_s: float, down_delay_s: float) -> float:
    """How long another replica's Event for the same change counts as the same report.

    Long enough for two replicas' unsynchronised rounds (two intervals, at least a minute), and
    shorter than a real repeat can come: the same change again needs the opposite change between
    them, and a scale-down waits `down_delay_s`, then the next round. So a tuning with a short
    scale-down delay shortens the window too, and a repeat always counts up its Event."""
    return min(max(EVENT_TWIN_WINDOW_S, 2 * interval_s), down_delay_s + interval_s)


@dataclass
class TargetState:
    """What the service knows and exports about one target."""

    settings: TargetSettings
    recommender: Recommender
    queries: TargetQueries
    published: int | None = None
    failsafe: str | None = None
    detail: str = ""
    last_success: float | None = None
    cold_start_source: str = "configured"
    decision: str = "hold_missing_data"
    pods: dict[str, str] = dataclasses.field(default_factory=dict)  # the fast path's pods: name -> host:port
    fast: FastWindow | None = None
    fast_reading: FastReading | None = None  # the fast path's last round
    current: int | None = None  # the Deployment's replicas at the last observation
    scale_write_failures: int = 0  # direct mode: failed writes of the scale subresource
    evaluated_at: float | None = None  # when its last slow evaluation ended (good or held), by the service's clock
    first_ready: FirstReadyTracker = dataclasses.field(default_factory=lambda: FirstReadyTracker(time.time()))
    asked: deque[tuple[float, int]] = dataclasses.field(default_factory=deque)  # (t, published) over REPLICA_LAG_S
    replica_disagreements: int = 0  # evaluations whose replica reading disagreed (held, counted)


class RecommenderService:
    """Evaluates every target each interval; `collect()` exports the results (a prometheus_client Collector)."""

    def __init__(self, settings: RecommenderSettings, client: PrometheusClient | None = None,
                 replicas_fn: ReplicasFn | None = None, clock: Callable[[], float] = time.time,
                 events: EventSeriesApi | None = None, reader: PodReader | None = None,
                 scaler: ScaleApi | None = None) -> None:
        if not settings.targets:
            raise UsageError("the recommender needs at least one target (recommender.targets in the config file)")
        self.settings = settings
        self.client = client or PrometheusClient(settings.prometheus_url, settings.query_timeout_s,
                                                 auth=settings.prometheus_auth,
                                                 max_answer_bytes=settings.query_max_bytes)
        self.replicas_fn = replicas_fn
        self.clock = clock
        self.events: EventSeriesApi | None = events
        if self.events is None and settings.kube_events:
            from tidescale.contracts.kubeapi import core_v1_api

            self.events = core_v1_api()
        self.started = clock()
        self.states: dict[tuple[str, str], TargetState] = {}
        for t in settings.targets:
            key = (t.namespace, t.deployment)
            if key in self.states:
                raise UsageError(f"target {t.namespace}/{t.deployment} is listed twice")
            Target(t.deployment, t.namespace, t.model, t.min_replicas, t.max_replicas)  # validates the names
            config = settings.config_for(t)
            self.states[key] = TargetState(t, Recommender(config), TargetQueries.for_target(t, settings.tuning,
                                                                                   settings.series_matchers),
                                           fast=FastWindow(config.panic_window_s) if settings.fast_path.enabled
                                           else None, first_ready=FirstReadyTracker(self.started))
        self.scaler: ScaleApi | None = scaler
        if self.scaler is None and settings.scale_mode == "direct":
            from tidescale.contracts.kubeapi import apps_v1_api

            self.scaler = apps_v1_api()
        fp = settings.fast_path
        self.reader = (reader or PodReader(fp.timeout_s, fp.scheme, fp.path)) if fp.enabled else None
        self._lock = threading.Lock()

        # Beaten by `run_loop` after each round; `/healthz` fails on a stalled one.
        self.evaluation_heartbeat = Heartbeat("evaluation", stall_after(settings.stall_after_s, settings.interval_s))
        self.fast_path_heartbeat = (Heartbeat("fast path", stall_after(settings.stall_after_s, fp.interval_s))
                                    if self.reader is not None else None)
        self.heartbeats = [h for h in (self.evaluation_heartbeat, self.fast_path_heartbeat) if h is not None]

    # --- reading ---------------------------------------------------------------------------------
    def _value(self, expr: str, what: str, required: bool = True) -> float | None:
        rows = self.client.instant(expr)
        if not rows:
            if required:
                raise DataProblem("missing", f"{what}: no series")
            return None
        value = rows[0][1]
        if math.isnan(value) or math.isinf(value):
            if required:
                raise DataProblem("nan", f"{what}: {value}")
            return None
        return value

    def _replicas(self, st: TargetState) -> tuple[int, int]:
        if self.replicas_fn is not None:
            return self.replicas_fn(st.settings)
        current = self._value(st.queries.spec_replicas, "spec replicas")
        ready = self._value(st.queries.ready_replicas, "ready replicas")
        return int(current or 0), int(ready or 0)

    def hpa_replicas(self, st: TargetState) -> tuple[int, int] | None:
        """(current, desired) replicas of the HPA that scales the target, as kube-state-metrics reports
        them; None in direct mode, with the demo's callbacks, or where no HPA is reported."""
        if self.replicas_fn is not None or self.settings.scale_mode != "hpa":
            return None
        current = self._value(st.queries.hpa_current, "HPA current replicas", required=False)
        desired = self._value(st.queries.hpa_desired, "HPA desired replicas", required=False)
        return None if current is None or desired is None else (int(current), int(desired))

    def replica_disagreement(self, st: TargetState, reading: int, hpa: tuple[int, int] | None,
                             now: float) -> str | None:
        """Why the Deployment's replica reading cannot be the fleet's, or None (under the lock).

        Only a reading that is too *low* matters: a recommender that believes fewer replicas run
        than do sees any lower need as a scale-up from there, and drops the fleet past its down
        delay. Too low is 0 or less, less than the HPA reports both as its current and its desired
        count, or (direct mode, where the recommender writes the count itself) less than every
        count it asked for over the time one takes to show."""
        if st.published is None:
            return None  # the first answer: the fleet as found is all there is
        if reading <= 0:
            return f"the Deployment reads {reading} replicas where {st.published} were asked for"
        if hpa is not None:
            if reading < min(hpa):
                return (f"the Deployment reads {reading} replicas where its HPA reports {hpa[0]} "
                        f"(desired {hpa[1]})")
            return None
        if self.settings.scale_mode == "direct" and st.asked:
            lowest = min(n for _, n in st.asked)
            if reading < lowest:
                return (f"the Deployment reads {reading} replicas, fewer than the {lowest} or more asked for "
                        f"over the last {self._replica_lag_s():g} s")
        return None

    def _replica_lag_s(self) -> float:
        return max(REPLICA_LAG_S, 4 * self.settings.interval_s)

    def _published(self, st: TargetState, count: int, now: float) -> None:
        """Publish *count* (under the lock), remembering it for the replica check."""
        st.published = count
        st.asked.append((now, count))
        while st.asked and st.asked[0][0] < now - self._replica_lag_s():
            st.asked.popleft()

    def observe(self, st: TargetState, now: float) -> Observation:
        """One Observation from Prometheus; raises PrometheusUnavailable or DataProblem."""
        completions = self._value(st.queries.completions, "completion rate")
        queue = self._value(st.queries.queue, "queue depth")
        age = self._value(st.queries.queue_age, "queue sample age")
        if age is not None and age > self.settings.stale_after_s:
            raise DataProblem("stale", f"newest queue sample is {age:.0f}s old")
        current, ready = self._replicas(st)
        p99 = self._value(st.queries.p99, "p99", required=False)
        rejected = self._value(st.queries.rejections, "rejection rate", required=False)
        fast = self._value(st.queries.fast_completions, "short-window completion rate", required=False)
        fast_rejected = self._value(st.queries.fast_rejections, "short-window rejection rate", required=False)
        worst = self._value(st.queries.max_pod_queue, "worst pod's queue", required=False)
        return Observation(now, completions or 0.0, queue or 0.0, ready, current, p99,
                           self.settings.slo_for(st.settings),
                           fast_arrival_rps=fast, max_pod_queue=worst, rejected_rps=rejected or 0.0,
                           fast_rejected_rps=fast_rejected)

    # --- one evaluation ----------------------------------------------------------------------------
    def evaluate(self, now: float | None = None) -> dict[tuple[str, str], TargetState]:
        """One slow evaluation of every target. Prometheus is read with no lock held, so `/metrics`,
        `/v1/desired` and the fast path's panics never wait behind a slow Prometheus; each
        target's state is updated under the lock once its reads are in."""
        now = self.clock() if now is None else now
        for st in self.states.values():
            self._evaluate_one(st, now)
        with self._lock:
            return dict(self.states)

    def _pod_times(self, expr: str) -> dict[str, float]:
        """pod -> value of a per-pod query (rows without a pod name or a finite value are skipped)."""
        times: dict[str, float] = {}
        for row in self.client.query(expr):
            labels = row.get("metric") if isinstance(row, dict) else None
            pod = labels.get("pod") if isinstance(labels, dict) else None
            try:
                value = float(row["value"][1])
            except (KeyError, IndexError, TypeError, ValueError, OverflowError):
                continue
            if isinstance(pod, str) and pod and math.isfinite(value):
                times[pod] = value
        return times

    def _read_cold_start(self, st: TargetState) -> tuple[float, str] | None:
        """Cold start as measured: the median of recent pods' *first* start-to-Ready times
        (kube-state-metrics, tracked across evaluations: `FirstReadyTracker`), else the server's own
        model load time plus the pod start overhead, else the configured value. A measured one is
        clamped to [cold_start_min_s, cold_start_max_s]. None when Prometheus cannot say (the
        recommender keeps what it has). Only the slow evaluation's thread runs this."""
        lo, hi = self.settings.cold_start_min_s, self.settings.cold_start_max_s
        try:
            started = self._pod_times(st.queries.pod_started)
            ready = self._pod_times(st.queries.pod_ready_at)
            st.first_ready.observe({pod: (start, ready.get(pod)) for pod, start in started.items()})
            measured = st.first_ready.cold_start()
            load = None if measured is not None else self._value(st.queries.model_load, "model load time",
                                                                   required=False)
        except PrometheusUnavailable:
            return None
        if measured is not None:
            return min(hi, max(lo, measured)), "pod_ready"
        if load is not None and load >= 0:
            return min(hi, max(lo, load + self.settings.pod_start_overhead_s)), "model_load"
        return self.settings.cold_start_s, "configured"

    @staticmethod
    def _apply_cold_start(st: TargetState, learned: tuple[float, str] | None) -> None:
        if learned is None:
            return
        cold, st.cold_start_source = learned
        if cold != st.recommender.config.cold_start_s:
            st.recommender.config = dataclasses.replace(st.recommender.config, cold_start_s=cold)

    def _evaluate_one(self, st: TargetState, now: float) -> None:
        # Every read first, no lock held ...
        learned = self._read_cold_start(st)
        obs: Observation | None = None
        pods: dict[str, str] | None = None
        hpa: tuple[int, int] | None = None
        try:
            obs = self.observe(st, now)
            hpa = self.hpa_replicas(st)
        except PrometheusUnavailable as exc:
            problem = ("prometheus_down", str(exc))
        except DataProblem as exc:
            problem = (exc.reason, str(exc))
        else:
            pods = self._discover(st)
        # ... then the state, under the lock; Kubernetes is written after it.
        with self._lock:
            st.evaluated_at = self.clock()  # the service's clock, as _mark_stuck reads it (*now* may be given)
            self._apply_cold_start(st, learned)
            if pods is not None:
                st.pods = pods
            if obs is None:
                self._hold(st, *problem)
                return
            event = self._decide(st, obs, hpa, now)
        if event is not None:
            self._send_event(st, *event)
        self._apply(st)

    def _decide(self, st: TargetState, obs: Observation, hpa: tuple[int, int] | None,
                now: float) -> tuple[int, int, str, str] | None:
        """The recommendation for *obs*, published or held (under the lock); the Event to post
        (before, after, decision, detail) when the published count changed.

        A replica reading that disagrees (`replica_disagreement`) is replaced by the larger of the
        counts it disagrees with, the disagreement counted, and the answer never drops below the
        last one (`hold_replicas_disagree`); a scale-up still goes out."""
        disagrees = self.replica_disagreement(st, obs.current_replicas, hpa, now)
        if disagrees is not None:
            trusted = max(obs.current_replicas, *(hpa or ()), st.published or 0)
            obs = dataclasses.replace(obs, current_replicas=trusted)
            if st.decision != "hold_replicas_disagree":
                log.warning("recommender %s/%s: %s; holding %s", st.settings.namespace, st.settings.deployment,
                            disagrees, st.published)
            st.replica_disagreements += 1
        try:
            rec = st.recommender.recommend(obs)
        except ValueError as exc:
            self._hold(st, "nan", str(exc))
            return None
        st.current = obs.current_replicas
        desired = rec.desired
        if self.settings.hpa_tolerance_rounding:
            desired = min(st.settings.max_replicas, reachable_under_tolerance(obs.current_replicas, desired))
        missing = st.fast_reading.missing if st.fast_reading is not None else ()
        if missing and desired < obs.current_replicas:
            # A pod that does not answer may be the one with the load: never scale down on that.
            self._hold(st, "missing", f"fast path: {len(missing)} pod(s) did not answer "
                       f"({', '.join(missing[:3])}); no scale-down")
            return None
        before, reason, detail = st.published, rec.reason, rec.reason
        if disagrees is not None and before is not None and desired <= before:
            desired, reason, detail = before, "replicas", disagrees
        self._published(st, desired, now)
        st.failsafe, st.detail, st.last_success = None, detail, now
        st.decision = decision(desired, obs.current_replicas, reason, None)
        if before is None or desired == before:
            return None
        return before, desired, st.decision, self._observation_detail(st, obs)

    def _apply(self, st: TargetState) -> None:
        """Direct mode: write the published count to the Deployment's scale subresource when it
        differs from the replicas last seen. A failed write is logged and retried at the next
        evaluation; the Deployment keeps its count meanwhile (there is no HPA behind it). The
        write happens with no lock held."""
        with self._lock:
            published, current = st.published, st.current
        if self.scaler is None or published is None or published == current:
            return
        ns, dep = st.settings.namespace, st.settings.deployment
        try:
            self.scaler.patch_namespaced_deployment_scale(dep, ns, {"spec": {"replicas": published}})
        except Exception as exc:
            log.warning("scaling %s/%s to %s failed: %s", ns, dep, published, str(exc)[:200])
            with self._lock:
                st.scale_write_failures += 1
            return
        with self._lock:
            st.current = published

    def _discover(self, st: TargetState) -> dict[str, str] | None:
        """The fast path's pods from Prometheus' series; None keeps the known ones (no fast path, or
        a failed read)."""
        if self.reader is None:
            return None
        try:
            return discover_pods(self.client, st.queries.pending, self.settings.fast_path.max_pods)
        except PrometheusUnavailable as exc:
            log.debug("fast path: pod discovery for %s/%s failed: %s", st.settings.namespace,
                      st.settings.deployment, exc)
            return None

    def evaluate_fast(self, now: float | None = None) -> None:
        """One round of the fast path for every target: read its pods, panic on an overload.

        The panic only ever raises the published count (at once, with its Event); everything else
        stays with the slow evaluation. A pod that does not answer keeps its last good values in the
        window, and the next slow evaluation does not scale down (`hold_missing_data`). The pods are
        read, and the Event posted, with no lock held."""
        if self.reader is None:
            return
        for st in self.states.values():
            if not st.pods or st.fast is None:
                continue
            reads = self.reader.read(st.pods, st.settings.model)
            stamp = self.clock() if now is None else now
            with self._lock:
                reading = st.fast_reading = st.fast.add(stamp, reads)
                rec = st.recommender.panic(stamp, reading.arrival_rps, asked_replicas(st.published, st.current),
                                           reading.newest_rps)
                if rec is None or st.published is None or rec.desired <= st.published:
                    continue
                before = st.published
                self._published(st, rec.desired, stamp)
                st.decision, st.detail = "scale_up_panic", rec.reason
                event = (before, rec.desired, st.decision, self._panic_detail(st, reading))
            self._send_event(st, *event)
            self._apply(st)

    @staticmethod
    def _panic_detail(st: TargetState, reading: FastReading) -> str:
        newest = "" if reading.newest_rps is None else f" ({reading.newest_rps:.1f} req/s over the newest read)"
        return (f"arrival {reading.arrival_rps or 0.0:.1f} req/s read from {reading.pods} pod(s) over the last "
                f"{st.recommender.config.panic_window_s:g} s{newest}, capacity "
                f"{st.recommender.capacity_rps:.1f} req/s per replica")

    @staticmethod
    def _observation_detail(st: TargetState, obs: Observation) -> str:
        p99 = "unknown" if obs.p99_s is None else f"{obs.p99_s * 1e3:.0f} ms"
        return (f"arrival {obs.arrival_rps:.1f} req/s, rejected {obs.rejected_rps:.1f} req/s, queue "
                f"{obs.queue_depth:.0f}, P99 {p99}, capacity {st.recommender.capacity_rps:.1f} req/s per replica, "
                f"{obs.ready_replicas}/{obs.current_replicas} replicas ready")

    def _send_event(self, st: TargetState, before: int, after: int, why: str, detail: str) -> None:
        """A Kubernetes Event on the target Deployment saying why the recommendation changed; best
        effort (the API server being away never delays a scale-up), and never under the lock."""
        if self.events is None:
            return
        ns, dep = st.settings.namespace, st.settings.deployment
        now = datetime.now(UTC)
        # Named by the change alone: two replicas (HA) see the same change within an interval or
        # two, perhaps by different paths (one panics on the fast path, one follows the rate).
        body = deployment_event(ns, dep, reason="TidescaleRecommendation", now=now,
                                message=event_message(before, after, why, detail),
                                component=EVENT_COMPONENT, name_prefix="tidescale-recommendation",
                                series_key=f"{before}->{after}")
        try:
            post_event_once(self.events, body, now=now, twin_window_s=event_twin_window_s(
                self.settings.interval_s, st.recommender.config.down_delay_s))
        except Exception as exc:
            log.warning("posting the recommendation Event for %s/%s failed: %s", ns, dep, exc)

    def _hold(self, st: TargetState, reason: str, detail: str) -> None:
        """Keep publishing the last good value (no scale-down on missing data) and say why."""
        st.decision = "hold_missing_data"
        if st.failsafe != reason:
            log.warning("recommender %s/%s holds %s: %s (%s)", st.settings.namespace, st.settings.deployment,
                        st.published, reason, detail)
        st.failsafe, st.detail = reason, detail

    def _mark_stuck(self) -> None:
        """Hold, as `stuck`, every target whose evaluation has not ended for `stuck_after()` (under
        the lock; run by every reader of the state, so the hang shows in `/metrics`, `/v1/desired`
        and `/healthz` while the evaluation itself is still waiting)."""
        now, limit = self.clock(), self.settings.stuck_after()
        for st in self.states.values():
            since = self.started if st.evaluated_at is None else st.evaluated_at
            if now - since > limit:
                self._hold(st, "stuck", f"no evaluation has ended for {now - since:.0f} s (limit {limit:g} s)")

    # --- export -----------------------------------------------------------------------------------

    def answer(self, namespace: str, deployment: str) -> DesiredAnswer | None:
        """What `/metrics` exports for one target, for KEDA's metrics-api trigger; None before the
        first good evaluation (KeyError: not a target)."""
        with self._lock:
            self._mark_stuck()
            st = self.states[(namespace, deployment)]
            if st.published is None:
                return None
            return DesiredAnswer(namespace=namespace, deployment=deployment, desired_replicas=st.published,
                                 decision=st.decision, failsafe=st.failsafe, last_success=st.last_success)
    def collect(self) -> Iterator[Metric]:
        def family(name: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            fam = catalog.get(name)
            return GaugeMetricFamily(fam.name, fam.help, labels=["namespace", "deployment", *extra])

        desired = family("tidescale_desired_replicas")
        failsafe = family("tidescale_recommender_failsafe", ("reason",))
        capacity = family("tidescale_recommender_capacity_rps")
        success = family("tidescale_recommender_last_success_timestamp_seconds")
        cold = family("tidescale_recommender_cold_start_seconds", ("source",))
        decided = family("tidescale_recommender_decision", ("reason",))
        fast_rate = family("tidescale_recommender_fast_path_arrival_rps")
        fast_pods = family("tidescale_recommender_fast_path_pods", ("state",))
        write_failures = catalog.get("tidescale_recommender_scale_write_failures_total")
        failed_writes = CounterMetricFamily(write_failures.name.removesuffix("_total"), write_failures.help,
                                            labels=["namespace", "deployment"])
        disagreement = catalog.get("tidescale_recommender_replica_disagreements_total")
        disagreements = CounterMetricFamily(disagreement.name.removesuffix("_total"), disagreement.help,
                                            labels=["namespace", "deployment"])
        with self._lock:
            self._mark_stuck()
            for (ns, dep), st in self.states.items():
                if st.published is not None:
                    desired.add_metric([ns, dep], float(st.published))
                for reason in FAILSAFE_REASONS:
                    failsafe.add_metric([ns, dep, reason], 1.0 if st.failsafe == reason else 0.0)
                capacity.add_metric([ns, dep], st.recommender.capacity_rps)
                cold.add_metric([ns, dep, st.cold_start_source], st.recommender.config.cold_start_s)
                for reason in DECISIONS:
                    decided.add_metric([ns, dep, reason], 1.0 if st.decision == reason else 0.0)
                if st.last_success is not None:
                    success.add_metric([ns, dep], st.last_success)
                if self.scaler is not None:
                    failed_writes.add_metric([ns, dep], float(st.scale_write_failures))
                disagreements.add_metric([ns, dep], float(st.replica_disagreements))
                reading = st.fast_reading
                if reading is not None:
                    if reading.arrival_rps is not None:
                        fast_rate.add_metric([ns, dep], reading.arrival_rps)
                    fast_pods.add_metric([ns, dep, "answered"], float(reading.pods - len(reading.missing)))
                    fast_pods.add_metric([ns, dep, "missing"], float(len(reading.missing)))
        yield from (desired, failsafe, capacity, success, cold, decided, fast_rate, fast_pods, disagreements)
        if self.scaler is not None:
            yield failed_writes

    def describe(self) -> Iterator[Metric]:
        return iter(())

    # --- running ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the Prometheus client and the fast path's connections and threads."""
        if self.reader is not None:
            self.reader.close()
        self.client.close()

    def run_loop(self, stop: threading.Event) -> None:
        """The slow evaluation every `interval_s`, and the fast path every `fast_path.interval_s` in a
        thread of its own (a slow Prometheus never delays a panic); each beats its heartbeat."""
        fast = None
        if self.fast_path_heartbeat is not None:
            every = self.settings.fast_path.interval_s
            fast = threading.Thread(target=self._loop, args=(stop, self.evaluate_fast, every, self.fast_path_heartbeat),
                                    daemon=True, name="recommender-fast-path")
            fast.start()
        self._loop(stop, self.evaluate, self.settings.interval_s, self.evaluation_heartbeat)
        if fast is not None:
            fast.join(timeout=5)

    @staticmethod
    def _loop(stop: threading.Event, step: Callable[[], Any], interval_s: float, heartbeat: Heartbeat) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                step()
            except Exception:  # a bug must not stop the loop: the exported values go stale, alerts fire
                log.exception("recommender evaluation failed")
            else:  # a round that raises every time makes no progress either
                heartbeat.beat()
            stop.wait(max(0.0, interval_s - (time.monotonic() - started)))


class DesiredAnswer(BaseModel):
    """One target's answer, what KEDA's metrics-api trigger reads (`desired_replicas`)."""

    namespace: str
    deployment: str
    desired_replicas: int
    decision: str
    failsafe: str | None  # the reason the last good answer is held, if it is
    last_success: float | None  # Unix time of the last evaluation with good data
