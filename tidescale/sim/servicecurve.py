"""The GPU service-time curve: how long one execution of a batch of size b takes.

The default is calibrated to published Triton figures for a V100 (throughput at batch 1, 8, 16,
32 = 58, 210, 320, 380 req/s with P99 45, 88, 132, 210 ms). One execution of batch b takes
b / throughput(b) seconds; between calibration points the execution time is interpolated
linearly in b. Both the real fleet (the Python-backend models sleep this long) and the fast
simulator use this one curve, so they can be compared.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from statistics import NormalDist

from tidescale.contracts.errors import UsageError

# (batch size, throughput req/s, published P99 seconds)
V100_POINTS: tuple[tuple[int, float, float], ...] = (
    (1, 58.0, 0.045),
    (8, 210.0, 0.088),
    (16, 320.0, 0.132),
    (32, 380.0, 0.210),
)


@dataclass(frozen=True)
class ServiceCurve:
    """Execution time per batch size, piecewise linear through calibration points."""

    points: tuple[tuple[int, float], ...]  # (batch size, execution seconds), sorted by batch
    jitter_sigma: float = 0.05  # lognormal sigma of per-execution noise
    _batches: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.points:
            raise UsageError("a service curve needs at least one (batch, seconds) point")
        pts = tuple(sorted(self.points))
        for b, s in pts:
            if b < 1 or s <= 0:
                raise UsageError(f"service curve point ({b}, {s}) must have batch >= 1 and seconds > 0")
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "_batches", tuple(b for b, _ in pts))

    @classmethod
    def from_throughput(cls, points: tuple[tuple[int, float, float], ...] = V100_POINTS,
                        jitter_sigma: float = 0.05) -> ServiceCurve:
        return cls(tuple((b, b / thr) for b, thr, _ in points), jitter_sigma)

    @classmethod
    def v100(cls) -> ServiceCurve:
        return cls.from_throughput(V100_POINTS)

    @property
    def max_batch(self) -> int:
        return self._batches[-1]

    def exec_seconds(self, batch: int) -> float:
        """Mean execution time of one batch of *batch* requests."""
        if batch < 1:
            raise ValueError("batch must be >= 1")
        pts = self.points
        if batch <= pts[0][0]:
            return pts[0][1] * batch / pts[0][0] if pts[0][0] > 1 else pts[0][1]
        i = bisect.bisect_left(self._batches, batch)
        if i >= len(pts):
            (b0, s0), (b1, s1) = pts[-2] if len(pts) > 1 else pts[-1], pts[-1]
            if b1 == b0:
                return s1 * batch / b1
        else:
            (b0, s0), (b1, s1) = pts[i - 1], pts[i]
        return s0 + (s1 - s0) * (batch - b0) / (b1 - b0)

    def exec_p99_seconds(self, batch: int) -> float:
        """The 99th percentile of one execution of *batch* requests under the curve's lognormal noise
        (mean 1, sigma `jitter_sigma`). The queue timeout is taken off the SLO with it: a request that
        queued up to the timeout and then rode a slower-than-mean largest batch still ends in time."""
        sigma = self.jitter_sigma
        return self.exec_seconds(batch) * math.exp(-0.5 * sigma * sigma + NormalDist().inv_cdf(0.99) * sigma)

    def throughput(self, batch: int) -> float:
        """Requests per second one instance serves when every execution has *batch* requests."""
        return batch / self.exec_seconds(batch)

    def max_throughput(self) -> float:
        return max(self.throughput(b) for b in range(1, self.max_batch + 1))

    def scaled(self, factor: float) -> ServiceCurve:
        """The same curve with every execution *factor* times longer (for rate-scaled demos)."""
        return ServiceCurve(tuple((b, s * factor) for b, s in self.points), self.jitter_sigma)

    def to_pairs(self) -> list[list[float]]:
        return [[b, s] for b, s in self.points]


def curve_capacity(curve: ServiceCurve, headroom: float = 0.85) -> float:
    """Capacity of a replica on *curve* with queueing headroom: a fraction of its peak batch throughput.

    Used when no profile is given (the simulator knows its own curve); 0.85 keeps the queue short
    enough that P99 stays within a few executions of the largest batch.
    """
    return curve.max_throughput() * headroom
