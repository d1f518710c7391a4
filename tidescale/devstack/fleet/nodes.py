"""Placing the fleet's pods on simulated GPU nodes, as the scheduler and NVIDIA device plugin would.

Each pod gets one GPU; a pod keeps its GPU for life; a stopped pod frees it. Pods beyond the
GPU count run without a GPU (the cluster would keep them Pending; the demo lets them serve).
"""

from __future__ import annotations

from collections.abc import Sequence

from tidescale.contracts.errors import UsageError
from tidescale.devstack.fleet.fleet import TritonFleet
from tidescale.devstack.fleet.gpus import GpuAssignment, SimulatedGpuNode, replica_memory_mib
from tidescale.devstack.fleet.periodic import Periodic


def place(current: Sequence[str | None], pods: Sequence[str]) -> list[str | None]:
    """New slot→pod list: pods still present keep their slot, new pods take the first free ones."""
    keep = set(pods)
    slots = [p if p in keep else None for p in current]
    placed = {p for p in slots if p is not None}
    for pod in pods:
        if pod in placed:
            continue
        try:
            i = slots.index(None)
        except ValueError:
            break
        slots[i] = pod
        placed.add(pod)
    return slots


class FleetGpus:
    """Simulated GPU nodes whose GPUs follow the fleet's pods, sampled together in one thread."""

    def __init__(self, fleet: TritonFleet, nodes: int = 1, gpus_per_node: int = 4,
                 model_name: str = "NVIDIA A100-SXM4-80GB", poll_interval: float = 1.0,
                 hostname_prefix: str = "gpu-node", dcgm_version: str = "4.x") -> None:
        if nodes < 1 or gpus_per_node < 1:
            raise UsageError("need at least one node with at least one GPU")
        self.fleet = fleet
        self.poll_interval = poll_interval
        self.memory_mib = replica_memory_mib(fleet.models)
        self.nodes = [
            SimulatedGpuNode(f"{hostname_prefix}-{i}", [GpuAssignment() for _ in range(gpus_per_node)],
                             model_name=model_name, poll_interval=poll_interval, dcgm_version=dcgm_version)
            for i in range(nodes)
        ]
        self._slots: list[str | None] = [None] * (nodes * gpus_per_node)
        self._ticker = Periodic("fleet-gpus", poll_interval, self.tick)

    def sync(self) -> None:
        """Reassign GPUs to the fleet's current pods."""
        replicas = {r.pod: r for r in self.fleet.replicas}
        self._slots = place(self._slots, list(replicas))
        per_node = len(self.nodes[0].gpus)
        for slot, pod in enumerate(self._slots):
            node, index = self.nodes[slot // per_node], slot % per_node
            replica = replicas.get(pod) if pod is not None else None
            node.assign(index, replica, self.memory_mib if replica is not None else 0)

    def tick(self) -> None:
        self.sync()
        for node in self.nodes:
            node.sample()

    def start(self) -> FleetGpus:
        self.sync()
        for node in self.nodes:
            node.start(sample=False)
        self._ticker.start()
        return self

    def stop(self) -> None:
        self._ticker.stop()
        for node in self.nodes:
            node.stop()

    def scrape_targets(self) -> list[tuple[str, dict[str, str]]]:
        """(address, labels) of each node's dcgm-exporter endpoint."""
        return [(n.address, {"node": n.hostname}) for n in self.nodes]

    def node_of(self, pod: str) -> tuple[SimulatedGpuNode, int] | None:
        """The node and GPU index a pod runs on, for fault injection aimed at one pod."""
        per_node = len(self.nodes[0].gpus)
        for slot, p in enumerate(self._slots):
            if p == pod:
                return self.nodes[slot // per_node], slot % per_node
        return None
