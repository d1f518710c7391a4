"""What the demo saw, second by second: load, replicas, latency, queue, alerts."""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Sample:
    t: float
    offered_rps: float
    completed_rps: float
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    replicas_ready: int
    replicas_total: int
    replicas_desired: int | None
    queue_depth: float | None
    firing: tuple[str, ...] = ()
    replica_crashes: int = 0  # unrequested server exits so far (each one restarted like a pod)
    # What the recommender read on the cluster (None elsewhere): the share of its rate window's
    # requests slower than the SLO inside Triton (its `slow_share`), and its last decision.
    slow_share: float | None = None
    decision: str | None = None
    # On the cluster: how each Triton pod's completions of the autoscaled model split (req/s by pod, from
    # Prometheus), and the share of the machine's cores busy over the last sample (/proc/stat): what
    # tells a replica the Service does not balance to from a machine too busy to serve.
    pod_rps: dict[str, float] | None = None
    host_cpu_busy: float | None = None


def _finite(values: list[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


@dataclass
class Timeline:
    samples: list[Sample] = field(default_factory=list)

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)

    def replicas_range(self) -> dict[str, int]:
        totals = [s.replicas_ready for s in self.samples] or [0]
        return {"min": min(totals), "max": max(totals)}

    def desired_falls(self, start_s: float, end_s: float) -> list[dict[str, float | int]]:
        """Each time the HPA's desired replicas fell between two samples within [start_s, end_s): what a
        surge or an overload must never see (a scale-down while demand outruns the fleet)."""
        inside = [s for s in self.samples if start_s <= s.t < end_s and s.replicas_desired is not None]
        return [{"t": round(b.t, 1), "from": a.replicas_desired, "to": b.replicas_desired}
                for a, b in itertools.pairwise(inside)
                if a.replicas_desired is not None and b.replicas_desired is not None
                and b.replicas_desired < a.replicas_desired]

    def load_spread(self, start_s: float, end_s: float) -> dict[str, float | None]:
        """How the autoscaled model's completions split over its pods within [start_s, end_s): the mean
        share of the busiest pod while two or more were Ready, against the even split (1/Ready). A
        Service that balances connections, not requests, leaves it near 1 (None: never two Ready)."""
        return load_spread([(s.replicas_ready, s.pod_rps) for s in self.samples if start_s <= s.t < end_s])

    def alerts_seen(self) -> list[str]:
        return sorted({a for s in self.samples for a in s.firing})

    def worst(self, attr: str) -> float | None:
        vals = _finite([getattr(s, attr) for s in self.samples])
        return max(vals) if vals else None

    def to_rows(self) -> list[dict[str, Any]]:
        return [{**asdict(s), "firing": list(s.firing)} for s in self.samples]


def load_spread(samples: list[tuple[int, dict[str, float] | None]]) -> dict[str, float | None]:
    """`Timeline.load_spread` over (Ready replicas, req/s by pod) pairs, as a demo's record holds them."""
    shares, even = [], []
    for ready, pod_rps in samples:
        rates = [v for v in (pod_rps or {}).values() if math.isfinite(v) and v >= 0]
        if ready >= 2 and sum(rates) > 0:
            shares.append(max(rates) / sum(rates))
            even.append(1 / ready)
    return {"busiest_pod_share": round(sum(shares) / len(shares), 3) if shares else None,
            "even_share": round(sum(even) / len(even), 3) if even else None}


class HostCpu:
    """The share of the machine's cores busy between two reads of /proc/stat (None where there is none)."""

    def __init__(self, stat: Path = Path("/proc/stat")) -> None:
        self.stat = stat
        self._last = self._read()

    def _read(self) -> tuple[int, int] | None:
        try:
            fields = [int(v) for v in self.stat.read_text().splitlines()[0].split()[1:]]
            return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)  # all, idle + iowait
        except (OSError, ValueError, IndexError):
            return None

    def busy(self) -> float | None:
        now, last = self._read(), self._last
        self._last = now
        if now is None or last is None or now[0] <= last[0]:
            return None
        return round(1.0 - (now[1] - last[1]) / (now[0] - last[0]), 3)
