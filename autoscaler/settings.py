"""The recommender's settings: what a user configures (`recommender:` in the chart's values), validated once.

`RecommenderTuning` carries `RecommenderConfig`'s defaults (recommend.py) as they are, so the service,
the benchmark and `--print-config` run the same numbers; `RecommenderSettings.config_for` turns a
target's settings into the config its `Recommender` runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from tidescale.autoscaler.budget import MAX_BUDGET_SHARES, check_budget_shares
from tidescale.autoscaler.capacity import MAX_PROFILE_REPLICAS, load_budget_shares, load_capacity
from tidescale.autoscaler.forecast import DAY_S, WEEK_S
from tidescale.autoscaler.recommend import MAX_CLIENT_RETRIES, MAX_PANIC_CONFIRM_READINGS, RecommenderConfig
from tidescale.contracts.errors import UsageError
from tidescale.contracts.prometheus import DEFAULT_PROMETHEUS_URL, MAX_ANSWER_BYTES, PrometheusAuth
from tidescale.contracts.promql import LABEL_NAME
from tidescale.contracts.redact import redact_url
from tidescale.contracts.settings import Host, InfOff, ServingSettings, SettingsModel
from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S, SloValues, slo_of

# Labels the target's queries match on themselves: a series matcher may not override them.
QUERY_LABELS = frozenset({"namespace", "deployment", "pod", "model", "reason", "stage", "le", "__name__"})
MAX_TARGETS = 200
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
    panic_confirm_readings: int = Field(default=_default("panic_confirm_readings"), ge=1,
                                        le=MAX_PANIC_CONFIRM_READINGS)
    panic_window_s: float = Field(default=_default("panic_window_s"), gt=0, allow_inf_nan=False)
    panic_hold_s: float = Field(default=_default("panic_hold_s"), ge=0, allow_inf_nan=False)
    panic_lookahead_extra_s: float = Field(default=_default("panic_lookahead_extra_s"), ge=0, allow_inf_nan=False)
    panic_trend_cap: float = Field(default=_default("panic_trend_cap"), ge=1, allow_inf_nan=False)
    panic_trend_window_s: float = Field(default=_default("panic_trend_window_s"), gt=0, allow_inf_nan=False)
    trend_cap: InfOff = Field(default=_default("trend_cap"), ge=1)  # inf: off
    sizing: Literal["fixed", "burst", "queue"] = Field(default=_default("sizing"))
    burst_window_s: float = Field(default=_default("burst_window_s"), gt=0, allow_inf_nan=False)
    burst_smooth_s: float = Field(default=_default("burst_smooth_s"), gt=0, allow_inf_nan=False)
    burst_delay_ratio: float = Field(default=_default("burst_delay_ratio"), ge=0, allow_inf_nan=False)
    burst_late_share: float = Field(default=_default("burst_late_share"), ge=0, lt=1)
    max_burst_factor: float = Field(default=_default("max_burst_factor"), ge=1, allow_inf_nan=False)
    fall_window_s: InfOff = Field(default=_default("fall_window_s"), gt=0)  # inf: off
    fall_fit: float = Field(default=_default("fall_fit"), gt=0, le=1)
    return_window_s: float = Field(default=_default("return_window_s"), ge=0, allow_inf_nan=False)  # 0: off
    return_tolerance: float = Field(default=_default("return_tolerance"), ge=0, le=1, allow_inf_nan=False)  # 0: off
    replace_crash_looping: bool = Field(default=_default("replace_crash_looping"))
    dip_hold_s: float = Field(default=_default("dip_hold_s"), ge=0, allow_inf_nan=False)  # 0: off

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values (inf as "Infinity"), as recorded by the benchmark and printed by the CLI."""
        return json.loads(self.model_dump_json())  # type: ignore[no-any-return]


# RecommenderConfig fields that are not tuning: set per target, from the profile, or by their own setting.
NOT_TUNING = ("capacity_rps", "min_replicas", "max_replicas", "cold_start_s", "headroom", "p99_window_s",
              "client_retries", "budget_shares")


# One row of `budget_shares`, bounded in the type so that the chart's generated schema checks each number too.
BudgetFraction = Annotated[float, Field(gt=0, lt=1)]
BudgetShare = Annotated[float, Field(gt=0, le=1)]


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
    # The pods are found again this often between evaluations (one Prometheus query per target), so a
    # pod a scale-up added is read once Prometheus has scraped it, not at the next evaluation: until
    # then its share of the load, which the Service moved off the pods read, is not seen.
    discovery_interval_s: float = Field(default=6.0, ge=0.5, le=300, allow_inf_nan=False)


class ForecastSettings(SettingsModel):
    """`recommender.settings.forecast`: pre-scale ahead of the peaks Prometheus' history holds (forecast.py).

    Each evaluation reads the demand (completions + rejections) of the target one period ago, over
    the lookahead plus `margin_s` either side (a peak that came a little earlier or later), and
    scales its peak by today's level against that period's (the median over `level_window_s`, now
    and then; at most `max_growth`). The longest period Prometheus holds wins. Prometheus must keep
    the longest period (kube-prometheus-stack keeps 10 days)."""

    enabled: bool = True
    periods_s: list[float] = Field(default_factory=lambda: [DAY_S, WEEK_S], min_length=1, max_length=4)
    # How far ahead the peak is looked for; None: the cold start (learned, else configured) + the
    # lookahead's extra.
    ahead_s: float | None = Field(default=None, gt=0, le=3600, allow_inf_nan=False)
    margin_s: float = Field(default=120.0, ge=0, le=3600, allow_inf_nan=False)
    level_window_s: float = Field(default=600.0, ge=60, le=7200, allow_inf_nan=False)
    max_growth: float = Field(default=2.0, ge=1, le=10, allow_inf_nan=False)

    @field_validator("periods_s")
    @classmethod
    def _periods(cls, v: list[float]) -> list[float]:
        """Whole minutes from an hour to five weeks: a season, not a rate window."""
        for p in v:
            if not (math.isfinite(p) and 3600 <= p <= 5 * WEEK_S and p % 60 == 0):
                raise ValueError(f"forecast periods must be whole minutes from 3600 s to {5 * WEEK_S:g} s, got {p:g}")
        return sorted(set(v))

    def ahead(self, cold_start_s: float, tuning: RecommenderTuning) -> float:
        """How far ahead of now the peak a period ago is read."""
        return self.ahead_s if self.ahead_s is not None else cold_start_s + tuning.lookahead_extra_s


class TargetSettings(SettingsModel):
    """One Deployment to recommend for."""

    renamed: ClassVar[Mapping[str, str]] = {"slo_p99_s": "slo_latency_threshold_s"}

    deployment: str
    namespace: str
    model: str
    min_replicas: int = Field(default=1, ge=1)
    max_replicas: int = Field(default=20, ge=1)
    capacity_rps: float | None = Field(default=None, gt=0)  # overrides the profile for this target
    # The P99 this target is sized for, set here; None: its model's SLO (`slo`), else slo_latency_threshold_s.
    slo_latency_threshold_s: float | None = Field(default=None, gt=0)
    # The HPA that applies the answer (the chart's autoscaling.targets[].hpaName; None: the Deployment's
    # name): read for its lastScaleTime where a panic may wait for a confirmation (hpaclock.py).
    hpa_name: str | None = None

    @model_validator(mode="after")
    def _min_le_max(self) -> TargetSettings:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) must not exceed max_replicas ({self.max_replicas})")
        return self


class RecommenderSettings(ServingSettings):
    """`recommender:` section / `TIDESCALE_RECOMMENDER_*` (the server's bounds: `ServingSettings`)."""

    section: ClassVar[str] = "recommender"
    model_config = SettingsConfigDict(env_prefix="TIDESCALE_RECOMMENDER_", extra="forbid")
    renamed: ClassVar[Mapping[str, str]] = {"slo_p99_s": "slo_latency_threshold_s"}

    prometheus_url: str = DEFAULT_PROMETHEUS_URL
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
    slo_latency_threshold_s: float = Field(default=SLO_LATENCY_THRESHOLD_S, gt=0)
    # The chart's `slo` values as they are: each target is sized for the latency threshold of the first
    # SLO its model matches, resolved by the function the alert rules' SLO group is made with.
    slo: SloValues | None = None
    profile: Path | None = None  # perf_analyzer CSV: capacity at the SLO
    # The replicas `profile` was measured on, through the Service (its throughput is theirs together).
    profile_replicas: int = Field(default=1, ge=1, le=MAX_PROFILE_REPLICAS)
    capacity_rps: float | None = Field(default=None, gt=0)
    # The replica's latency-vs-load curve for `tuning.sizing: queue` (budget.py): [fraction of the
    # SLO, share of the capacity at the SLO a replica carries within it] rows. None: read from `profile`.
    budget_shares: list[tuple[BudgetFraction, BudgetShare]] | None = Field(default=None, max_length=MAX_BUDGET_SHARES)
    cold_start_s: float = Field(default=60.0, ge=0)
    # Where Triton reports nv_model_load_duration_secs (24.11+), the cold start is that plus this
    # (scheduling, container and server start): learned, not typed; cold_start_s is the fallback.
    pod_start_overhead_s: float = Field(default=15.0, ge=0)
    # A learned cold start is kept within these (a pod with no readiness probe reads 0 s; a bad
    # clock or a flap the tracker could not see through, hours): `cold_start_s` itself is not clamped.
    cold_start_min_s: float = Field(default=5.0, ge=0)
    cold_start_max_s: float = Field(default=900.0, gt=0)
    headroom: float = Field(default=1.0, ge=1.0, allow_inf_nan=False)  # standing capacity: x the 10-min floor
    # Retries your clients or mesh make on a 503 (Istio's default route: 2): a retried request is read
    # once, not once per attempt (docs/autoscaler.md, "Clients that retry"). 0: no client retries.
    client_retries: int = Field(default=0, ge=0, le=MAX_CLIENT_RETRIES)
    # Post a Kubernetes Event on the target Deployment whenever the recommendation changes, saying why
    # (the chart turns it on and grants `create events` in the serving namespace).
    kube_events: bool = False
    hpa_tolerance_rounding: bool = False  # cluster without behavior.*.tolerance (k8s < 1.33)
    tuning: RecommenderTuning = Field(default_factory=RecommenderTuning)
    fast_path: FastPathSettings = Field(default_factory=FastPathSettings)
    forecast: ForecastSettings = Field(default_factory=ForecastSettings)
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

    @field_validator("budget_shares")
    @classmethod
    def _budget_shares(cls, v: list[tuple[float, float]] | None) -> list[tuple[float, float]] | None:
        if v is not None:
            try:
                check_budget_shares(v)
            except UsageError as exc:
                raise ValueError(str(exc)) from None
        return v

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
                                 headroom=self.headroom, client_retries=self.client_retries,
                                 budget_shares=self.budget_shares_for(t), **self.tuning.model_dump())

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
        """The P99 target *t* is sized for: its own, else its model's SLO, else the default."""
        if t.slo_latency_threshold_s is not None:
            return t.slo_latency_threshold_s
        if self.slo is not None:
            return slo_of(self.slo.resolved(), t.namespace, t.model).latency_threshold_s
        return self.slo_latency_threshold_s

    def budget_shares_for(self, t: TargetSettings) -> tuple[tuple[float, float], ...]:
        """The curve queue sizing splits *t*'s SLO on: set, else read from the profile at its SLO; none
        for the other sizings (nothing reads it) or without either (queue sizing then sizes as burst)."""
        if self.tuning.sizing != "queue":
            return ()
        if self.budget_shares is not None:
            return tuple(self.budget_shares)
        return load_budget_shares(self.profile, self.slo_for(t)) if self.profile is not None else ()

    def capacity_for(self, t: TargetSettings) -> float:
        if t.capacity_rps is not None:
            return t.capacity_rps
        if self.capacity_rps is not None:
            return self.capacity_rps
        if self.profile is not None:
            return load_capacity(self.profile, self.slo_for(t), self.profile_replicas)
        raise UsageError(f"target {t.namespace}/{t.deployment}: give capacity_rps or a profile (perf_analyzer CSV)")


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    """inf is a legal setting ("off") but not JSON: write it as the string pydantic reads back."""
    return {k: ("Infinity" if isinstance(v, float) and math.isinf(v) else v) for k, v in values.items()}


