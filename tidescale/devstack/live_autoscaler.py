"""The recommender and the HPA emulator driving a real fleet (the demo's local Triton replicas)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tidescale.autoscaler import adapter
from tidescale.autoscaler.hpa import HpaSpec
from tidescale.autoscaler.manifests import Target, tidescale_hpa_spec
from tidescale.autoscaler.service import RecommenderService
from tidescale.autoscaler.settings import RecommenderSettings, RecommenderTuning, TargetSettings
from tidescale.autoscaler.state import TargetState
from tidescale.contracts.errors import UsageError
from tidescale.contracts.prometheus import PrometheusClient
from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S
from tidescale.sim.hpa_controller import SYNC_PERIOD_S, HpaEmulator, HpaStatus, pods_for

log = logging.getLogger(__name__)
LIVE_POLICIES = ("tidescale",)


class LiveAutoscaler:
    """The recommender's passes as the service runs them (`RecommenderService.tick`: the fast path every
    2 s, the evaluation every interval), and the emulated HPA scaling the fleet every sync period.

    `fleet_scale_fn(n)` sets the Deployment's replicas; `current_fn()` / `ready_fn()` return the
    spec and Ready replica counts (what kube-state-metrics would report). `status()` is the HPA
    status for the simulated kube-state-metrics.
    """

    def __init__(self, prometheus_url: str, fleet_scale_fn: Callable[[int], None], current_fn: Callable[[], int],
                 ready_fn: Callable[[], int], hpa_spec: HpaSpec | None = None, policy: str = "tidescale", *,
                 deployment: str = "triton", namespace: str = "tidescale-demo", model: str = "resnet50",
                 min_replicas: int = 1, max_replicas: int = 8, capacity_rps: float = 100.0,
                 slo_latency_threshold_s: float = SLO_LATENCY_THRESHOLD_S, cold_start_s: float = 30.0,
                 interval_s: float = SYNC_PERIOD_S,
                 tuning: RecommenderTuning | None = None) -> None:
        if policy not in LIVE_POLICIES:
            raise UsageError(f"unknown live policy {policy!r}; choose one of {', '.join(LIVE_POLICIES)}")
        target = Target(deployment, namespace, model, min_replicas, max_replicas, slo_latency_threshold_s)
        self.spec = hpa_spec or tidescale_hpa_spec(target)
        self.fleet_scale_fn, self.current_fn, self.ready_fn = fleet_scale_fn, current_fn, ready_fn
        self.interval_s = interval_s
        settings = RecommenderSettings(
            prometheus_url=prometheus_url, slo_latency_threshold_s=slo_latency_threshold_s, capacity_rps=capacity_rps,
            cold_start_s=cold_start_s,
            interval_s=interval_s, tuning=tuning or RecommenderTuning(),
            targets=[TargetSettings(deployment=deployment, namespace=namespace, model=model,
                                    min_replicas=self.spec.min_replicas, max_replicas=self.spec.max_replicas)])
        self.service = RecommenderService(settings, PrometheusClient(prometheus_url),
                                          replicas_fn=lambda _t: (self.current_fn(), self.ready_fn()))
        self.hpa = HpaEmulator(self.spec, current_fn())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def target_state(self) -> TargetState:
        return next(iter(self.service.states.values()))

    def step(self, now: float | None = None) -> int:
        """The recommender's due passes, then one HPA sync; scales the fleet when the count changes."""
        now = time.time() if now is None else now
        self.service.tick(now)
        return self.sync(now)

    def sync(self, now: float) -> int:
        """One HPA sync on the published count."""
        current, ready = self.current_fn(), self.ready_fn()
        self.hpa.replicas = current  # the Deployment is the source of truth (someone may have scaled it)
        published = self.target_state.published
        desired = self.hpa.step(now, {adapter.DESIRED_REPLICAS: published}, pods_for(current, ready))
        if desired != current:
            self.fleet_scale_fn(desired)
        return desired

    def status(self) -> HpaStatus:
        return self.hpa.status

    def start(self) -> LiveAutoscaler:
        """Tick the recommender whenever a pass is due and sync the HPA every sync period, in a daemon thread."""
        def loop() -> None:
            next_sync = time.time()
            while not self._stop.is_set():
                now = time.time()
                try:
                    next_pass = self.service.tick(now)
                    if now >= next_sync:
                        next_sync = now + self.interval_s
                        self.sync(now)
                except Exception:  # keep syncing, as the controller would
                    log.exception("live autoscaler step failed")
                    next_pass = now + self.interval_s
                self._stop.wait(max(0.0, min(next_pass, next_sync) - time.time()))

        self._thread = threading.Thread(target=loop, name="live-autoscaler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.service.close()
