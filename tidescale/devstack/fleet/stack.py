"""The fleet with its simulated neighbours: Triton replicas, GPU nodes (dcgm-exporter) and
kube-state-metrics, started and stopped together. The demo and `tidescale fleet run` use it."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from tidescale.devstack.fleet.fleet import ScrapeTarget, TritonFleet
from tidescale.devstack.fleet.kube import KubeStateMetricsServer
from tidescale.devstack.fleet.model_repo import DEFAULT_MODELS, ModelSpec
from tidescale.devstack.fleet.nodes import FleetGpus
from tidescale.devstack.fleet.triton import TraceSettings


@dataclass(frozen=True)
class StackTargets:
    """Scrape targets by job, ready for a Prometheus config."""

    triton: list[ScrapeTarget]
    dcgm: list[ScrapeTarget]
    kube_state_metrics: list[ScrapeTarget]


class FleetStack:
    """TritonFleet + FleetGpus + KubeStateMetricsServer as one context manager."""

    def __init__(self, workdir: Path, models: Sequence[ModelSpec] = DEFAULT_MODELS, *, replicas: int = 2,
                 namespace: str = "tidescale-demo", deployment: str = "triton",
                 trace: TraceSettings | None = None, summary_latencies: bool = False,
                 gpu_nodes: int = 1, gpus_per_node: int = 8, gpu_poll_interval: float = 1.0, seed: int = 0) -> None:
        self.fleet = TritonFleet(workdir, models, namespace=namespace, deployment=deployment, replicas=replicas,
                                 trace=trace, summary_latencies=summary_latencies, seed=seed)
        self.gpus = FleetGpus(self.fleet, nodes=gpu_nodes, gpus_per_node=gpus_per_node,
                              poll_interval=gpu_poll_interval)
        self.kube = KubeStateMetricsServer(self.fleet)

    def start(self, wait: bool = True) -> FleetStack:
        try:
            self.fleet.start(wait=wait)
            self.gpus.start()
            self.kube.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.kube.stop()
        with contextlib.suppress(Exception):
            self.gpus.stop()
        self.fleet.stop()

    def targets(self) -> StackTargets:
        return StackTargets(self.fleet.scrape_targets(), self.gpus.scrape_targets(), [self.kube.scrape_target()])

    def __enter__(self) -> FleetStack:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
