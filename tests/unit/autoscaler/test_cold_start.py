"""The learned cold start survives a readiness flap (issue 43, "What to build" 4).

kube-state-metrics reports the Ready condition's *last* transition: one flap made the "cold start"
the pod's age, every rising trend projected to the 2x cap, and the fleet doubled."""

from __future__ import annotations

import pytest

from tests.clocks import ManualClock
from tests.unit.autoscaler.test_autoscaler_service import FakeProm, exported
from tidescale.autoscaler.coldstart import MAX_TRACKED_PODS, FirstReadyTracker
from tidescale.autoscaler.service import RecommenderService
from tidescale.autoscaler.settings import RecommenderSettings, TargetSettings

NOW = 1_800_000_000.0  # the recommender's start, Unix time as kube-state-metrics reports


def service(**kw: float) -> tuple[RecommenderService, FakeProm, ManualClock]:
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake, clock = FakeProm(), ManualClock(NOW)
    settings = RecommenderSettings(targets=[target], capacity_rps=100.0, fast_path={"enabled": False}, **kw)
    return RecommenderService(settings, fake, clock=clock), fake, clock  # type: ignore[arg-type]


def cold_start(svc: RecommenderService) -> tuple[str, float]:
    [(source, value)] = [(dict(k[1])["source"], v) for k, v in exported(svc).items()
                         if k[0] == "tidescale_recommender_cold_start_seconds"]
    assert svc.states[("ml", "triton")].recommender.config.cold_start_s == value
    return source, value


def test_a_readiness_flap_does_not_make_the_cold_start_the_pods_age() -> None:
    svc, fake, clock = service()
    fake.pod_times = {"triton-abc-a": (NOW - 3600, NOW - 3560), "triton-abc-b": (NOW - 3500, NOW - 3455),
                      "triton-abc-c": (NOW - 3400, NOW - 3350)}  # 40, 45 and 50 s
    svc.evaluate(clock())
    assert cold_start(svc) == ("pod_ready", 45.0)
    clock.sleep(15)
    fake.pod_times["triton-abc-a"] = (NOW - 3600, NOW + 10)  # a flaps: its last Ready transition is now
    svc.evaluate(clock())
    assert cold_start(svc) == ("pod_ready", 45.0)  # before: the slowest, 3,610 s


def test_a_pod_found_already_flapped_is_outvoted_and_pods_seen_starting_count_first() -> None:
    svc, fake, clock = service()
    fake.pod_times = {"triton-abc-a": (NOW - 7200, NOW - 60),  # found running, flapped a minute ago
                      "triton-abc-b": (NOW - 7000, NOW - 6960), "triton-abc-c": (NOW - 6900, NOW - 6850)}
    svc.evaluate(clock())
    assert cold_start(svc) == ("pod_ready", 50.0)  # the median of 40, 50 and 7,140
    clock.sleep(15)
    fake.pod_times["triton-abc-d"] = (NOW + 5, None)  # started since: seen before its first Ready
    svc.evaluate(clock())
    clock.sleep(60)
    fake.pod_times["triton-abc-d"] = (NOW + 5, NOW + 75)
    svc.evaluate(clock())
    assert cold_start(svc) == ("pod_ready", 70.0)  # a first transition the recommender saw


@pytest.mark.parametrize(("took", "kept"), [(0.0, 5.0), (2.0, 5.0), (86_400.0, 900.0), (120.0, 120.0)])
def test_a_measured_cold_start_is_clamped_to_a_sane_range(took: float, kept: float) -> None:
    svc, fake, clock = service()
    fake.pod_times = {"triton-abc-a": (NOW - 90_000, NOW - 90_000 + took)}
    svc.evaluate(clock())
    assert cold_start(svc) == ("pod_ready", kept)


def test_the_range_is_a_setting_and_must_be_one() -> None:
    svc, fake, clock = service(cold_start_min_s=30.0, cold_start_max_s=60.0)
    fake.pod_times = {"triton-abc-a": (NOW - 1000, NOW - 990)}
    svc.evaluate(clock())
    assert cold_start(svc) == ("pod_ready", 30.0)
    with pytest.raises(ValueError, match="must not exceed"):
        service(cold_start_min_s=100.0, cold_start_max_s=60.0)


def test_a_rollout_s_new_pods_take_over_the_median() -> None:
    tracker = FirstReadyTracker(started_at=NOW)
    tracker.observe({f"old-{k}": (NOW - 5000 + k, NOW - 4960 + k) for k in range(5)})
    assert tracker.cold_start() == 40.0
    tracker.observe({f"new-{k}": (NOW + 100 + k, None) for k in range(3)})
    tracker.observe({f"new-{k}": (NOW + 100 + k, NOW + 220 + k) for k in range(3)})
    assert tracker.cold_start() == 120.0  # pods seen starting first: the new version loads slower


def test_the_tracker_is_bounded_and_ignores_what_cannot_be_a_cold_start() -> None:
    tracker = FirstReadyTracker(started_at=NOW)
    tracker.observe({f"p-{k}": (float(k), float(k) + 10) for k in range(MAX_TRACKED_PODS * 3)})
    assert len(tracker.pods) == MAX_TRACKED_PODS and tracker.cold_start() == 10.0
    odd = FirstReadyTracker(started_at=NOW)
    odd.observe({"nan": (float("nan"), 1.0), "before": (100.0, 50.0), "inf": (1.0, float("inf"))})
    assert odd.cold_start() is None
    odd.observe({"restarted": (10.0, 30.0)})
    odd.observe({"restarted": (500.0, 560.0)})  # another pod of the same name: measured afresh
    assert odd.cold_start() == 60.0
