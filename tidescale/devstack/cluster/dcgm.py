"""The simulated dcgm-exporter as a pod on each node of the local cluster (a DaemonSet).

Real dcgm-exporter asks the kubelet's pod-resources API which container holds which GPU and labels
each GPU's series with that container's `pod`, `namespace` and `container`. Here the node agent's
simulated device plugin writes the same assignment, with each pod's IP, to a JSON file under the
node's kubelet root (`/var/lib/kubelet/pod-resources/` in the pod, a hostPath as in dcgm-exporter's
chart). This process re-reads it on every sample, so a GPU follows its pod as pods come and go, and
derives each GPU's utilisation from the busy time of the Triton pod that holds it.
"""

from __future__ import annotations

import json
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidescale.devstack.fleet.gpus import GpuAssignment, SimulatedGpuNode

TRITON_HTTP_PORT = 8000
MODEL_MEMORY_MIB = 6144  # what a loaded model holds in frame buffer, for FB_USED


@dataclass
class PodWorkload:
    """A container holding a GPU, as the pod-resources file names it (a `Workload` for the GPU model)."""

    namespace: str
    pod: str
    container: str
    ip: str

    @property
    def http_url(self) -> str:
        return f"http://{self.ip}:{TRITON_HTTP_PORT}"

    def alive(self) -> bool:
        return True  # listed: the pod holds the GPU; a Triton that does not answer reads as idle

    def set_slowdown(self, factor: float) -> None:
        """Throttling cannot slow a real Triton pod down; the fault still shows in the metrics."""


def read_assignments(path: Path) -> dict[int, PodWorkload]:
    """GPU index -> the container holding it; empty while the file is missing or half-written."""
    try:
        rows: Any = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out: dict[int, PodWorkload] = {}
    for row in rows if isinstance(rows, list) else []:
        try:
            workload = PodWorkload(str(row["namespace"]), str(row["pod"]), str(row["container"]), str(row["ip"]))
            out.update({int(i): workload for i in row["gpus"]})
        except (KeyError, TypeError, ValueError):
            continue
    return out


class PodMappedGpuNode(SimulatedGpuNode):
    """A node's GPUs whose assignments follow the pod-resources file."""

    def __init__(self, pod_resources: Path, hostname: str, gpus: int, port: int | None = None,
                 host: str = "0.0.0.0", **kwargs: Any) -> None:
        super().__init__(hostname, [GpuAssignment() for _ in range(gpus)], port, host=host, **kwargs)
        self.pod_resources = pod_resources

    def sample(self) -> None:
        assigned = read_assignments(self.pod_resources)
        for index in range(len(self.gpus)):
            workload = assigned.get(index)
            if workload is not None:
                self.gpus[index].container = workload.container
            current = self.gpus[index].replica
            # Equal workloads are the same pod: keep the object, or its busy-time counter restarts.
            self.assign(index, current if current == workload else workload, MODEL_MEMORY_MIB if workload else 0)
        super().sample()


def serve(pod_resources: Path, hostname: str, gpus: int, port: int, fault_token: str,
          dcgm_version: str = "4.x") -> None:
    """Serve /metrics (and POST /faults with *fault_token*) until SIGTERM, as the container's main process,
    with dcgm-exporter *dcgm_version*'s names and units (4.x or 4.9)."""
    node = PodMappedGpuNode(pod_resources, hostname, gpus, port, token=fault_token, dcgm_version=dcgm_version).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    node.stop()
