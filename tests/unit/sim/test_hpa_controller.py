"""Table tests of the HPA emulator against the Kubernetes controller's documented behaviour."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.autoscaler.hpa import Behavior, HpaSpec, MetricSpec, ScalingPolicy, ScalingRules
from tidescale.autoscaler.manifests import Target, tidescale_hpa_spec
from tidescale.autoscaler.recommend import reachable_under_tolerance
from tidescale.contracts.errors import UsageError
from tidescale.sim.hpa_controller import (
    HpaEmulator,
    Pod,
    Tolerances,
    per_pod_replicas,
    plain_metric_replicas,
    pods_for,
    replica_count_for,
    usage_ratio_replicas,
)

DESIRED = "tidescale_desired_replicas"
EXT_AVG1 = MetricSpec("External", DESIRED, "AverageValue", 1.0)
TOL = Tolerances()


def ext_spec(behavior: Behavior | None = None, lo: int = 1, hi: int = 100) -> HpaSpec:
    return HpaSpec(lo, hi, (EXT_AVG1,), behavior)


def step(hpa: HpaEmulator, t: float, desired: float) -> int:
    n = hpa.replicas
    return hpa.step(t, {DESIRED: desired}, pods_for(n, n))


# --- formulas -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "usage", "target", "expected"), [
    (10, 11.0, 1.0, 10),   # 11/10 = 1.1: inside the 10 % tolerance, the +1 is swallowed
    (10, 12.0, 1.0, 12),   # 1.2 escapes: ceil(12/1)
    (9, 10.0, 1.0, 10),    # below 10 replicas one step escapes (10/9 = 1.11)
    (20, 19.0, 1.0, 20),   # -1 at N >= 20 is swallowed too (0.95)
    (10, 9.0, 1.0, 10),    # 0.9 is still inside [0.9, 1.1]
    (10, 8.9, 1.0, 9),     # ceil(8.9)
    (3, 1000.0, 500.0, 2),  # KEDA-like: 1000 req/s at 500 per pod, ratio 0.67 -> ceil(1000/500)
])
def test_external_average_value(status: int, usage: float, target: float, expected: int) -> None:
    assert per_pod_replicas(status, usage, target, TOL) == expected


@pytest.mark.parametrize(("current", "ratio", "ready", "expected"), [
    (4, 1.5, 4, 6),     # ceil(1.5 * ready)
    (4, 1.5, 2, 3),     # only Ready pods count for Object/External Value
    (4, 1.05, 4, 4),    # tolerance
    (0, 2.3, 0, 3),     # from zero: ceil(ratio)
])
def test_value_target_uses_ready_pods(current: int, ratio: float, ready: int, expected: int) -> None:
    assert usage_ratio_replicas(current, ratio, ready, TOL) == expected


def test_pods_metric_missing_pods_scale_up_counts_them_as_zero() -> None:
    pods = pods_for(4, 4)
    values = {"pod-0": 2.0, "pod-1": 2.0}  # pod-2, pod-3 have no metric yet
    # ratio 2.0 over the two with metrics; the missing two count as 0 -> ratio 1.0 -> in tolerance: hold
    assert plain_metric_replicas(4, values, pods, 1.0, TOL) == 4
    values = {"pod-0": 3.0, "pod-1": 3.0}
    assert plain_metric_replicas(4, values, pods, 1.0, TOL) == 6  # (3+3+0+0)/4 = 1.5 -> ceil(1.5*4)


def test_pods_metric_missing_pods_scale_down_counts_them_at_target() -> None:
    pods = pods_for(4, 4)
    values = {"pod-0": 0.2, "pod-1": 0.2}
    # (0.2+0.2+1+1)/4 = 0.6 -> ceil(0.6*4) = 3 (instead of ceil(0.2*2) = 1 without the rule)
    assert plain_metric_replicas(4, values, pods, 1.0, TOL) == 3


def test_custom_metrics_count_running_unready_pods_as_ready_but_cpu_does_not() -> None:
    pods = [Pod("a"), Pod("b"), Pod("c", ready=False)]
    values = {"a": 2.0, "b": 2.0, "c": 0.0}
    # custom (Pods) metric: c counts as ready with its 0 -> ratio 4/3/1 = 1.33 -> ceil(1.33*3) = 4
    assert plain_metric_replicas(3, values, pods, 1.0, TOL, cpu=False) == 4
    # CPU: c is unready; scale-up with unready pods: c counts as 0 -> same ratio, 4 pods
    assert plain_metric_replicas(3, values, pods, 1.0, TOL, cpu=True) == 4
    # CPU: on scale-up the ready pods alone would ask for ceil(2*2) = 4 too; with a pending pod it is ignored
    pending = [Pod("a"), Pod("b"), Pod("p", phase="Pending")]
    assert plain_metric_replicas(3, {"a": 2.0, "b": 2.0}, pending, 1.0, TOL, cpu=True) == 4


def test_replica_count_for_rejects_missing_or_nan() -> None:
    with pytest.raises(ValueError, match="unavailable"):
        replica_count_for(EXT_AVG1, None, 3, 3, pods_for(3, 3), TOL)
    with pytest.raises(ValueError, match="no usable"):
        replica_count_for(EXT_AVG1, [float("nan")], 3, 3, pods_for(3, 3), TOL)


def test_external_sums_series() -> None:
    assert replica_count_for(EXT_AVG1, [3.0, 4.0], 3, 3, pods_for(3, 3), TOL) == 7


# --- the ±1 dead band and the exact form ---------------------------------------------------------------

def test_dead_band_at_ten_replicas_with_default_tolerance() -> None:
    hpa = HpaEmulator(ext_spec(Behavior()), 10)
    assert step(hpa, 15, 11) == 10  # the recommender asks for 11; the HPA never moves


def test_tolerance_zero_scales_by_exactly_one() -> None:
    hpa = HpaEmulator(tidescale_hpa_spec(Target("triton", "ml", "m", 1, 100)), 10)
    assert step(hpa, 15, 11) == 11
    assert step(hpa, 30, 12) == 12


@given(n=st.integers(1, 60), d=st.integers(1, 100))
@settings(max_examples=200, deadline=None)
def test_tidescale_hpa_reaches_any_desired_count_exactly(n: int, d: int) -> None:
    """With tolerance 0, one sync lands on D whenever the scale-up policies allow it, and
    repeated syncs always converge to D exactly (no dead band at any N)."""
    hpa = HpaEmulator(tidescale_hpa_spec(Target("triton", "ml", "m", 1, 100)), n)
    first = step(hpa, 15, d)
    if n < d <= max(2 * n, n + 4):
        assert first == d
    t = 15
    for _ in range(80):
        t += 15
        step(hpa, t, d)
    assert hpa.replicas == d


@pytest.mark.parametrize(("n", "d", "published", "lands"), [
    (10, 11, 12, 12),  # +1 is unreachable: round out to the smallest reachable count
    (10, 15, 15, 15),
    (20, 19, 20, 20),  # -1 at 20 is unreachable: hold
    (20, 17, 17, 17),
    (5, 6, 6, 6),      # below 10 one step up is reachable
])
def test_legacy_clusters_round_to_reachable_counts(n: int, d: int, published: int, lands: int) -> None:
    assert reachable_under_tolerance(n, d) == published
    hpa = HpaEmulator(HpaSpec(1, 100, (EXT_AVG1,), Behavior(scaleDown=ScalingRules(0))), n)
    assert step(hpa, 15, published) == lands


def test_per_direction_tolerance() -> None:
    beh = Behavior(scaleUp=ScalingRules(tolerance=0.01), scaleDown=ScalingRules(0, tolerance=0.3))
    hpa = HpaEmulator(ext_spec(beh), 10)
    assert step(hpa, 15, 11) == 11      # +10 % > 1 % up tolerance
    assert step(hpa, 30, 9) == 11       # 9/11 = 0.82 within the 30 % down tolerance


# --- stabilisation and policies -------------------------------------------------------------------------

@pytest.mark.parametrize("behavior", [None, Behavior()])
def test_default_scale_down_stabilisation_is_300_s(behavior: Behavior | None) -> None:
    hpa = HpaEmulator(ext_spec(behavior), 8)
    assert step(hpa, 0, 8) == 8
    for t in range(15, 300, 15):
        assert step(hpa, t, 2) == 8, t  # the 8 recorded at t=0 is still inside the window
    assert step(hpa, 300, 2) == 2  # the window (now-300, now] no longer holds it


def test_default_scale_up_is_max_of_4_pods_and_100_percent_per_15_s() -> None:
    hpa = HpaEmulator(ext_spec(Behavior()), 1)
    assert step(hpa, 15, 50) == 5    # max(1+4, 2*1)
    assert step(hpa, 30, 50) == 10   # max(5+4, 2*5)
    assert step(hpa, 45, 50) == 20
    assert step(hpa, 60, 50) == 40
    assert step(hpa, 75, 50) == 50


def test_no_behavior_uses_legacy_limit_max_2n_4() -> None:
    hpa = HpaEmulator(ext_spec(None), 3)
    assert step(hpa, 15, 50) == 6
    assert step(hpa, 30, 50) == 12


def test_policy_period_counts_earlier_changes() -> None:
    beh = Behavior(scaleUp=ScalingRules(0, "Max", (ScalingPolicy("Pods", 4, 60),)))
    hpa = HpaEmulator(ext_spec(beh), 2)
    assert step(hpa, 15, 20) == 6
    assert step(hpa, 30, 20) == 6    # 4 pods already added within the last 60 s
    assert step(hpa, 76, 20) == 10   # the first event left the period


def test_select_policy_min_and_disabled() -> None:
    rules = (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15))
    hpa = HpaEmulator(ext_spec(Behavior(scaleUp=ScalingRules(0, "Min", rules))), 10)
    assert step(hpa, 15, 50) == 14   # min(10+4, 20)
    hpa = HpaEmulator(ext_spec(Behavior(scaleUp=ScalingRules(0, "Disabled", rules))), 10)
    assert step(hpa, 15, 50) == 10


def test_scale_down_percent_policy_rounds_down_the_limit() -> None:
    beh = Behavior(scaleDown=ScalingRules(0, "Max", (ScalingPolicy("Percent", 50, 60),)))
    hpa = HpaEmulator(ext_spec(beh), 9)
    assert step(hpa, 15, 1) == 4   # the limit is int(9 * (1 - 0.5)) = 4
    assert step(hpa, 30, 1) == 4   # 5 pods already removed within the 60 s period
    assert step(hpa, 76, 1) == 2   # int(4 * 0.5)


def test_scale_up_stabilisation_window_takes_the_minimum() -> None:
    hpa = HpaEmulator(ext_spec(Behavior(scaleUp=ScalingRules(30))), 2)
    assert step(hpa, 0, 2) == 2
    assert step(hpa, 15, 8) == 2   # min over the window (2 at t=0, 8 now)
    assert step(hpa, 31, 8) == 6   # t=0 left the window; the policy allows max(2+4, 2*2)


def test_min_max_clamp_and_out_of_range_current() -> None:
    hpa = HpaEmulator(ext_spec(Behavior(), lo=2, hi=6), 10)
    assert step(hpa, 15, 10) == 6  # current above max -> max, without reading metrics
    hpa = HpaEmulator(ext_spec(Behavior(), lo=2, hi=6), 1)
    assert step(hpa, 15, 1) == 2
    hpa = HpaEmulator(ext_spec(Behavior(scaleDown=ScalingRules(0)), lo=2, hi=6), 4)
    assert step(hpa, 15, 1) == 2
    assert step(hpa, 30, 40) == 6  # max(2+4, 2*2) = 6 = maxReplicas


def test_invalid_metric_blocks_scale_down_but_not_scale_up() -> None:
    spec = HpaSpec(1, 20, (EXT_AVG1, MetricSpec("External", "other", "AverageValue", 1.0)),
                   Behavior(scaleDown=ScalingRules(0)))
    hpa = HpaEmulator(spec, 5)
    pods = pods_for(5, 5)
    assert hpa.step(15, {DESIRED: 2, "other": None}, pods) == 5
    assert hpa.status.reason == "FailedGetMetrics"  # the controller reports the error and holds
    assert hpa.step(30, {DESIRED: 8, "other": None}, pods) == 8
    assert hpa.step(45, {DESIRED: None, "other": None}, pods_for(8, 8)) == 8
    assert hpa.status.reason == "FailedGetMetrics"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"min_replicas": 5, "max_replicas": 2, "metrics": (EXT_AVG1,)}, "must not exceed"),
    ({"min_replicas": 0, "max_replicas": 2, "metrics": (EXT_AVG1,)}, ">= 1"),
    ({"min_replicas": 1, "max_replicas": 2, "metrics": ()}, "at least one metric"),
])
def test_spec_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        HpaSpec(**kwargs)


def test_metric_spec_validation() -> None:
    with pytest.raises(UsageError, match="cannot have"):
        MetricSpec("Pods", "x", "Value", 1.0)
    with pytest.raises(UsageError, match="> 0"):
        MetricSpec("External", "x", "AverageValue", 0.0)
    with pytest.raises(UsageError):
        ScalingPolicy("Pods", 0, 15)
    with pytest.raises(UsageError):
        ScalingRules(stabilizationWindowSeconds=4000)
