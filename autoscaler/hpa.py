"""The HorizontalPodAutoscaler the chart ships, as data: `HpaSpec` and its autoscaling/v2 rendering.

The spec is one value for two readers: `manifests.py` renders it into the HPA (or the
ScaledObject's `advanced.horizontalPodAutoscalerConfig`), and the simulator's controller model,
`tidescale.sim.hpa_controller.HpaEmulator`, closes the benchmark's loop on the same value, so what is
measured is what is deployed. The controller itself is outside tidescale, so its model lives in `sim`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tidescale.contracts.errors import UsageError

MetricSourceType = Literal["Resource", "Pods", "Object", "External"]
TargetType = Literal["Utilization", "Value", "AverageValue"]
PolicyType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]



@dataclass(frozen=True)
class ScalingPolicy:
    """`HPAScalingPolicy`: change by `value` pods or percent per `periodSeconds`."""

    type: PolicyType
    value: int
    periodSeconds: int

    def __post_init__(self) -> None:
        if self.value <= 0 or not 0 < self.periodSeconds <= 1800:
            raise UsageError(f"scaling policy needs value > 0 and 0 < periodSeconds <= 1800, got {self}")


@dataclass(frozen=True)
class ScalingRules:
    """`HPAScalingRules`; None fields take the API server / controller defaults."""

    stabilizationWindowSeconds: int | None = None
    selectPolicy: SelectPolicy = "Max"
    policies: tuple[ScalingPolicy, ...] | None = None
    tolerance: float | None = None  # k8s >= 1.33 (HPAConfigurableTolerance)

    def __post_init__(self) -> None:
        w = self.stabilizationWindowSeconds
        if w is not None and not 0 <= w <= 3600:
            raise UsageError(f"stabilizationWindowSeconds must be within 0..3600, got {w}")
        if self.tolerance is not None and self.tolerance < 0:
            raise UsageError(f"tolerance must be >= 0, got {self.tolerance}")


SCALE_UP_DEFAULT = ScalingRules(0, "Max", (ScalingPolicy("Percent", 100, 15), ScalingPolicy("Pods", 4, 15)))
SCALE_DOWN_DEFAULT = ScalingRules(None, "Max", (ScalingPolicy("Percent", 100, 15),))


@dataclass(frozen=True)
class Behavior:
    """`HorizontalPodAutoscalerBehavior`."""

    scaleUp: ScalingRules | None = None
    scaleDown: ScalingRules | None = None


@dataclass(frozen=True)
class MetricSpec:
    """One entry of `spec.metrics`. `target` is the utilisation percent, value or averageValue."""

    type: MetricSourceType
    name: str
    target_type: TargetType
    target: float
    selector: Mapping[str, str] = field(default_factory=dict)
    described_object: Mapping[str, str] | None = None  # Object metrics

    def __post_init__(self) -> None:
        if self.target <= 0:
            raise UsageError(f"metric {self.name}: target must be > 0, got {self.target}")
        allowed: dict[str, tuple[str, ...]] = {
            "Resource": ("Utilization", "AverageValue"),
            "Pods": ("AverageValue",),
            "Object": ("Value", "AverageValue"),
            "External": ("Value", "AverageValue"),
        }
        if self.target_type not in allowed[self.type]:
            raise UsageError(f"metric {self.name}: a {self.type} metric cannot have a {self.target_type} target")


@dataclass(frozen=True)
class HpaSpec:
    """The parts of `HorizontalPodAutoscalerSpec` the controller reads."""

    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricSpec, ...]
    behavior: Behavior | None = None

    def __post_init__(self) -> None:
        if self.min_replicas < 1:
            raise UsageError(f"minReplicas must be >= 1, got {self.min_replicas}")
        if self.min_replicas > self.max_replicas:
            raise UsageError(f"minReplicas ({self.min_replicas}) must not exceed maxReplicas ({self.max_replicas})")
        if not self.metrics:
            raise UsageError("an HPA needs at least one metric")


def spec_to_dict(spec: HpaSpec) -> dict[str, Any]:
    """The `spec.metrics`/`behavior`/min/max part of an autoscaling/v2 manifest."""
    out: dict[str, Any] = {"minReplicas": spec.min_replicas, "maxReplicas": spec.max_replicas,
                           "metrics": [_metric_to_dict(m) for m in spec.metrics]}
    if spec.behavior is not None:
        out["behavior"] = {k: _rules_to_dict(r) for k, r in
                           (("scaleUp", spec.behavior.scaleUp), ("scaleDown", spec.behavior.scaleDown))
                           if r is not None}
    return out


def _quantity(x: float) -> str:
    """A Kubernetes quantity string: integers plain, fractions in milli-units."""
    if float(x).is_integer():
        return str(int(x))
    return f"{round(x * 1000)}m"


def _target(m: MetricSpec) -> dict[str, Any]:
    if m.target_type == "Utilization":
        return {"type": "Utilization", "averageUtilization": int(m.target)}
    key = "value" if m.target_type == "Value" else "averageValue"
    return {"type": m.target_type, key: _quantity(m.target)}


def _metric_to_dict(m: MetricSpec) -> dict[str, Any]:
    if m.type == "Resource":
        return {"type": "Resource", "resource": {"name": m.name, "target": _target(m)}}
    ident: dict[str, Any] = {"name": m.name}
    if m.selector:
        ident["selector"] = {"matchLabels": dict(m.selector)}
    body: dict[str, Any] = {"metric": ident, "target": _target(m)}
    if m.type == "Object":
        body["describedObject"] = dict(m.described_object or {})
    key = {"Pods": "pods", "Object": "object", "External": "external"}[m.type]
    return {"type": m.type, key: body}


def _rules_to_dict(r: ScalingRules) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if r.stabilizationWindowSeconds is not None:
        out["stabilizationWindowSeconds"] = r.stabilizationWindowSeconds
    out["selectPolicy"] = r.selectPolicy
    if r.policies:
        out["policies"] = [{"type": p.type, "value": p.value, "periodSeconds": p.periodSeconds} for p in r.policies]
    if r.tolerance is not None:
        out["tolerance"] = _quantity(r.tolerance)
    return out
