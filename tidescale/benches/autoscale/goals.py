"""Issue 45's goals for tidescale in `bench autoscale`, and the verdict of one row against them.

Steady scenarios: `GOALS` for requests and 1-minute windows within the SLO, at no more than
`STEADY_COST` x the oracle's replica-hours (1.15 since the oracle is the searched optimum; 1.10
against the per-second oracle before it, which cost 4-30 % more). Surge scenarios (those with a no-foresight bound):
requests within the SLO within `DEFAULT_SURGE_GAP_PT` points of the bound (`SURGE_GAP_PT` where a
scenario has its own), at no more than `SURGE_COST` x the oracle. Dominance by a peer's frontier
is judged apart, on the run that swept the peers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GOALS = {"requests_within_slo": 0.999, "windows_within_slo": 0.99, "cost_vs_oracle": 1.15}
SURGE_GAP_PT = {"flash-crowd-10x": 3.0}
DEFAULT_SURGE_GAP_PT = 1.0
SURGE_COST, STEADY_COST = 1.5, GOALS["cost_vs_oracle"]
# The rows judged: tidescale as shipped (prometheus-adapter), through KEDA asking the recommender, direct.
JUDGED_ROWS = ("tidescale", "tidescale+keda", "tidescale+direct")


@dataclass(frozen=True)
class Verdict:
    slo: bool
    slo_text: str  # "100.00 % / 100 %" (steady) or "-1.35 pt from the bound" (surge)
    cost: bool


def verdict(scenario: str, row: Mapping[str, Any], bound_max: float | None) -> Verdict:
    """*row* (requests/windows within the SLO, cost vs oracle) against the goals of *scenario*;
    *bound_max*: the scenario's no-foresight bound on requests within the SLO, None when steady."""
    if bound_max is None:
        slo = (row["requests_within_slo"] >= GOALS["requests_within_slo"]
               and row["windows_within_slo"] >= GOALS["windows_within_slo"])
        text = f"{100 * row['requests_within_slo']:.2f} % / {100 * row['windows_within_slo']:.0f} %"
        limit = STEADY_COST
    else:
        gap = 100 * (row["requests_within_slo"] - bound_max)
        slo = gap >= -SURGE_GAP_PT.get(scenario, DEFAULT_SURGE_GAP_PT)
        text = f"{gap:+.2f} pt from the bound"
        limit = SURGE_COST
    cost = row["cost_vs_oracle"] is not None and row["cost_vs_oracle"] <= limit
    return Verdict(slo, text, cost)
