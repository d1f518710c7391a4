"""Triton's queue policy on a real tritonserver: what the fast simulator's `queue_timeout_s` models and
what the recommender counts as demand (`nv_inference_request_failure{reason="REJECTED"}`)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tidescale.autoscaler.queries import TargetQueries
from tidescale.autoscaler.settings import TargetSettings
from tidescale.contracts.promql import metric_names
from tidescale.devstack.fleet.exposition import parse
from tidescale.devstack.fleet.model_repo import INPUT_NAME, ModelSpec, render_config
from tidescale.devstack.fleet.running import running_fleet
from tidescale.sim import BatcherConfig, FleetCounters, FleetSim
from tidescale.sim.servicecurve import ServiceCurve

pytestmark = pytest.mark.integration

# One request at a time, 300 ms each; a request still queued after 100 ms is rejected.
SLOW = ModelSpec("slow", ServiceCurve(((1, 0.3),), jitter_sigma=0.0), max_batch_size=1, preferred_batch_sizes=(),
                 max_queue_delay_us=0, queue_timeout_us=100_000, input_dims=(4,), gpu_memory_mib=256)
BURST = 6


def infer(url: str) -> httpx.Response:
    body = {"inputs": [{"name": INPUT_NAME, "shape": [1, 4], "datatype": "FP32", "data": [0.0] * 4}]}
    return httpx.post(f"{url}/v2/models/{SLOW.name}/infer", json=body, timeout=30.0)


def test_rendered_config_carries_the_queue_policy() -> None:
    text = render_config(SLOW)
    assert "default_queue_policy {" in text and "timeout_action: REJECT" in text
    assert "default_timeout_microseconds: 100000" in text and "preferred_batch_size" not in text


def test_requests_queued_past_the_timeout_are_rejected_and_counted(tmp_path: Path) -> None:
    with running_fleet(tmp_path, replicas=1, models=[SLOW]) as fleet:
        url = fleet.ready_urls()[0]
        with ThreadPoolExecutor(BURST) as pool:
            replies = list(pool.map(lambda _: infer(url), range(BURST)))
        metrics = parse(fleet.replicas[0].metrics_text())
    served = [r for r in replies if r.status_code == 200]
    rejected = [r for r in replies if r.status_code != 200]
    # the first request runs at once; the others wait behind 300 ms executions, longer than 100 ms
    assert served and rejected, [r.status_code for r in replies]
    assert all(r.status_code == 503 and "timeout expired" in r.text.lower() for r in rejected), rejected[0].text
    failures = {(s.label_dict["model"], s.label_dict.get("reason")): s.value
                for s in metrics["nv_inference_request_failure"].samples}
    success = {s.label_dict["model"]: s.value for s in metrics["nv_inference_request_success"].samples}
    assert failures[(SLOW.name, "REJECTED")] == len(rejected)
    assert success[SLOW.name] == len(served)
    # and the recommender's rejection query selects exactly that family and label
    query = TargetQueries.for_target(TargetSettings(deployment="triton", namespace="ml", model=SLOW.name)).rejections
    assert metric_names(query) == {"nv_inference_request_failure"} and 'reason="REJECTED"' in query


def test_no_payload_waits_beyond_the_policys_reach_as_the_triton_scheduler_model_says(tmp_path: Path) -> None:
    """With a queue timeout Triton prefetches no payload (its queue supports prefetching only without
    one), so while the one instance runs the first request the others wait in the scheduler queue,
    where the policy rejects them when the instance frees: the first request is the only one served.
    The `triton-2.51` scheduler model says the same; one that moved two of them into the rate
    limiter's prefetch slots and ran them would serve three."""
    with running_fleet(tmp_path, replicas=1, models=[SLOW]) as fleet:
        url = fleet.ready_urls()[0]
        with ThreadPoolExecutor(BURST) as pool:
            timed = list(pool.map(lambda _: timed_infer(url), range(BURST)))
    served = sorted(s for r, s in timed if r.status_code == 200)
    expected = predicted(SLOW, "triton-2.51")
    assert len(served) == expected.requests == 1 and BURST - len(served) == expected.failures, served
    assert served[0] < 2 * 0.3  # the one served ran at once, not after a queued payload


def timed_infer(url: str) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    reply = infer(url)
    return reply, time.monotonic() - start


def predicted(spec: ModelSpec, scheduler: str) -> FleetCounters:
    """The simulator's counters for BURST requests arriving at once on one replica."""
    cfg = BatcherConfig(max_batch_size=spec.max_batch_size, preferred_batch_sizes=spec.preferred_batch_sizes,
                        max_queue_delay_s=spec.max_queue_delay_us / 1e6, scheduler=scheduler,
                        queue_timeout_s=None if spec.queue_timeout_us is None else spec.queue_timeout_us / 1e6)
    sim = FleetSim(spec.curve, cfg, 1, cold_start_s=0.0)
    sim.offer(np.linspace(0.0, 0.01, BURST))
    sim.advance(10.0)
    return sim.counters()
