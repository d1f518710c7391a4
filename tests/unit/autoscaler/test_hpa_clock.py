"""When the HPA next reads the answer (`hpaclock`), and how a panic's confirmation waits on it."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.autoscaler.test_autoscaler_service import FakeProm, make
from tidescale.autoscaler.app import make_app
from tidescale.autoscaler.hpaclock import HpaReadClock
from tidescale.autoscaler.manifests import DESIRED_PATH
from tidescale.autoscaler.recommend import Recommender, RecommenderConfig
from tidescale.autoscaler.service import RecommenderService
from tidescale.autoscaler.settings import RecommenderSettings, TargetSettings
from tidescale.contracts.kubeapi import hpa_last_scale_time


def test_a_clock_that_has_seen_no_read_never_calls_a_wait_free() -> None:
    assert not HpaReadClock().wait_is_free(100.0, 2.0)


@pytest.mark.parametrize(("now", "free"), [
    (100.5, False),  # a read just now, within the drift
    (103.0, True),   # the next at 115 (give or take 1 s): 2 s from 103 is clear of it
    (111.5, True),   # 113.5 still before 114
    (112.5, False),  # 114.5 would be past 114, where the next read may fall
    (114.5, False),  # within the next read's window
    (116.5, True),   # past it
])
def test_reads_seen_on_desired_put_the_next_one_a_sync_later(now: float, free: bool) -> None:
    clock = HpaReadClock()
    clock.observe(70.0)
    clock.observe(100.0)
    assert clock.wait_is_free(now, 2.0) is free


def test_a_scale_stamp_spans_the_scrape_before_it_and_the_second_after() -> None:
    """Stamped 100 (truncated): the answer read was Prometheus' scrape up to 2 s before the sync, and
    the sync up to 1 s after the stamp: reads may fall in [97, 102] + 15 k, give or take."""
    clock = HpaReadClock()
    clock.observe_scale(100.0)
    assert [clock.wait_is_free(now, 2.0) for now in (101.0, 103.0, 109.0, 110.5, 113.0, 117.5)] \
        == [False, True, True, False, False, True]


def test_reads_seen_win_over_stamps_and_old_reads_are_forgotten() -> None:
    clock = HpaReadClock()
    clock.observe_scale(107.0)  # a window on [103, 109] would make every wait below unfree
    clock.observe(100.0)
    assert clock.wait_is_free(104.0, 2.0)
    assert clock.windows(500.0) == []  # both too old: the clock no longer knows
    assert not clock.wait_is_free(504.0, 2.0)  # both too old: the clock no longer knows


def test_reads_on_another_period_leave_the_clock_unknown() -> None:
    """A 10 s sync period: its reads fall on three grids of 15 s, and the 15 s grid would lie."""
    clock = HpaReadClock()
    for t in (100.0, 110.0, 120.0):
        clock.observe(t)
    assert not clock.wait_is_free(123.0, 2.0)


def test_keda_s_own_polls_on_a_second_phase_are_windows_too() -> None:
    """KEDA polls `/desired` every pollingInterval (15 s) on a phase of its own: the clock keeps both
    grids, and a wait is free only clear of each."""
    clock = HpaReadClock()
    for t in (100.0, 107.0, 115.0, 122.0):
        clock.observe(t)
    assert clock.keeps_period(clock.windows(125.0))
    assert [clock.wait_is_free(now, 2.0) for now in (125.0, 127.5, 130.0, 133.0, 135.0)] \
        == [True, False, False, True, False]  # reads may fall in [129, 131] and [136, 138]


def test_a_burst_of_reads_within_the_drift_is_one_read() -> None:
    """KEDA (or anyone in the cluster) asking `/desired` many times within a second is one read: the
    burst does not push the syncs before it out of the reads kept, and the grid they set holds."""
    clock = HpaReadClock()
    clock.observe(100.0)
    clock.observe(115.0)
    for i in range(50):
        clock.observe(130.0 + i / 100)
    assert clock.windows(131.0) == [(99.0, 101.0), (114.0, 116.0), (129.0, 131.0)]
    assert clock.wait_is_free(133.0, 2.0)


def test_reads_spread_over_the_cycle_leave_the_clock_unknown() -> None:
    """A client polling `/desired` every second puts reads on every phase: the clock knows no grid,
    and a panic acts at once rather than wait on a guess."""
    clock = HpaReadClock()
    clock.observe(100.0)
    for i in range(20):
        clock.observe(101.5 + i * 1.5)
    assert not clock.wait_is_free(131.0, 2.0)


def test_a_read_that_is_no_time_is_no_read() -> None:
    clock = HpaReadClock()
    clock.observe(math.nan)
    clock.observe_scale(math.inf)
    assert clock.windows(0.0) == []


@pytest.mark.parametrize(("answer", "expected"), [
    ({"status": {"lastScaleTime": "2026-12-07T01:02:03Z"}}, datetime(2026, 12, 7, 1, 2, 3, tzinfo=UTC).timestamp()),
    (SimpleNamespace(status=SimpleNamespace(last_scale_time=datetime(2026, 12, 7, 1, 2, 3, tzinfo=UTC))),
     datetime(2026, 12, 7, 1, 2, 3, tzinfo=UTC).timestamp()),
    ({"status": {"lastScaleTime": None}}, None),
    ({"status": {"lastScaleTime": "yesterday"}}, None),
    ({"status": None}, None),
    (SimpleNamespace(status=None), None),
])
def test_the_hpa_s_last_scale_time_is_read_as_unix_time_or_none(answer: Any, expected: float | None) -> None:
    assert hpa_last_scale_time(answer) == expected


def test_a_confirmation_is_skipped_where_the_wait_would_miss_the_hpa_s_read() -> None:
    """`panic_confirm_readings` 2 waits a reading only where the wait is free; otherwise the first
    reading over the threshold panics, as with 1. The count of readings still runs."""
    config = RecommenderConfig(capacity_rps=100.0, max_replicas=50, cold_start_s=60.0, panic_confirm_readings=2)
    asked: list[int] = []

    def never(n: int) -> bool:
        asked.append(n)
        return False

    assert Recommender(config).panic(0.0, 400.0, asked=3, wait_free=never) is not None
    assert asked == [1]
    rec = Recommender(config)
    assert rec.panic(0.0, 400.0, asked=3, wait_free=lambda n: True) is None
    assert rec.panic(2.0, 400.0, asked=3, wait_free=lambda n: True) is not None  # confirmed


class FakeHpas:
    def __init__(self, answer: Any = None, fails: bool = False) -> None:
        self.answer, self.fails, self.reads = answer, fails, []  # type: list[tuple[str, str]]

    def read_namespaced_horizontal_pod_autoscaler(self, name: str, namespace: str) -> Any:
        self.reads.append((namespace, name))
        if self.fails:
            raise RuntimeError("403 forbidden")
        return self.answer


def test_the_service_reads_the_hpa_s_stamp_only_where_a_panic_may_wait_through_it(
        caplog: pytest.LogCaptureFixture) -> None:
    hpas = FakeHpas({"status": {"lastScaleTime": "1970-01-01T00:01:40Z"}})
    svc, _ = make(tuning={"panic_confirm_readings": 2})
    svc.hpas, svc._reads_hpas = hpas, True  # as built in a pod, where the kube client is made at the first read
    [st] = svc.states.values()
    assert svc.hpa_scaled_at(st) == 100.0 and hpas.reads == [("ml", "triton")]
    taken_over = TargetSettings(deployment="triton", namespace="ml", model="m", hpa_name="triton-hpa")
    named = RecommenderService(RecommenderSettings(targets=[taken_over], capacity_rps=100.0,
                                                   tuning={"panic_confirm_readings": 2}),  # type: ignore[arg-type]
                               FakeProm(), hpas=hpas)  # type: ignore[arg-type]
    named.hpa_scaled_at(next(iter(named.states.values())))
    assert hpas.reads[-1] == ("ml", "triton-hpa")
    shipped, _ = make()
    assert not shipped._reads_hpas  # confirm 1: nothing waits, no HPA read
    target = TargetSettings(deployment="triton", namespace="ml", model="m", min_replicas=1, max_replicas=50)
    direct = RecommenderService(RecommenderSettings(targets=[target], capacity_rps=100.0, scale_mode="direct",
                                                    tuning={"panic_confirm_readings": 2}),  # type: ignore[arg-type]
                                FakeProm(), scaler=object())  # type: ignore[arg-type]
    assert not direct._reads_hpas and direct._wait_free(next(iter(direct.states.values())), 0.0) is None
    svc.hpas = FakeHpas(fails=True)
    with caplog.at_level(logging.WARNING):
        assert svc.hpa_scaled_at(st) is None
        assert svc.hpa_scaled_at(st) is None
    assert sum("reading the HPA ml/triton failed" in r.getMessage() for r in caplog.records) == 1
    wait = svc._wait_free(st, 0.0)
    assert wait is not None and not wait(1)  # no read seen: a panic acts at once


def test_keda_s_reads_of_desired_set_the_clock() -> None:
    svc, _ = make()
    [st] = svc.states.values()
    svc.clock = lambda: 100.0
    TestClient(make_app(svc)).get(f"{DESIRED_PATH}/ml/triton")  # 503 before any evaluation: still a read
    assert st.hpa_reads.windows(100.0) == [(99.0, 101.0)]
