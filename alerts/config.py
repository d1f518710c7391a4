"""The one typed configuration behind every generated rule and the Alertmanager config.

Change a threshold here (or in the `alerts:` section of a tidescale YAML file, rendered with
`tidescale alerts render --config FILE`) and regenerate; nothing is hand-edited in the YAML.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from tidescale.contracts.placeholders import DEFAULT_CLUSTER_LABEL
from tidescale.contracts.promql import LABEL_NAME
from tidescale.contracts.settings import ComponentSettings, SettingsModel
from tidescale.contracts.slo import (
    AVAILABILITY_OBJECTIVE,
    DEFAULT_SLO_NAME,
    LATENCY_OBJECTIVE,
    SLO_LATENCY_THRESHOLD_S,
    SLO_THRESHOLDS_S,
    Regex,
    ResolvedSlo,
    SloGroup,
    le_value,
    resolve_slos,
)

# SLO latency thresholds (seconds) that must be exact bucket boundaries of
# tidescale_request_duration_seconds: the exporter adds them to its buckets.
DEFAULT_SLO_THRESHOLDS_S: tuple[float, ...] = SLO_THRESHOLDS_S

_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
_OP_CLASS = re.compile(r"^[a-z][a-z0-9_]*$")
_JOB = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")
def check_duration(value: str) -> str:
    if not _DURATION.match(value):
        raise ValueError(f"{value!r} is not a Prometheus duration such as 30s, 5m or 1h")
    return value


Duration = Annotated[str, AfterValidator(check_duration)]


class ForDurations(SettingsModel):
    """`for:` of each alert; short in tests and the local demo, production defaults here."""

    budget_burn_page: Duration = "2m"
    budget_burn_ticket: Duration = "15m"
    queue_backlog: Duration = "10m"
    autoscaler_maxed_out: Duration = "10m"
    model_not_ready: Duration = "5m"
    pod_restarting: Duration = "5m"
    gpu_memory_leak: Duration = "30m"
    gpu_xid: Duration = "0s"
    gpu_throttling: Duration = "10m"
    gpu_idle_while_queueing: Duration = "10m"
    load_imbalance: Duration = "15m"
    model_review: Duration = "15m"
    exporter_down: Duration = "5m"
    series_capped: Duration = "5m"
    spans_dropped: Duration = "15m"
    profile_stale: Duration = "10m"
    metrics_absent: Duration = "10m"
    recommender_down: Duration = "5m"
    recommender_stale: Duration = "5m"
    recommender_cannot_scale: Duration = "5m"


class AlertmanagerRouting(SettingsModel):
    """Receivers and timing of the generated Alertmanager config (secrets only by file path)."""

    pager_url: str = "http://pager-gateway.monitoring.svc:8080/alerts"
    tickets_url: str = "http://ticket-gateway.monitoring.svc:8080/alerts"
    reviews_url: str = "http://tidescale-reviews.tidescale.svc:8080/api/v1/alertmanager"
    # Bearer token of the review service, read by Alertmanager from a mounted Secret.
    reviews_token_file: str = "/etc/alertmanager/secrets/tidescale-reviews/token"
    group_wait: Duration = "30s"
    group_interval: Duration = "5m"
    repeat_interval: Duration = "4h"
    resolve_timeout: Duration = "5m"


class AlertsConfig(ComponentSettings):
    """Thresholds, SLOs, `for:` durations and routing for the generated rules."""

    section: ClassVar[str] = "alerts"
    model_config = SettingsConfigDict(env_prefix="TIDESCALE_ALERTS_", extra="forbid")

    # The default SLO, and per model or model group the SLOs that differ from it (first match wins).
    slo_latency_threshold_s: float = Field(SLO_LATENCY_THRESHOLD_S, gt=0)
    latency_slo_target: float = Field(LATENCY_OBJECTIVE, gt=0, lt=1)
    availability_slo_target: float = Field(AVAILABILITY_OBJECTIVE, gt=0, lt=1)
    slos: list[SloGroup] = Field(default_factory=list)
    bucket_boundaries_s: tuple[float, ...] = DEFAULT_SLO_THRESHOLDS_S
    queue_depth_per_replica_limit: float = Field(8.0, gt=0)
    queue_time_limit_s: float = Field(0.1, gt=0)
    op_class_limits: dict[str, float] = Field(default_factory=lambda: {"string": 0.05})
    regression_ratio: float = Field(0.20, gt=0)
    regression_min_rps: float = Field(0.1, ge=0)
    # Burn-rate alerts stay quiet below this many requests/s over their short window (0: no guard):
    # at a handful of requests, one slow or failed request is already a 14x burn.
    burn_min_request_rate: float = Field(0.05, ge=0)
    # Labels every aggregation and join keeps (kubernetes-mixin's clusterLabel): the external label
    # that tells clusters apart in a Thanos or Mimir holding several.
    aggregation_labels: list[str] = Field(default_factory=lambda: [DEFAULT_CLUSTER_LABEL])
    pod_restarts_limit: int = Field(3, ge=1)
    gpu_memory_predict_hours: float = Field(4.0, gt=0)
    gpu_memory_lookback: Duration = "6h"
    gpu_idle_utilization: float = Field(0.05, ge=0, lt=1)
    # TritonLoadImbalanced: a Deployment's least busy pod serves a model at under 1/ratio of its busiest
    # pod's rate, while the model gets at least min_rps (idle fleets and single requests stay quiet).
    load_imbalance_ratio: float = Field(4.0, gt=1)
    load_imbalance_min_rps: float = Field(1.0, ge=0)
    profile_max_age_s: float = Field(86400.0, gt=0)
    # Spans (OTLP) or trace entries (trace files) the exporter drops: a share of what it received
    # above the ratio, and at least the count, over 15 minutes. Below either, a rollout's few cut
    # requests or one stray client's bad body; above both, the histograms undercount.
    spans_dropped_max_ratio: float = Field(0.01, gt=0, lt=1)
    spans_dropped_min: int = Field(10, ge=1)
    exporter_job: str = "tidescale-exporter"
    recommender_job: str = "tidescale-recommender"
    # The recommender evaluates every 15-30 s; this long without a good evaluation means it holds its
    # last answer on missing data, and nothing scales on new demand.
    recommender_max_age_s: float = Field(180.0, gt=0)
    triton_container_regex: Regex = ".*triton.*"
    pod_deployment_regex: Regex = "(.+)-[a-z0-9]+-[a-z0-9]+"
    runbook_base_url: str = "https://github.com/tidescale/tidescale/blob/main/docs/runbooks"
    evaluation_interval: Duration = "30s"
    extra_labels: dict[str, str] = Field(default_factory=dict)
    for_: ForDurations = Field(default_factory=ForDurations, alias="for")
    alertmanager: AlertmanagerRouting = Field(default_factory=AlertmanagerRouting)

    @field_validator("exporter_job", "recommender_job")
    @classmethod
    def _job(cls, v: str) -> str:
        if not _JOB.match(v):
            raise ValueError(f"job name {v!r} must match {_JOB.pattern}")
        return v

    @field_validator("op_class_limits")
    @classmethod
    def _op_classes(cls, v: dict[str, float]) -> dict[str, float]:
        for name, limit in v.items():
            if not _OP_CLASS.match(name):
                raise ValueError(f"op class {name!r} must be lower_snake_case")
            if not 0 < limit < 1:
                raise ValueError(f"op class {name!r} limit {limit} must be a share between 0 and 1")
        return v

    @field_validator("extra_labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        reserved = {"severity", "alertname", "model", "version", "reason", "namespace"}
        for name in v:
            if not LABEL_NAME.match(name) or name in reserved:
                raise ValueError(f"extra label {name!r} is not a valid, unreserved label name")
        return v

    @model_validator(mode="after")
    def _thresholds_are_buckets(self) -> AlertsConfig:
        boundaries = {le_value(b) for b in self.bucket_boundaries_s}
        for slo in self.resolved_slos():
            if le_value(slo.latency_threshold_s) not in boundaries:
                raise ValueError(
                    f"latency threshold {slo.latency_threshold_s}s of SLO {slo.name} is not a bucket boundary "
                    f"of tidescale_request_duration_seconds ({sorted(self.bucket_boundaries_s)})"
                )
        names = [g.name for g in self.slos]
        if len(set(names)) != len(names):
            raise ValueError(f"SLO names must be unique, got {names}")
        return self

    def resolved_slos(self) -> list[ResolvedSlo]:
        """Each SLO group with the defaults filled in, then the default SLO (matching every model)."""
        return resolve_slos(self.slos, ResolvedSlo(DEFAULT_SLO_NAME, "", "", self.slo_latency_threshold_s,
                                                   self.latency_slo_target, self.availability_slo_target))

    def threshold_les(self) -> list[str]:
        """Every SLO bucket boundary and configured threshold as an `le` value, sorted numerically."""
        values = {*self.bucket_boundaries_s, *(s.latency_threshold_s for s in self.resolved_slos())}
        return [le_value(v) for v in sorted(values)]

    def runbook_url(self, alertname: str) -> str:
        return f"{self.runbook_base_url.rstrip('/')}/{alertname.lower()}.md"


def default_config() -> AlertsConfig:
    """The configuration the committed YAML is generated from: defaults only, never the environment
    (a TIDESCALE_ALERTS_* variable must not make `tidescale generate --check` fail)."""
    return AlertsConfig.model_construct()
