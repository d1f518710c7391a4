"""The recommender's HTTP side: `/healthz` fails when the evaluation or the fast path stops making
progress (a round stuck in a call, not only a dead thread), and a round that raises is no progress."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from tests.unit.autoscaler.test_autoscaler_service import make
from tidescale.autoscaler.app import make_app
from tidescale.contracts.heartbeat import Heartbeat


def test_an_evaluation_that_never_returns_fails_liveness() -> None:
    """A Prometheus trickling one byte every 2 s held the evaluation while /healthz said ok."""
    svc, fake = make(interval_s=0.01, stall_after_s=0.05)
    release = threading.Event()
    answer = fake.instant

    def trickling(expr: str) -> list[tuple[float, float]]:
        release.wait(timeout=30)
        return answer(expr)

    fake.instant = trickling  # type: ignore[method-assign]
    stop = threading.Event()
    loop = threading.Thread(target=svc.run_loop, args=(stop,), daemon=True)
    loop.start()
    client = TestClient(make_app(svc))
    try:
        for _ in range(500):
            r = client.get("/healthz")
            if r.status_code != 200:
                break
            time.sleep(0.02)
        assert r.status_code == 503 and "evaluation" in r.json()["detail"]
        assert r.json()["targets"] == 1  # still says what it knows
    finally:
        release.set()
        stop.set()
        loop.join(timeout=10)


def test_the_fast_path_has_a_heartbeat_of_its_own() -> None:
    svc, _ = make()
    assert [h.name for h in svc.heartbeats] == ["evaluation", "fast path"]
    svc, _ = make(fast_path={"enabled": False})
    assert [h.name for h in svc.heartbeats] == ["evaluation"]


@pytest.mark.parametrize(("fails", "beats"), [(False, 3), (True, 0)])
def test_a_round_beats_only_when_it_returns(fails: bool, beats: int) -> None:
    stop = threading.Event()
    rounds = []
    heartbeat = Heartbeat("evaluation", 60.0)

    def step(now: float) -> None:
        rounds.append(now)
        if len(rounds) == 3:
            stop.set()
        if fails:
            raise RuntimeError("a bug in every round")

    svc, _ = make(fast_path={"enabled": False})
    svc._passes["evaluation"] = (step, 0.0, heartbeat)
    svc._ticking(stop, ("evaluation",))  # the loop run_loop runs: a failing round neither stops it nor beats
    assert len(rounds) == 3 and heartbeat.beats == beats
