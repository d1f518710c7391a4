"""Queueing sizing: the SLO's latency budget split between the batching server and the bursts (pure).

A replica's load test (the capacity profile) says how fast it serves Poisson arrivals with its P99
within a latency budget: the latency-vs-load curve of a batching server, flat far from saturation
and steep near it. Bursts beyond Poisson wait in a queue on top of that P99 (burst.py's fluid
queue). A request is within the SLO when both fit, so the budget is split: the server's P99 within
a share f of the SLO, the bursts' wait within the rest, (1 - f) x the SLO, for all but
`burst_late_share` of the arrivals. Each split asks for a fleet of
rate x burst factor(wait budget) / capacity(f x SLO) replicas; the sizing takes the cheapest.

So a smooth stream is sized near the server's own curve (no wait budget needed), a bursty one with
the margin its bursts ask for, and a tight SLO, where the server's curve is steep, pays for the
wait budget in capacity rather than exceeding the SLO by it (burst sizing's fixed half of the SLO
for the bursts comes on top of a P99 already at the SLO).

The curve is kept as shares: `(f, capacity at f x SLO / capacity at the SLO)`, so it scales with
the capacity the recommender learns online, and holds for any SLO the profile covers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tidescale.contracts.errors import UsageError

# The budget fractions a profile is read at (`budget_shares`): a tenth of the SLO apart.
BUDGET_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
MAX_BUDGET_SHARES = 64

BudgetShares = tuple[tuple[float, float], ...]


def check_budget_shares(shares: Sequence[tuple[float, float]]) -> BudgetShares:
    """The shares as a tuple, or UsageError naming the bad row: fractions strictly ascending in
    (0, 1), shares in (0, 1] and not falling (a larger budget never carries less)."""
    if len(shares) > MAX_BUDGET_SHARES:
        raise UsageError(f"budget_shares: at most {MAX_BUDGET_SHARES} rows, got {len(shares)}")
    out: list[tuple[float, float]] = []
    for i, row in enumerate(shares):
        if len(row) != 2:
            raise UsageError(f"budget_shares[{i}]: need [fraction of the SLO, share of the capacity], got {row!r}")
        f, s = float(row[0]), float(row[1])
        if not (0 < f < 1 and 0 < s <= 1):
            raise UsageError(f"budget_shares[{i}]: need 0 < fraction < 1 and 0 < share <= 1, got [{f:g}, {s:g}]")
        if out and (f <= out[-1][0] or s < out[-1][1]):
            raise UsageError(f"budget_shares[{i}]: fractions must ascend and shares not fall, got [{f:g}, {s:g}] "
                             f"after [{out[-1][0]:g}, {out[-1][1]:g}]")
        out.append((f, s))
    return tuple(out)


def shares_from_capacities(capacity_at: Callable[[float], float | None], slo_s: float,
                           fractions: Sequence[float] = BUDGET_FRACTIONS) -> BudgetShares:
    """The budget shares of a replica whose capacity within a P99 budget is *capacity_at(budget)*
    (None where no load meets it): each fraction's capacity over the capacity at the SLO, held to
    not falling (a load test's noise can read a larger budget a little slower)."""
    full = capacity_at(slo_s)
    if full is None or not full > 0:
        raise UsageError(f"no capacity within the SLO of {slo_s:g}s: the budget cannot be split")
    out: list[tuple[float, float]] = []
    for f in fractions:
        cap = capacity_at(f * slo_s)
        if cap is None or not cap > 0:
            continue
        share = min(1.0, cap / full)
        out.append((f, max(share, out[-1][1]) if out else share))
    return tuple(out)


def cheapest_split(shares: BudgetShares, factor_at: Callable[[float], float | None], slo_s: float
                   ) -> tuple[float, float] | None:
    """(margin, share) of the split that needs the fewest replicas: margin / share smallest, the
    server's whole budget (share 1, the bursts' factor at no wait) among the candidates; ties go to
    the larger budget for the server. None while the bursts have no factor yet (too few readings).

    The splits are tried from the server's whole budget down, and a split whose share alone costs
    as much as the best so far (a factor is at least 1) is not computed: a smooth stream's factor
    is 1 at a small wait, and then one or two fluid-queue searches settle it, not ten."""
    best: tuple[float, float, float] | None = None  # (margin / share, margin, share)
    for f, share in reversed((*shares, (1.0, 1.0))):
        if best is not None and 1.0 / share >= best[0]:
            continue
        margin = factor_at((1.0 - f) * slo_s)
        if margin is None or not math.isfinite(margin):
            return None
        cost = margin / share
        if best is None or cost < best[0]:
            best = (cost, margin, share)
    return None if best is None else (best[1], best[2])
