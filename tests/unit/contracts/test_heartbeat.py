"""Heartbeats: a loop that has not finished a round for its limit is stalled; the limit never undercuts
a few of its intervals."""

from __future__ import annotations

import pytest

from tidescale.contracts.heartbeat import Heartbeat, stall_after, stalled


def test_a_loop_is_stalled_once_it_has_not_beaten_for_its_limit() -> None:
    now = [100.0]
    beat = Heartbeat("poll", 30.0, clock=lambda: now[0])
    now[0] = 130.0
    assert not beat.stalled() and stalled([beat]) == []
    now[0] = 131.0
    assert beat.stalled() and stalled([beat]) == ["poll (no round finished for 31 s)"]
    beat.beat()
    assert not beat.stalled() and beat.beats == 1


def test_the_limit_is_at_least_three_intervals() -> None:
    assert stall_after(300.0, 15.0) == 300.0
    assert stall_after(300.0, 600.0) == 1800.0


@pytest.mark.parametrize("limit", [0.0, -1.0, float("nan")])
def test_a_limit_must_be_positive(limit: float) -> None:
    with pytest.raises(ValueError):
        Heartbeat("x", limit)
