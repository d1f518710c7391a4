"""LiveAutoscaler against the local fleet: real Triton replicas under load, a real Prometheus, the
recommender and the emulated HPA scale the Deployment up; with Prometheus gone it holds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tidescale.autoscaler.settings import RecommenderTuning
from tidescale.devstack.fleet.loadgen import LoadGenerator
from tidescale.devstack.fleet.running import running_stack
from tidescale.devstack.live_autoscaler import LiveAutoscaler
from tidescale.devstack.promstack import PrometheusServer, ScrapeTarget
from tidescale.sim.traffic import scenario

pytestmark = pytest.mark.integration
RPS, CAPACITY = 30.0, 10.0  # a deliberately small capacity so modest load needs several replicas


def test_live_autoscaler_scales_real_replicas(tmp_path: Path) -> None:
    with running_stack(tmp_path / "fleet", replicas=1, gpus_per_node=1) as stack:
        found = stack.targets()
        targets = [ScrapeTarget(job, address, labels) for job, items in
                   (("triton", found.triton), ("kube-state-metrics", found.kube_state_metrics))
                   for address, labels in items]
        prom = PrometheusServer(tmp_path / "prom", targets).start()
        load = LoadGenerator(scenario("steady", RPS, 600.0), stack.fleet.ready_urls, ["resnet50"], seed=4).start()
        live: LiveAutoscaler | None = None
        try:
            fleet = stack.fleet
            live = LiveAutoscaler(prom.url, fleet.scale_to, lambda: fleet.spec_replicas,
                                  lambda: len(fleet.ready_replicas()), namespace=fleet.namespace,
                                  deployment=fleet.deployment, model="resnet50", min_replicas=1, max_replicas=3,
                                  capacity_rps=CAPACITY, cold_start_s=5.0,
                                  tuning=RecommenderTuning(rate_window_s=10, fast_window_s=5))
            prom.wait_for_targets_up()
            prom.wait_for(f'sum(rate(nv_inference_request_success{{model="resnet50"}}[10s])) > {RPS * 0.6}',
                          timeout=60)
            start = time.time()
            assert live.step(start) == 3  # ceil(30 / (10 * 0.9)) = 4, clamped to maxReplicas
            live.service.tick(start + 2.0)  # the fast path, as the recommender pod runs it: the pods read
            reading = live.target_state.fast_reading
            assert reading is not None and reading.pods >= 1 and not reading.missing
            status = live.status()
            assert (status.current_replicas, status.desired_replicas, status.max_replicas) == (1, 3, 3)
            stack.kube.set_hpa(fleet.deployment, status.min_replicas, status.max_replicas,
                               current=status.current_replicas, desired=status.desired_replicas)
            assert fleet.spec_replicas == 3
            fleet.wait_ready(3, timeout=120)
            prom.stop()
            # the next evaluation is due one interval on: Prometheus gone, the recommendation holds
            assert live.step(start + live.interval_s) == 3
            assert live.target_state.failsafe == "prometheus_down"
        finally:
            load.stop()
            prom.stop()
            if live is not None:
                live.stop()
