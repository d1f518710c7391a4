"""The load generator against fake Triton endpoints: round robin, outcomes, bounded in-flight."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

from tidescale.contracts.errors import UsageError
from tidescale.devstack.fleet.httpserve import LoopbackHttpServer, Response, json_response
from tidescale.devstack.fleet.loadgen import (
    STATUS_DROPPED,
    STATUS_NO_ENDPOINT,
    LoadGenerator,
    RequestRecord,
    normalize_mix,
    summarize,
)
from tidescale.sim.traffic import Scenario


def fixed_arrivals(times: list[float]) -> Scenario:
    arr = np.asarray(times, dtype=float)
    return Scenario("fixed", float(arr[-1]) + 0.01, lambda t: 0.0, timestamps=arr)


class FakeTriton:
    """Answers infer for one model; records bodies; can hold requests until released."""

    def __init__(self, model: str = "resnet50", hold: threading.Event | None = None) -> None:
        self.bodies: list[dict[str, object]] = []
        self.hold = hold
        self.server = LoopbackHttpServer("fake-triton")
        self.server.post_routes[f"/v2/models/{model}/infer"] = self._infer

    def _infer(self, headers: dict[str, str], body: bytes) -> Response:
        self.bodies.append(json.loads(body))
        if self.hold is not None:
            self.hold.wait(10)
        return json_response(200, {"outputs": []})


@pytest.fixture
def two_servers() -> Iterator[list[FakeTriton]]:
    servers = [FakeTriton(), FakeTriton()]
    for s in servers:
        s.server.start()
    yield servers
    for s in servers:
        s.server.stop()


def test_requests_go_round_robin_and_are_recorded(two_servers: list[FakeTriton]) -> None:
    urls = [s.server.url for s in two_servers]
    gen = LoadGenerator(fixed_arrivals([0.01 * i for i in range(10)]), lambda: urls, ["resnet50"]).start()
    assert gen.wait(20)
    records = gen.records()
    assert len(records) == 10 and all(r.ok for r in records)
    assert Counter(r.endpoint for r in records) == {urls[0]: 5, urls[1]: 5}
    body = two_servers[0].bodies[0]
    assert body["inputs"][0]["shape"] == [1, 16]  # type: ignore[index]
    stats = gen.stats(window_s=60)
    assert stats.ok == 10 and stats.errors == 0 and stats.p99_s is not None and stats.total_sent == 10


def test_unknown_model_is_an_error_and_no_endpoints_is_counted(two_servers: list[FakeTriton]) -> None:
    url = two_servers[0].server.url
    gen = LoadGenerator(fixed_arrivals([0.0, 0.01]), lambda: [url], ["ctr_ranker"]).start()
    gen.wait(20)
    assert [r.status for r in gen.records()] == [404, 404]
    assert gen.stats(60).errors == 2
    none = LoadGenerator(fixed_arrivals([0.0, 0.01, 0.02]), lambda: [], ["resnet50"]).start()
    none.wait(20)
    assert {r.status for r in none.records()} == {STATUS_NO_ENDPOINT}
    assert none.total_sent == 0 and none.total_errors == 3


def test_arrivals_beyond_max_in_flight_are_dropped_not_queued() -> None:
    hold = threading.Event()
    fake = FakeTriton(hold=hold)
    fake.server.start()
    try:
        gen = LoadGenerator(fixed_arrivals([0.0, 0.01, 0.02, 0.03, 0.04]), lambda: [fake.server.url],
                            ["resnet50"], max_in_flight=2).start()
        while len(gen.records()) < 3:
            threading.Event().wait(0.02)
        hold.set()
        gen.wait(20)
    finally:
        hold.set()
        fake.server.stop()
    statuses = Counter(r.status for r in gen.records())
    assert statuses == {200: 2, STATUS_DROPPED: 3}
    assert gen.stats(60).dropped == 3 and gen.total_errors == 0


def test_stop_ends_a_long_scenario_promptly() -> None:
    gen = LoadGenerator(fixed_arrivals([0.0, 3600.0]), lambda: [], ["resnet50"]).start()
    gen.stop()
    assert not gen.running


def test_summarize_uses_only_the_window() -> None:
    recs = [RequestRecord(0, t_done, lat, 200, "m", "e") for t_done, lat in [(1.0, 9.0), (95.0, 0.1), (99.0, 0.3)]]
    recs.append(RequestRecord(0, 98.0, 0.0, 503, "m", "e"))
    s = summarize(recs, now=100.0, window_s=10.0, in_flight=0, total_sent=4, total_errors=1)
    assert s.ok == 2 and s.errors == 1 and s.completed_rps == pytest.approx(0.2)
    assert s.p50_s == pytest.approx(0.2) and s.p99_s is not None and s.p99_s <= 0.3


def test_model_mix() -> None:
    names, p = normalize_mix({"a": 3, "b": 1})
    assert names == ["a", "b"] and p.tolist() == [0.75, 0.25]
    for bad in ({}, {"a": -1.0}, {"a": 0.0}):
        with pytest.raises(UsageError):
            normalize_mix(bad)


def test_a_failing_handler_answers_500_and_the_server_keeps_serving() -> None:
    import httpx

    def broken() -> Response:
        raise RuntimeError("secret detail")

    server = LoopbackHttpServer("broken")
    server.get_routes["/metrics"] = broken
    server.start()
    try:
        first = httpx.get(f"{server.url}/metrics")
        assert first.status_code == 500 and "secret" not in first.text
        assert httpx.get(f"{server.url}/metrics").status_code == 500
    finally:
        server.stop()
