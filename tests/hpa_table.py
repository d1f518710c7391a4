"""One table of HPA cases, run against both the project's `HpaEmulator` (tests/unit/autoscaler/
test_hpa_table.py, on an exact 15 s clock) and the real kube-controller-manager's HPA on the local
cluster (tests/e2e/test_hpa_table.py, fed by an external metrics API that serves each case's values
one per sync). The benchmark closes its loop through the emulator; this table is why it may.

Each case starts at `initial` replicas within its bounds (below `minReplicas` the controller does not
read the metric at all). Each case is an External metric with an AverageValue target, as tidescale's own HPA reads
`tidescale_desired_replicas`, and a `behavior` (or none). `values[k]` is what the controller reads at
sync k; `expected[k]` is the Deployment's `spec.replicas` after sync k. Windows and policy periods
are chosen away from ties with the sync period, except where the shipped behavior has them; there
the controller's strict "after" comparisons decide, as the emulator's do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tidescale.autoscaler.adapter import DESIRED_REPLICAS
from tidescale.autoscaler.hpa import Behavior, HpaSpec, MetricSpec, ScalingPolicy, ScalingRules
from tidescale.autoscaler.manifests import tidescale_behavior
from tidescale.sim.hpa_controller import HpaEmulator, pods_for

SYNC_S = 15.0


def metric(deployment: str, target: float) -> MetricSpec:
    return MetricSpec("External", DESIRED_REPLICAS, "AverageValue", target, selector={"deployment": deployment})


@dataclass(frozen=True)
class HpaCase:
    name: str  # also the Deployment's name and the metric's `deployment` label
    why: str
    min_replicas: int
    max_replicas: int
    target: float
    behavior: Behavior | None
    values: tuple[float, ...]
    expected: tuple[int, ...]
    initial: int = 1

    @property
    def spec(self) -> HpaSpec:
        return HpaSpec(self.min_replicas, self.max_replicas, (metric(self.name, self.target),), self.behavior)


CASES = (
    HpaCase("shipped", "tidescale's behavior: up in one step, down at once but at most half per 30 s",
            1, 10, 1.0, tidescale_behavior(),
            values=(1, 4, 4, 9, 9, 3, 3, 3, 3, 1, 1, 1),
            expected=(1, 4, 4, 9, 9, 4, 4, 3, 3, 1, 1, 1)),
    HpaCase("legacy", "no behavior: up by max(2N, 4) per sync, 10 % tolerance, 300 s downscale window",
            1, 20, 10.0, None,
            values=(10, 60, 60, 60, 63, 70, 30, 30, 30),
            expected=(1, 4, 6, 6, 6, 7, 7, 7, 7)),
    HpaCase("slow-up", "Pods 2 per 40 s up; down after a 40 s window, Min of (1 pod, 50 %) per 20 s",
            1, 10, 1.0, Behavior(
                scaleUp=ScalingRules(0, "Max", (ScalingPolicy("Pods", 2, 40),)),
                scaleDown=ScalingRules(40, "Min", (ScalingPolicy("Pods", 1, 20), ScalingPolicy("Percent", 50, 20)))),
            values=(1, 8, 8, 8, 8, 8, 8, 1, 1, 1, 1, 1),
            expected=(1, 3, 3, 3, 5, 5, 5, 5, 5, 4, 4, 3)),
    HpaCase("clamped", "min 2 and max 5 clamp; scale-down disabled",
            2, 5, 1.0, Behavior(scaleDown=ScalingRules(0, "Disabled", None)),
            values=(1, 8, 8, 0.5, 0.5, 0.5),
            expected=(2, 5, 5, 5, 5, 5), initial=2),
)


def replay(case: HpaCase, times: Sequence[float]) -> list[int]:
    """The emulator's `spec.replicas` after each sync, when sync k happens at times[k] (seconds)."""
    emulator = HpaEmulator(case.spec, case.initial)
    out = []
    for now, value in zip(times, case.values, strict=True):
        out.append(emulator.step(now, {DESIRED_REPLICAS: value}, pods_for(emulator.replicas, emulator.replicas)))
    return out


def on_the_sync_clock(case: HpaCase) -> list[float]:
    return [k * SYNC_S for k in range(len(case.values))]
