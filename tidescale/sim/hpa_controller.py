"""A model of the HorizontalPodAutoscaler controller, faithful to the Kubernetes controller (autoscaling/v2).

Mirrors `pkg/controller/podautoscaler` (horizontal.go, replica_calculator.go): a sync every
15 s; per-metric proposals (Resource/Pods averaged over pods with the missing/unready-pod
rules, Object/External with Value or AverageValue); the tolerance (0.1, or per direction from
`behavior.scaleUp/scaleDown.tolerance`); the max over metrics (no scale-down while a metric is
invalid); then either the legacy normalisation (no `behavior`: 300 s downscale stabilisation,
scale-up limit max(2N, 4)) or the behavior path (stabilisation windows over the recommendation
history, then policies with periodSeconds and selectPolicy); min/max clamp.

The benchmark closes its loop through this class and the demo drives real replicas with it, both on
the `HpaSpec` the chart renders (`tidescale.autoscaler.hpa`), so what is measured is what is deployed.
It models Kubernetes, not tidescale, so it lives in `sim` and ships in no image.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tidescale.autoscaler.hpa import (
    SCALE_DOWN_DEFAULT,
    SCALE_UP_DEFAULT,
    Behavior,
    HpaSpec,
    MetricSpec,
    ScalingRules,
)
from tidescale.contracts.errors import UsageError

SYNC_PERIOD_S = 15.0
DEFAULT_TOLERANCE = 0.1
DEFAULT_DOWNSCALE_STABILISATION_S = 300
LEGACY_SCALE_UP_FACTOR = 2.0
LEGACY_SCALE_UP_MINIMUM = 4


@dataclass(frozen=True)
class Pod:
    """A pod as the controller sees it. Cold-starting pods are Running but not Ready."""

    name: str
    phase: Literal["Pending", "Running", "Failed"] = "Running"
    ready: bool = True
    deleting: bool = False


# Per-pod values for Resource/Pods metrics, the series values for Object/External; None = unavailable.
MetricValue = Mapping[str, float] | Sequence[float] | float | None


# --- tolerance ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tolerances:
    """`tolerances{scaleDown, scaleUp}`: a ratio inside [1-down, 1+up] changes nothing."""

    scale_down: float = DEFAULT_TOLERANCE
    scale_up: float = DEFAULT_TOLERANCE

    def is_within(self, ratio: float) -> bool:
        return (1.0 - self.scale_down) <= ratio <= (1.0 + self.scale_up)


def tolerances_for(behavior: Behavior | None, default: float = DEFAULT_TOLERANCE) -> Tolerances:
    down = behavior.scaleDown.tolerance if behavior and behavior.scaleDown else None
    up = behavior.scaleUp.tolerance if behavior and behavior.scaleUp else None
    return Tolerances(default if down is None else down, default if up is None else up)


# --- replica calculator (pure) ---------------------------------------------------------------------

def usage_ratio_replicas(current: int, usage_ratio: float, ready_pods: int, tol: Tolerances) -> int:
    """`getUsageRatioReplicaCount`: Object/External with a Value target."""
    if current == 0:
        return math.ceil(usage_ratio)
    if tol.is_within(usage_ratio):
        return current
    return math.ceil(usage_ratio * ready_pods)


def per_pod_replicas(status_replicas: int, usage: float, target_per_pod: float, tol: Tolerances) -> int:
    """`GetExternalPerPodMetricReplicas` / `GetObjectPerPodMetricReplicas`: AverageValue target."""
    if status_replicas == 0:
        return math.ceil(usage / target_per_pod)
    ratio = usage / (target_per_pod * status_replicas)
    if tol.is_within(ratio):
        return status_replicas
    return math.ceil(usage / target_per_pod)


def _group_pods(pods: Sequence[Pod], values: Mapping[str, float], cpu: bool
                ) -> tuple[int, set[str], set[str]]:
    """`groupPods`: (ready count, unready pods, missing pods); deleted/failed pods are ignored."""
    ready, unready, missing = 0, set(), set()
    for pod in pods:
        if pod.deleting or pod.phase == "Failed":
            continue
        if pod.phase == "Pending":
            unready.add(pod.name)
            continue
        if pod.name not in values:
            missing.add(pod.name)
            continue
        # Only CPU marks Running-but-not-Ready pods unready; custom metrics count them as ready.
        if cpu and not pod.ready:
            unready.add(pod.name)
            continue
        ready += 1
    return ready, unready, missing


def plain_metric_replicas(current: int, values: Mapping[str, float], pods: Sequence[Pod], target: float,
                          tol: Tolerances, cpu: bool = False) -> int:
    """`calcPlainMetricReplicas`: average per pod against the target, missing/unready pod rules."""
    ready_count, unready, missing = _group_pods(pods, values, cpu)
    counted = {p.name for p in pods if not p.deleting and p.phase != "Failed"} - unready - missing
    usable = {name: values[name] for name in counted}
    if not usable:
        raise ValueError("no pods with metrics")
    ratio = sum(usable.values()) / len(usable) / target
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        if tol.is_within(ratio):
            return current
        return math.ceil(ratio * ready_count)
    filled = dict(usable)
    for name in missing:
        filled[name] = target if ratio < 1.0 else 0.0  # scale-down: missing at 100 %; scale-up: 0 %
    if scale_up_with_unready:
        for name in unready:
            filled[name] = 0.0
    new_ratio = sum(filled.values()) / len(filled) / target
    if tol.is_within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current
    proposal = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and proposal > current) or (new_ratio > 1.0 and proposal < current):
        return current
    return proposal


def replica_count_for(metric: MetricSpec, value: MetricValue, spec_replicas: int, status_replicas: int,
                      pods: Sequence[Pod], tol: Tolerances) -> int:
    """The controller's proposal for one metric; ValueError when the metric is unavailable."""
    if value is None:
        raise ValueError(f"metric {metric.name} unavailable")
    if metric.type in ("Resource", "Pods"):
        if not isinstance(value, Mapping):
            raise ValueError(f"metric {metric.name} needs per-pod values")
        target = metric.target / 100.0 if metric.target_type == "Utilization" else metric.target
        return plain_metric_replicas(spec_replicas, value, pods, target, tol, cpu=metric.type == "Resource")
    series = [value] if isinstance(value, int | float) else list(value.values() if isinstance(value, Mapping)
                                                                   else value)
    if not series or any(math.isnan(v) for v in series):
        raise ValueError(f"metric {metric.name} returned no usable series")
    usage = float(sum(series))
    if metric.target_type == "AverageValue":
        return per_pod_replicas(status_replicas, usage, metric.target, tol)
    ready = sum(1 for p in pods if p.phase == "Running" and p.ready and not p.deleting)
    return usage_ratio_replicas(spec_replicas, usage / metric.target, ready, tol)


# --- the controller --------------------------------------------------------------------------------

@dataclass
class _Event:
    t: float
    change: int


@dataclass
class HpaStatus:
    """What kube-state-metrics reports for the HPA."""

    min_replicas: int
    max_replicas: int
    current_replicas: int
    desired_replicas: int
    able_to_scale: bool = True
    reason: str = ""


class HpaEmulator:
    """One HPA: call `step(now, metric_values, pods)` every sync period; it returns the replica count."""

    def __init__(self, spec: HpaSpec, initial_replicas: int, tolerance: float = DEFAULT_TOLERANCE,
                 downscale_stabilisation_s: int = DEFAULT_DOWNSCALE_STABILISATION_S) -> None:
        if initial_replicas < 0:
            raise UsageError(f"initial replicas must be >= 0, got {initial_replicas}")
        self.spec = spec
        self.replicas = initial_replicas  # scale.spec.replicas
        self.tolerances = tolerances_for(spec.behavior, tolerance)
        self.downscale_window = downscale_stabilisation_s
        self.up_rules, self.down_rules = self._effective_rules(spec.behavior, downscale_stabilisation_s)
        self._recommendations: list[tuple[float, int]] = []
        self._up_events: list[_Event] = []
        self._down_events: list[_Event] = []
        self.status = HpaStatus(spec.min_replicas, spec.max_replicas, initial_replicas, initial_replicas)

    @staticmethod
    def _effective_rules(behavior: Behavior | None, down_window: int) -> tuple[ScalingRules, ScalingRules]:
        """API-server defaulting of a partial `behavior` (and the controller's scale-down window)."""
        up = behavior.scaleUp if behavior and behavior.scaleUp else SCALE_UP_DEFAULT
        down = behavior.scaleDown if behavior and behavior.scaleDown else SCALE_DOWN_DEFAULT
        up = ScalingRules(0 if up.stabilizationWindowSeconds is None else up.stabilizationWindowSeconds,
                          up.selectPolicy, up.policies or SCALE_UP_DEFAULT.policies, up.tolerance)
        down = ScalingRules(down_window if down.stabilizationWindowSeconds is None
                            else down.stabilizationWindowSeconds,
                            down.selectPolicy, down.policies or SCALE_DOWN_DEFAULT.policies, down.tolerance)
        return up, down

    # -- metrics ----------------------------------------------------------------------------------
    def metrics_proposal(self, metric_values: Mapping[str, MetricValue], pods: Sequence[Pod]) -> int | None:
        """`computeReplicasForMetrics`: max over valid metrics; None = do not rescale."""
        status_replicas = sum(1 for p in pods if not p.deleting and p.phase != "Failed")
        proposals, invalid = [], 0
        for metric in self.spec.metrics:
            try:
                proposals.append(replica_count_for(metric, metric_values.get(metric.name), self.replicas,
                                                   status_replicas, pods, self.tolerances))
            except ValueError:
                invalid += 1
        best = max(proposals) if proposals else -1
        if invalid >= len(self.spec.metrics) or (invalid and best < self.replicas):
            return None
        return best

    # -- one sync -----------------------------------------------------------------------------------
    def step(self, now: float, metric_values: Mapping[str, MetricValue], pods: Sequence[Pod]) -> int:
        """One reconcile at time *now* (seconds); returns the new `spec.replicas`."""
        current = self.replicas
        spec = self.spec
        reason = ""
        if current > spec.max_replicas:
            desired, reason = spec.max_replicas, "TooManyReplicas"
        elif current < spec.min_replicas:
            desired, reason = spec.min_replicas, "TooFewReplicas"
        else:
            proposal = self.metrics_proposal(metric_values, pods)
            if proposal is None:
                self.status = HpaStatus(spec.min_replicas, spec.max_replicas, current, current, False,
                                        "FailedGetMetrics")
                return current
            if spec.behavior is None:
                desired = self._normalize_legacy(now, current, proposal)
            else:
                desired = self._normalize_with_behavior(now, current, proposal)
        if desired != current:
            self._record_event(now, current, desired)
            self.replicas = desired
        self.status = HpaStatus(spec.min_replicas, spec.max_replicas, current, desired, True, reason)
        return desired

    def _normalize_legacy(self, now: float, current: int, proposal: int) -> int:
        """`normalizeDesiredReplicas`: max over the 300 s window, then clamp with max(2N, 4)."""
        self._recommendations.append((now, proposal))
        self._recommendations = [(t, r) for t, r in self._recommendations if t > now - self.downscale_window]
        stabilised = max(r for _, r in self._recommendations)
        scale_up_limit = max(int(LEGACY_SCALE_UP_FACTOR * current), LEGACY_SCALE_UP_MINIMUM)
        upper = min(self.spec.max_replicas, scale_up_limit)
        return max(self.spec.min_replicas, min(stabilised, upper))

    def _stabilise(self, now: float, current: int, proposal: int) -> int:
        """`stabilizeRecommendationWithBehaviors`: min over the up window, max over the down window."""
        up_cut = now - (self.up_rules.stabilizationWindowSeconds or 0)
        down_cut = now - (self.down_rules.stabilizationWindowSeconds or 0)
        up_rec = down_rec = proposal
        for t, rec in self._recommendations:
            if t > up_cut:
                up_rec = min(rec, up_rec)
            if t > down_cut:
                down_rec = max(rec, down_rec)
        self._recommendations = [(t, r) for t, r in self._recommendations if t > min(up_cut, down_cut)]
        self._recommendations.append((now, proposal))
        return min(max(current, up_rec), down_rec)

    def _normalize_with_behavior(self, now: float, current: int, proposal: int) -> int:
        desired = self._stabilise(now, current, proposal)
        if desired > current:
            limit = max(current, self._policy_limit(now, current, self.up_rules, up=True))
            return min(desired, self.spec.max_replicas, limit)
        if desired < current:
            limit = min(current, self._policy_limit(now, current, self.down_rules, up=False))
            return max(desired, self.spec.min_replicas, limit)
        return desired

    def _policy_limit(self, now: float, current: int, rules: ScalingRules, up: bool) -> int:
        """`calculateScaleUpLimitWithScalingRules` / `calculateScaleDownLimitWithBehaviors`."""
        if rules.selectPolicy == "Disabled":
            return current
        proposals = []
        for policy in rules.policies or ():
            added = sum(e.change for e in self._up_events if e.t > now - policy.periodSeconds)
            deleted = sum(e.change for e in self._down_events if e.t > now - policy.periodSeconds)
            start = current - added + deleted
            if policy.type == "Pods":
                proposals.append(start + policy.value if up else start - policy.value)
            elif up:
                proposals.append(math.ceil(start * (1 + policy.value / 100)))
            else:
                proposals.append(int(start * (1 - policy.value / 100)))
        # "Max" means the largest change: the highest limit up, the lowest limit down.
        largest_change = rules.selectPolicy == "Max"
        return (max if up == largest_change else min)(proposals)

    def _record_event(self, now: float, old: int, new: int) -> None:
        longest = max((p.periodSeconds for r in (self.up_rules, self.down_rules) for p in r.policies or ()),
                      default=0)
        self._up_events = [e for e in self._up_events if e.t > now - longest]
        self._down_events = [e for e in self._down_events if e.t > now - longest]
        if new > old:
            self._up_events.append(_Event(now, new - old))
        else:
            self._down_events.append(_Event(now, old - new))


def pods_for(total: int, ready: int, prefix: str = "pod") -> list[Pod]:
    """*total* Running pods of which the first *ready* are Ready (the rest are loading a model)."""
    return [Pod(f"{prefix}-{i}", "Running", i < ready) for i in range(total)]
