"""HPA (autoscaling/v2) and KEDA ScaledObject manifests that scale on the recommender's answer.

Exact scaling: the HPA reads `tidescale_desired_replicas` (D) as an External metric with an
`AverageValue: 1` target, so its proposal is ceil(D / 1) = D. The default 10 % tolerance would
swallow D = N + 1 at N >= 10 (ratio 1.1), so `behavior.scaleUp/scaleDown.tolerance` is set to 0
(Kubernetes >= 1.33, HPAConfigurableTolerance; beta and on by default from 1.34). On an older
cluster (`legacy=True`) the field is left out and the recommender rounds a small change to the
nearest count the HPA can reach (`recommend.reachable_under_tolerance`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidescale.autoscaler import adapter
from tidescale.autoscaler.hpa import Behavior, HpaSpec, MetricSpec, ScalingPolicy, ScalingRules, spec_to_dict
from tidescale.autoscaler.queue_policy import recommended_queue_policy
from tidescale.contracts import catalog
from tidescale.contracts.errors import UsageError
from tidescale.contracts.prometheus import DEFAULT_PROMETHEUS_URL
from tidescale.contracts.promql import selector
from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S, check_slo_threshold
from tidescale.contracts.yamlout import dump, dump_all

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"  # RFC 1123 label: a namespace's or a Deployment's name
DNS_LABEL = re.compile(rf"^{_LABEL}$")
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?]+$")
KEDA_POLLING_S = 15
# The recommender's answer for one target, as KEDA's metrics-api trigger reads it (app.make_app).
DESIRED_PATH = "/v1/desired"
DESIRED_FIELD = "desired_replicas"
# http://SERVICE.NAMESPACE[.svc[.cluster.local]][:PORT]: KEDA finds the Service's endpoints from the first two labels.
_HTTP_URL = re.compile(r"^https?://[^\s/?#]+(/\S*)?$")  # what the chart's schema asks of a Prometheus URL, and a host
_SERVICE_URL = re.compile(rf"^https?://{_LABEL}\.{_LABEL}(\.[a-z0-9.-]+)?(:[0-9]{{1,5}})?$")


def desired_path(namespace: str, deployment: str) -> str:
    return f"{DESIRED_PATH}/{namespace}/{deployment}"


@functools.cache
def _iana_zones() -> frozenset[str]:
    import zoneinfo

    return frozenset(zoneinfo.available_timezones())


@dataclass(frozen=True)
class PreScale:
    """A known peak: from *start* to *end* (5-field cron in *timezone*) keep at least *replicas*.

    Rendered as a KEDA `cron` trigger beside the prometheus one (the HPA takes the maximum), so
    the replicas exist before the peak is visible: start it one cold start before the peak."""

    timezone: str
    start: str
    end: str
    replicas: int

    @classmethod
    def parse(cls, text: str) -> PreScale:
        """`TIMEZONE;START CRON;END CRON;REPLICAS`, e.g. `Europe/Berlin;50 8 * * 1-5;0 11 * * 1-5;12`."""
        parts = [p.strip() for p in text.split(";")]
        if len(parts) != 4:
            raise UsageError(f"--prescale {text!r}: expected TIMEZONE;START CRON;END CRON;REPLICAS")
        tz, start, end, replicas = parts
        try:
            count = int(replicas)
        except ValueError:
            raise UsageError(f"--prescale {text!r}: replicas {replicas!r} is not a whole number") from None
        return cls(tz, start, end, count)

    def __post_init__(self) -> None:
        if self.timezone not in _iana_zones():  # not ZoneInfo(): "America" is a directory, not a zone
            raise UsageError(f"--prescale: unknown IANA time zone {self.timezone!r}")
        for what, expr in (("start", self.start), ("end", self.end)):
            fields = expr.split()
            if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
                raise UsageError(f"--prescale: {what} {expr!r} is not a 5-field cron expression")
        if self.start.split() == self.end.split():
            raise UsageError("--prescale: start and end must differ")
        if self.replicas < 1:
            raise UsageError(f"--prescale: replicas must be >= 1, got {self.replicas}")

    def trigger(self) -> dict[str, Any]:
        return {"type": "cron", "metadata": {"timezone": self.timezone, "start": self.start, "end": self.end,
                                             "desiredReplicas": str(self.replicas)}}


@dataclass(frozen=True)
class Target:
    """What to scale: a Triton Deployment serving *model* in *namespace*."""

    deployment: str
    namespace: str
    model: str
    min_replicas: int = 1
    max_replicas: int = 20
    slo_latency_threshold_s: float | None = None
    prescale: tuple[PreScale, ...] = ()  # known peaks (KEDA cron triggers)
    # The HPA that scales the Deployment (KEDA's too); default the Deployment's name. One that exists
    # already (the user's own) is taken over in place: KEDA adopts it, Helm does once annotated.
    hpa_name: str | None = None

    @property
    def hpa(self) -> str:
        return self.hpa_name or self.deployment

    def __post_init__(self) -> None:
        for what, value in (("deployment", self.deployment), ("namespace", self.namespace), ("hpa name", self.hpa)):
            if len(value) > 63 or not DNS_LABEL.match(value):
                raise UsageError(f"{what} {value!r} is not a valid Kubernetes name (RFC 1123 label)")
        if not self.model or len(self.model) > 253:
            raise UsageError("model name must be 1..253 characters")
        if not self.model.isprintable():  # a line break would end `render`'s header comment: YAML of its own
            raise UsageError(f"model name {self.model!r} contains control characters (newlines, tabs, …)")
        if self.min_replicas < 1:
            raise UsageError(f"--min-replicas must be >= 1, got {self.min_replicas}")
        if self.min_replicas > self.max_replicas:
            raise UsageError(f"--min-replicas ({self.min_replicas}) must not exceed --max-replicas "
                             f"({self.max_replicas})")
        if self.slo_latency_threshold_s is not None:
            check_slo_threshold(self.slo_latency_threshold_s, "--slo-latency-threshold")
        for p in self.prescale:
            if p.replicas > self.max_replicas:
                raise UsageError(f"--prescale: {p.replicas} replicas exceed --max-replicas ({self.max_replicas})")


def tidescale_behavior(legacy: bool = False) -> Behavior:
    """Fast up (11x or +8 pods per 15 s, no window: the recommender already looked ahead, and a 10x
    flash crowd needs its replicas in one step), measured down (at most half per 30 s, no window).

    No scale-down window: the recommender publishes a lower count only once it has sufficed for
    its whole down delay (60 s, Knative's stable window), and never lower than the fleet it sees
    when it starts, so a second window here only stacks on the first. With the HPA's 30 s window
    on top, the fleet as shipped came down a sync or two later than the recommender asked: 3-5 %
    more replica-hours on every benchmark scenario for the same requests served
    (docs/autoscaler.md). The 50 % per 30 s policy stays, so one wrong reading halves at most.
    """
    tol = None if legacy else 0.0
    return Behavior(
        scaleUp=ScalingRules(0, "Max", (ScalingPolicy("Percent", 1000, 15), ScalingPolicy("Pods", 8, 15)), tol),
        scaleDown=ScalingRules(0, "Max", (ScalingPolicy("Percent", 50, 30),), tol),
    )


def tidescale_hpa_spec(target: Target, legacy: bool = False) -> HpaSpec:
    """The HPA that follows the recommender exactly (the benchmark runs this same spec)."""
    metric = MetricSpec("External", adapter.DESIRED_REPLICAS, "AverageValue", 1.0,
                        selector={"deployment": target.deployment})
    return HpaSpec(target.min_replicas, target.max_replicas, (metric,), tidescale_behavior(legacy))


def hpa_manifest(target: Target, legacy: bool = False) -> dict[str, Any]:
    spec = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target.deployment},
            **spec_to_dict(tidescale_hpa_spec(target, legacy))}
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": target.hpa, "namespace": target.namespace,
                         "labels": {"app.kubernetes.io/managed-by": "tidescale"}},
            "spec": spec}


def keda_query(target: Target, scope: Mapping[str, str] | None = None) -> str:
    """One series: the recommender's desired replicas for this Deployment (max over duplicates), within
    *scope* (this cluster's label, where one Prometheus API holds several clusters)."""
    desired = catalog.get("tidescale_desired_replicas").name
    return f"max({selector(desired, namespace=target.namespace, deployment=target.deployment, **(scope or {}))})"


def recommender_trigger(target: Target, recommender_url: str) -> dict[str, Any]:
    """KEDA's metrics-api trigger on the recommender's own answer for *target* (AverageValue 1 = D).

    KEDA asks at each HPA sync, so a panic reaches the HPA without waiting for Prometheus to scrape
    the recommender (up to `monitoring.recommender.interval`, and a Prometheus query, on the
    prometheus trigger). With several recommender replicas KEDA asks every Ready one behind the
    Service and takes the max, what `max(tidescale_desired_replicas)` takes on the prometheus
    trigger; one that has no answer yet (503) is skipped, and none answering is an error (the HPA holds)."""
    if not _SERVICE_URL.match(recommender_url):
        raise UsageError(f"recommender URL {recommender_url!r} must be http(s)://SERVICE.NAMESPACE[.svc][:PORT] "
                         "(KEDA reads the Service's endpoints from its first two labels)")
    return {
        "type": "metrics-api", "metricType": "AverageValue",
        "metadata": {
            "url": recommender_url + desired_path(target.namespace, target.deployment),
            "format": "json", "valueLocation": DESIRED_FIELD, "targetValue": "1",
            "aggregateFromKubeServiceEndpoints": "true", "aggregationType": "max",
        },
    }


def keda_manifest(target: Target, prometheus_url: str, legacy: bool = False,
                  recommender_url: str | None = None) -> dict[str, Any]:
    """KEDA ScaledObject, AverageValue 1 = one replica's share of D: a metrics-api trigger on the
    recommender at *recommender_url*, else a prometheus trigger on its exported answer."""
    behavior = spec_to_dict(tidescale_hpa_spec(target, legacy))["behavior"]
    prometheus = {
        "type": "prometheus", "metricType": "AverageValue",
        "metadata": {
            "serverAddress": prometheus_url,
            "query": keda_query(target),
            "threshold": "1",
            # An empty result is an error (the HPA then holds), not zero (a scale-down).
            "ignoreNullValues": "false",
        },
    }
    first = recommender_trigger(target, recommender_url) if recommender_url else prometheus
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": target.deployment, "namespace": target.namespace,
                     "labels": {"app.kubernetes.io/managed-by": "tidescale"},
                     # KEDA takes over an HPA of that name already on the Deployment (the user's, or the
                     # adapter mode's on an upgrade to keda) in place, instead of refusing the object.
                     "annotations": {"scaledobject.keda.sh/transfer-hpa-ownership": "true"}},
        "spec": {
            "scaleTargetRef": {"name": target.deployment},
            "minReplicaCount": target.min_replicas, "maxReplicaCount": target.max_replicas,
            "pollingInterval": KEDA_POLLING_S,
            "advanced": {"horizontalPodAutoscalerConfig": {"name": target.hpa, "behavior": behavior}},
            "triggers": [first, *(p.trigger() for p in target.prescale)],
        },
    }


def recommender_config_snippet(target: Target, legacy: bool) -> dict[str, Any]:
    """The recommender's settings section for this target (so the two never disagree)."""
    entry: dict[str, Any] = {"deployment": target.deployment, "namespace": target.namespace, "model": target.model,
                             "min_replicas": target.min_replicas, "max_replicas": target.max_replicas}
    section: dict[str, Any] = {"targets": [entry], "hpa_tolerance_rounding": legacy}
    if target.slo_latency_threshold_s:
        section["slo_latency_threshold_s"] = target.slo_latency_threshold_s
    return {"recommender": section}


def render(target: Target, keda: bool = False, prometheus_url: str = DEFAULT_PROMETHEUS_URL,
           legacy: bool = False, adapter_namespace: str = "monitoring", max_batch_exec_s: float | None = None,
           recommender_url: str | None = None) -> str:
    """The multi-document YAML `tidescale autoscale render` prints."""
    if target.prescale and not keda:
        raise UsageError("--prescale needs --keda (a cron trigger beside the recommender's)")
    if recommender_url and not keda:
        raise UsageError("--recommender-url needs --keda (the HPA reads the recommender through prometheus-adapter)")
    if keda and not _HTTP_URL.match(prometheus_url):
        raise UsageError(f"--prometheus-url {prometheus_url!r} must be an http(s):// URL (KEDA's serverAddress)")
    scaler = keda_manifest(target, prometheus_url, legacy, recommender_url) if keda else hpa_manifest(target, legacy)
    docs: list[Any] = [scaler]
    head = f"# tidescale autoscaling for {target.namespace}/{target.deployment} (model {target.model})\n"
    head += "# recommender settings for this target:\n" + "".join(
        f"#   {line}\n" for line in dump(recommender_config_snippet(target, legacy)).splitlines())
    slo = target.slo_latency_threshold_s if target.slo_latency_threshold_s is not None else SLO_LATENCY_THRESHOLD_S
    head += "# shed what cannot meet the SLO (docs/autoscaler.md#surges-queue-timeouts-and-standing-headroom):\n"
    if max_batch_exec_s is not None:
        policy = recommended_queue_policy(target.model, slo, max_batch_exec_s)
        head += f"# the queue policy for model {target.model}, to merge into its config.pbtxt:\n" + "".join(
            f"#   {line}\n" for line in policy.pbtxt().splitlines())
    else:
        head += (f"#   give --max-batch-exec-ms for model {target.model}'s queue policy: timeout = SLO "
                 f"({round(slo * 1e6)} µs) minus its largest batch's P99 execution time, action REJECT\n")
    if not keda:
        head += "# the prometheus-adapter config (ConfigMap) follows the HPA; chart users: see docs/autoscaler.md\n"
        docs.append(adapter.adapter_configmap(adapter_namespace))
    return head + dump_all(docs)
