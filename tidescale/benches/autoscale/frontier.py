"""Pareto frontiers of a peer's settings, the point a peer is judged by, and who dominates whom.

A point is better when it is cheaper (replica-hours) and serves more within the SLO (requests and
1-minute windows). The frontier keeps the points no other point of the sweep dominates, on all three
measures: a two-measure frontier could drop a point that beats tidescale on windows, and the
dominance check must see every such point.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    """One setting's measures (compare values as recorded, i.e. already rounded)."""

    setting: float
    requests_within_slo: float
    windows_within_slo: float
    cost: float  # replica-hours, or any measure proportional to them

    @property
    def measures(self) -> tuple[float, float, float]:
        return self.requests_within_slo, self.windows_within_slo, self.cost


def dominates(a: Point, b: Point) -> bool:
    """*a* costs no more and serves no less on both SLO measures, and is strictly better on one."""
    no_worse = (a.cost <= b.cost and a.requests_within_slo >= b.requests_within_slo
                and a.windows_within_slo >= b.windows_within_slo)
    return no_worse and a.measures != b.measures


def pareto_frontier(points: Iterable[Point]) -> list[Point]:
    """The points no other point dominates, cheapest first; of points with identical measures
    (settings that ran the same way) the first in sweep order stands for them all."""
    unique: list[Point] = []
    for p in points:
        if all(p.measures != q.measures for q in unique):
            unique.append(p)
    kept = [p for p in unique if not any(dominates(q, p) for q in unique)]
    return sorted(kept, key=lambda p: (p.cost, -p.requests_within_slo, -p.windows_within_slo))


def best_point(frontier: list[Point], goal_requests: float, goal_windows: float) -> Point:
    """The setting an operator would ship: the cheapest frontier point meeting both SLO goals
    (ties: more requests, then more windows); when none meets them, the one serving the most
    requests within the SLO (ties: more windows, then cheaper)."""
    if not frontier:
        raise ValueError("a frontier needs at least one point")
    meeting = [p for p in frontier if p.requests_within_slo >= goal_requests and p.windows_within_slo >= goal_windows]
    if meeting:
        return min(meeting, key=lambda p: (p.cost, -p.requests_within_slo, -p.windows_within_slo))
    return min(frontier, key=lambda p: (-p.requests_within_slo, -p.windows_within_slo, p.cost))


def dominated_by(me: Point, candidates: Mapping[str, Point]) -> list[str]:
    """The names of the candidates that dominate *me*, in the candidates' order."""
    return [name for name, p in candidates.items() if dominates(p, me)]
