"""How long a new replica takes to serve once it is asked for: a wait for a GPU node, then its start.

A fixed cold start is what the benchmark's first scenarios hand every policy. Clusters are less
kind, in two ways this models:

- the start-to-Ready time varies from pod to pod (image pulls, model loads, a slow node): a
  lognormal spread around the median, clipped to [`FASTEST`, `SLOWEST`] × the median;
- a pod beyond the GPUs that are free waits, unschedulable, for a node that cluster-autoscaler (or
  Karpenter) provisions for it: at least `node_min_s` (the instance boot and the GPU driver and
  device plugin coming up), plus a heavy (Lomax) tail up to `node_max_s`. The defaults put the
  median at about 2.3 min, the 90th percentile near 4 min and the rare ones at 10.

kube-state-metrics reports such a pod's `kube_pod_start_time` when the kubelet takes it, so a
start-to-Ready time learned from it does not include the node's wait: the scheduler's
`kube_pod_status_unschedulable` is what shows the wait. Nodes once provisioned stay for the run
(cluster-autoscaler removes an unneeded node after 10 minutes, which these scenarios do not reach
again after their surge).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tidescale.contracts.errors import UsageError

FASTEST, SLOWEST = 0.25, 4.0  # the start-to-Ready spread is clipped to these multiples of its median
Z_90 = 1.2816  # the standard normal's 90th percentile


@dataclass(frozen=True)
class PodStartup:
    """A scenario's replica starts: *container_s* median start-to-Ready, *container_sigma* its lognormal
    spread (0: always the median); *free_gpus* GPUs free beyond the initial fleet (None: a pod never
    waits for a node), and the node wait: *node_min_s* + *node_scale_s* × Lomax(*node_shape*), at most
    *node_max_s*."""

    container_s: float
    container_sigma: float = 0.0
    free_gpus: int | None = None
    node_min_s: float = 120.0
    node_scale_s: float = 30.0
    node_shape: float = 1.5
    node_max_s: float = 600.0

    def __post_init__(self) -> None:
        checks = {"container_s": self.container_s >= 0, "container_sigma": self.container_sigma >= 0,
                  "node_min_s": self.node_min_s >= 0, "node_scale_s": self.node_scale_s >= 0,
                  "node_shape": self.node_shape > 0, "node_max_s": self.node_max_s >= self.node_min_s,
                  "free_gpus": self.free_gpus is None or self.free_gpus >= 0}
        bad = [k for k, ok in checks.items() if not ok]
        values = [self.container_s, self.container_sigma, self.node_min_s, self.node_scale_s, self.node_shape,
                  self.node_max_s]
        if bad or not all(math.isfinite(v) for v in values):
            raise UsageError(f"invalid pod start-up model ({', '.join(bad) or 'a value is not finite'}): {self}")

    def container(self, rng: np.random.Generator) -> float:
        """One pod's start-to-Ready time."""
        if self.container_sigma == 0:
            return self.container_s
        spread = math.exp(self.container_sigma * float(rng.standard_normal()))
        return self.container_s * min(SLOWEST, max(FASTEST, spread))

    def node_wait(self, rng: np.random.Generator) -> float:
        """How long one new GPU node takes to take a pod."""
        return min(self.node_max_s, self.node_min_s + self.node_scale_s * float(rng.pareto(self.node_shape)))

    @property
    def fastest_s(self) -> float:
        """The quickest a new replica can serve: what a bound on any policy may grant it."""
        return self.container_s * (FASTEST if self.container_sigma > 0 else 1.0)

    @property
    def slow_s(self) -> float:
        """A new replica's 90th-percentile time to serve, a node's wait included where there may be one:
        how far ahead a policy that knows the future asks."""
        container = self.container_s * min(SLOWEST, math.exp(Z_90 * self.container_sigma))
        if self.free_gpus is None:
            return container
        node = self.node_min_s + self.node_scale_s * (10.0 ** (1.0 / self.node_shape) - 1.0)  # Lomax's 90th
        return container + min(self.node_max_s, node)
