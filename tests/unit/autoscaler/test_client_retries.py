"""Clients that retry a refused request: Triton counts every attempt, the recommender reads requests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tidescale.autoscaler.fastpath import FastWindow, PodCounters
from tidescale.autoscaler.recommend import RecommenderConfig, first_attempt_rate
from tidescale.autoscaler.settings import RecommenderSettings, TargetSettings
from tidescale.contracts.errors import UsageError


@given(rate=st.floats(0.1, 1e5), refused=st.floats(0.0, 1.0), retries=st.integers(0, 10))
def test_the_requests_behind_the_attempts_are_recovered(rate: float, refused: float, retries: int) -> None:
    """Requests at *rate*, each attempt refused with probability *refused*, retried up to *retries* times:
    the attempts Triton counts (completed + rejected) are read back to *rate*."""
    attempts = rate * sum(refused ** k for k in range(retries + 1))
    completed, rejected = attempts * (1 - refused), attempts * refused
    assert first_attempt_rate(completed, rejected, retries) == pytest.approx(rate, rel=1e-9)


def test_without_retries_or_rejections_an_attempt_is_a_request() -> None:
    assert first_attempt_rate(300.0, 100.0, 0) == 400.0
    assert first_attempt_rate(300.0, 0.0, 2) == 300.0
    assert first_attempt_rate(0.0, 0.0, 2) == 0.0


def test_a_fleet_refusing_everything_reads_one_request_per_three_attempts_with_two_retries() -> None:
    assert first_attempt_rate(0.0, 300.0, 2) == pytest.approx(100.0)


def test_the_setting_reaches_the_recommender_and_is_bounded() -> None:
    target = TargetSettings(deployment="d", namespace="n", model="m", capacity_rps=10.0)
    settings = RecommenderSettings(client_retries=2, targets=[target])
    assert settings.config_for(target).client_retries == 2
    assert settings.effective_config()["client_retries"] == 2
    with pytest.raises(ValidationError):
        RecommenderSettings(client_retries=11)
    with pytest.raises(UsageError, match="client_retries"):
        RecommenderConfig(capacity_rps=10.0, client_retries=-1)


def test_the_fast_path_reads_requests_too() -> None:
    """Two pods refusing half their attempts, clients retrying twice: 1.75 attempts per request."""
    plain, told = FastWindow(6.0), FastWindow(6.0, client_retries=2)
    for window in (plain, told):
        window.add(0.0, {"a": PodCounters(0, 0, 5), "b": PodCounters(0, 0, 5)})
        reading = window.add(6.0, {"a": PodCounters(600, 600, 5), "b": PodCounters(600, 600, 5)})
        if window is plain:
            assert reading.arrival_rps == 400.0
    # the same counters read twice at one instant: the window stands, nothing divides by zero
    again = told.add(6.0, {"a": PodCounters(600, 600, 5), "b": PodCounters(600, 600, 5)})
    assert again.arrival_rps == pytest.approx(400.0 / 1.75) and again.newest_rps == pytest.approx(400.0 / 1.75)
    assert reading.arrival_rps == pytest.approx(400.0 / 1.75)
    assert reading.newest_rps == pytest.approx(400.0 / 1.75)
