"""The stats poller against real tritonserver 2.51 replicas under load, including a server restart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from tidescale.devstack.fleet.fleet import TritonFleet
from tidescale.devstack.fleet.loadgen import LoadGenerator
from tidescale.devstack.fleet.running import running_fleet
from tidescale.exporters.stats_poller import StatsPoller
from tidescale.exporters.targets import TargetSet
from tidescale.exporters.tritonstats import parse_stats
from tidescale.sim.traffic import scenario

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonFleet]:
    with running_fleet(tmp_path_factory.mktemp("poller-fleet"), replicas=1) as running:
        yield running


def value(poller: StatsPoller, name: str, **labels: str) -> float | None:
    reg = CollectorRegistry()
    reg.register(poller)
    return reg.get_sample_value(name, labels)


def load(url: str, rps: float = 120.0, seconds: float = 1.5) -> None:
    gen = LoadGenerator(scenario("steady", rps, seconds), lambda: [url], ["resnet50"], seed=5).start()
    assert gen.wait(60)


def test_poll_real_triton_statistics(fleet: TritonFleet) -> None:
    replica = fleet.replicas[0]
    url = replica.http_url
    poller = StatsPoller(TargetSet([url]), timeout_s=5)
    labels = {"model": "resnet50", "version": "1", "namespace": "", "pod": url.removeprefix("http://")}

    async def scenario_() -> None:
        load(url)
        await poller.poll_once()
        first = next(m for m in parse_stats(_raw(replica)) if m.name == "resnet50")
        assert value(poller, "tidescale_batch_size_count", **labels) == first.execution_count
        assert value(poller, "tidescale_batch_size_sum", **labels) == first.inference_count
        load(url)
        await poller.poll_once()
        second = next(m for m in parse_stats(_raw(replica)) if m.name == "resnet50")
        assert value(poller, "tidescale_batch_size_count", **labels) == second.execution_count
        eff = value(poller, "tidescale_batching_efficiency_ratio", **labels)
        assert eff is not None and 0 < eff <= 1
        # 2.51 exports nv_inference_pending_request_count, so no estimate in auto mode
        assert value(poller, "tidescale_queue_depth_estimate", **labels) is None
        assert not poller.self_metrics.poll_errors

        # A restart resets Triton's counters; ours keep growing by what the new process did.
        before = value(poller, "tidescale_batch_size_count", **labels)
        fleet.kill_replica(replica.pod)
        _wait_ready(fleet)
        load(fleet.replicas[0].http_url, seconds=1.0)
        await poller.poll_once()
        after_restart = next(m for m in parse_stats(_raw(fleet.replicas[0])) if m.name == "resnet50")
        after = value(poller, "tidescale_batch_size_count", **labels)
        assert before is not None and after is not None
        assert after == before + after_restart.execution_count
        await poller.close()

    asyncio.run(scenario_())


def _raw(replica: object) -> bytes:
    import json

    return json.dumps(replica.model_stats()).encode()  # type: ignore[attr-defined]


def _wait_ready(fleet: TritonFleet, timeout: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    time.sleep(0.5)
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{fleet.replicas[0].http_url}/v2/health/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("replica did not come back")
