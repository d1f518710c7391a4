"""No target, response or bug stops the exporter's background work for good (issue 14, item 1)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from fastapi.testclient import TestClient

from tests.hostile import JSON_DOCUMENTS
from tests.unit.exporters.test_service_api import make_settings, samples
from tests.unit.exporters.test_stats_poller import run_with_server
from tidescale.benches.poll import FakeTriton
from tidescale.contracts.errors import UsageError
from tidescale.exporters.service import create_app
from tidescale.exporters.stats_poller import StatsPoller
from tidescale.exporters.supervisor import TaskSupervisor, backoff, job_name
from tidescale.exporters.targets import TargetSet, parse_targets_file

HOSTILE = [pytest.param(doc, id=name) for name, doc in JSON_DOCUMENTS]


class HostileMetadataTriton(FakeTriton):
    """Answers `GET /v2` and model configs with *doc* until `fixed` is set."""

    def __init__(self, doc: bytes) -> None:
        super().__init__(models=2)
        self.doc = doc
        self.fixed = False

    async def _meta(self, request: web.Request) -> web.Response:
        return await super()._meta(request) if self.fixed else web.Response(body=self.doc)

    async def _config(self, request: web.Request) -> web.Response:
        return await super()._config(request) if self.fixed else web.Response(body=self.doc)


@pytest.mark.parametrize("doc", HOSTILE)
def test_hostile_metadata_never_stops_polling(doc: bytes) -> None:
    fake = HostileMetadataTriton(doc)

    async def body(port: int) -> None:
        url = f"http://127.0.0.1:{port}"
        poller = StatsPoller(TargetSet([url]), timeout_s=10)
        await poller.poll_once()  # a RecursionError here used to end the poller's loop
        await poller.poll_once()
        assert poller.series_count() == 2
        reasons = {reason for (_, reason) in poller.self_metrics.poll_errors}
        assert reasons <= {"bad_metadata"}
        fake.fixed = True  # the pod is fixed: nothing left over
        await poller.close()

    run_with_server(fake, body)


@pytest.mark.parametrize("doc", HOSTILE)
def test_hostile_stats_bodies_are_poll_errors_of_that_target(doc: bytes) -> None:
    fake = FakeTriton(stats_body=lambda host, n: doc)

    async def body(port: int) -> None:
        poller = StatsPoller(TargetSet([f"http://127.0.0.1:{port}"]), timeout_s=10)
        await poller.poll_once()
        assert {reason for (_, reason) in poller.self_metrics.poll_errors} <= {"bad_response"}
        await poller.close()

    run_with_server(fake, body)


def test_an_unexpected_error_in_one_target_is_counted_and_the_loop_goes_on() -> None:
    fake = FakeTriton(models=1)

    async def body(port: int) -> None:
        url = f"http://127.0.0.1:{port}"
        poller = StatsPoller(TargetSet([url]), timeout_s=10)
        original = poller._update

        def broken(*args: object, **kwargs: object) -> None:
            raise KeyError("a bug")

        poller._update = broken  # type: ignore[method-assign]
        await poller.poll_once()
        assert dict(poller.self_metrics.poll_errors) == {(url, "internal_error"): 1}
        poller._update = original  # type: ignore[method-assign]
        await poller.poll_once()
        assert poller.series_count() == 1
        await poller.close()

    run_with_server(fake, body)


@pytest.mark.parametrize("doc", HOSTILE)
def test_hostile_targets_files_are_usage_errors(doc: bytes) -> None:
    with contextlib.suppress(UsageError):  # anything else (RecursionError) fails the test
        parse_targets_file(doc.decode("utf-8", "replace"))


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff(n, 1.0, 8.0) for n in (1, 2, 3, 4, 5, 500)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_job_names_are_short_labels() -> None:
    async def tail_and_expire() -> None:
        return None

    assert job_name(tail_and_expire) == "tail_and_expire"
    assert job_name(StatsPoller.run) == "StatsPoller.run"


def flaky(failures: int) -> tuple[Callable[[], Awaitable[None]], list[int]]:
    """A job that raises on its first *failures* runs, then runs until cancelled."""
    calls = [0]

    async def flaky_job() -> None:
        calls[0] += 1
        if calls[0] <= failures:
            raise RecursionError("maximum recursion depth exceeded")
        await asyncio.Event().wait()

    return flaky_job, calls


def test_supervisor_restarts_a_failed_job_and_counts_it() -> None:
    job, calls = flaky(3)

    async def main() -> TaskSupervisor:
        sup = TaskSupervisor(backoff_s=0.001, restart_limit=5)
        task = asyncio.create_task(sup.supervise("flaky", job))
        while calls[0] < 4:
            await asyncio.sleep(0.001)
        assert sup.down() == [] and sup.given_up() == []
        task.cancel()
        return sup

    sup = asyncio.run(main())
    assert sup.restarts == {"flaky": 3}


def test_supervisor_gives_up_past_the_limit() -> None:
    job, calls = flaky(10**9)

    async def main() -> TaskSupervisor:
        sup = TaskSupervisor(backoff_s=0.001, restart_limit=2)
        await sup.supervise("broken", job)  # returns once it gives up
        return sup

    sup = asyncio.run(main())
    assert calls[0] == 3 and sup.given_up() == ["broken"] and sup.restarts == {"broken": 2}


def wait_for(check: Callable[[], bool], tries: int = 2000) -> None:
    """Poll *check* (a bounded number of times, not a wall-clock assertion)."""
    for _ in range(tries):
        if check():
            return
        time.sleep(0.005)
    raise AssertionError("condition never became true")


def test_a_dead_task_restarts_and_readyz_recovers() -> None:
    app = create_app(make_settings(task_backoff_s=0.01))
    job, calls = flaky(2)
    app.state.exporter.background.append(job)
    with TestClient(app) as c:
        wait_for(lambda: calls[0] >= 3)
        wait_for(lambda: c.get("/readyz").status_code == 200)
        assert c.get("/healthz").status_code == 200
        restarts = {labels["task"]: v for labels, v in samples(c, "tidescale_exporter_task_restarts_total")}
        assert restarts == {"flaky_job": 2}


def test_healthz_fails_only_when_a_task_cannot_recover() -> None:
    app = create_app(make_settings(task_backoff_s=0.01, task_restart_limit=2))
    job, _ = flaky(10**9)
    app.state.exporter.background.append(job)
    with TestClient(app) as c:
        wait_for(lambda: c.get("/healthz").status_code == 503)
        r = c.get("/healthz")
        assert "flaky_job" in r.json()["detail"]
        assert c.get("/readyz").status_code == 503
