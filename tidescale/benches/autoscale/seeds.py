"""tidescale on other draws of the same scenarios (`bench autoscale --extra-seed N`).

One seed is one draw of Poisson arrivals and of the phases of Prometheus' scrape and the HPA's sync
(`closedloop.with_seed`): where a surge falls within the HPA's 15 s sync can gain or lose a whole
sync, so a verdict a point from its goal may flip on the next draw. The extra
seeds rerun tidescale's three delivery modes, the oracle and the peers at the points
`peer_draws.settings_to_rerun` names (not their whole sweeps), and judge each draw against the same
goals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidescale.benches.autoscale import optimum
from tidescale.benches.autoscale import scenarios as bench
from tidescale.benches.autoscale.closedloop import SimParams, recorded_offsets, with_seed
from tidescale.benches.autoscale.goals import GOALS, JUDGED_ROWS, verdict
from tidescale.benches.forked import fork_map
from tidescale.benches.report import recorded
from tidescale.benches.stats import ci_text, interval

MEASURES = ("requests_within_slo", "windows_within_slo", "cost_vs_oracle")
# Recorded per draw where a scenario's load outgrows maxReplicas (`closedloop.saturation_scores`).
SATURATION_MEASURES = ("saturated_s", "scale_downs_saturated", "saturated_at_max")
# The draws the shipped defaults were tuned on (the page's seed and the extra seeds of the runs that
# chose them): any other seed is held out, and the page reports the goals on those apart.
TUNED_SEEDS = (0, 1, 2, 3)


def seed_spread(available: Mapping[str, bench.BenchScenario], names: Sequence[str], seeds: Sequence[int],
                params: SimParams, capacity_rps: float, replica_rps: float, headroom: float,
                progress: Callable[[str], None] = lambda _m: None, oracle_search: int = optimum.MAX_EVALUATIONS,
                jobs: int = 1, sizing: str | None = None,
                peer_settings: Mapping[str, Mapping[str, tuple[float, ...]]] | None = None) -> dict[str, Any]:
    """`{"seeds": [...], "scenarios": {scenario: {seed: {"bound": b, "rows": {row: measures},
    "peers": {peer@setting: measures}}}}}`, the peers at *peer_settings*`[scenario]`; *jobs* draws at
    once (`forked.fork_map`)."""

    def one_draw(draw: tuple[int, str]) -> dict[str, Any]:
        seed, name = draw
        seeded = with_seed(params, seed)

        def tell(message: str) -> None:
            if jobs == 1:  # a forked worker cannot draw the status line
                progress(f"seed {seed}: {message}")

        sc = available[name]
        settings = (peer_settings or {}).get(name, {})
        scores, _ = bench.run_scenario(sc, ["tidescale", "oracle", *settings], seeded, capacity_rps, tell, headroom,
                                       settings=settings, oracle_search=oracle_search, sizing=sizing)
        bound = bench.scenario_bound(sc, seed, capacity_rps, replica_rps, GOALS["requests_within_slo"])
        return {"clock_offsets_s": recorded_offsets(seeded),
                "bound": None if bound is None else recorded(bound.requests_within_slo),
                "rows": {row: _measures(scores[row]) for row in JUDGED_ROWS},
                "peers": {bench.sweep_row(peer, v): _measures(scores[bench.sweep_row(peer, v)])
                          for peer, values in settings.items() for v in values}}

    draws = [(seed, name) for seed in seeds for name in names]
    results = fork_map(one_draw, draws, jobs, lambda d: progress(f"seed {d[0]}: {d[1]} done"))
    out: dict[str, dict[str, Any]] = {}
    for (seed, name), result in zip(draws, results, strict=True):
        out.setdefault(name, {})[str(seed)] = result
    return {"seeds": list(seeds), "scenarios": out}


def _measures(score: Mapping[str, Any]) -> dict[str, Any]:
    return {k: recorded(score[k]) for k in (*MEASURES, *SATURATION_MEASURES) if k in score}


def _cell(scenario: str, row: Mapping[str, Any], bound: float | None) -> tuple[str, bool]:
    v = verdict(scenario, row, bound)
    cost = "–" if row["cost_vs_oracle"] is None else f"{row['cost_vs_oracle']:.3f}×"  # 1.10 could be over 1.10
    met = v.slo and v.cost
    return f"{v.slo_text}, {cost}: {'yes' if met else '**no**'}", met


def mean_draw(draws: Sequence[tuple[Mapping[str, Any], float | None]]) -> tuple[dict[str, Any], float | None]:
    """The mean row and mean bound of (row, bound) draws: `verdict` of the pair then judges the mean
    distance to the bound, the mean shares within the SLO and the mean cost."""
    def mean(values: list[Any]) -> float | None:
        return None if any(v is None for v in values) else sum(values) / len(values)

    return ({k: mean([row[k] for row, _ in draws]) for k in MEASURES}, mean([bound for _, bound in draws]))


def seed_lines(doc: Mapping[str, Any]) -> list[str]:
    """The SLO and cost verdicts of each delivery mode on the page's seed and on every extra seed."""
    spread = doc.get("seeds")
    if not spread:
        return []
    main = doc["setup"]["seed"]
    seeds = spread["seeds"]
    out = ["## Across seeds", "",
           f"The tables above are one draw (seed {main}): its Poisson arrivals and its phases of Prometheus' "
           "scrape and the HPA's sync, i.e. where each surge falls in their 15 s cycles. `--extra-seed` reran "
           "tidescale's three delivery modes and the oracle on other draws of the same scenarios (the peers too, at "
           "their chosen points: below, Peers on every draw). Each cell: the SLO measure, the "
           "cost against that draw's oracle, and whether both goals are met; then the same for the mean of the "
           "draws, and the mean with its 95 % confidence interval (Student's t over the draws) of the requests "
           "within the SLO and of the cost.", "",
           "| scenario | row | " + " | ".join([f"seed {main} (above)", *(f"seed {s}" for s in seeds)])
           + " | mean of the draws | draws meeting both | requests within SLO, 95 % CI | cost, 95 % CI |",
           "|---|---|" + "---|" * (len(seeds) + 2) + "---:|---:|---:|"]
    for name, row, by_seed in judged_draws(doc):
        draws = list(by_seed.values())
        cells = [_cell(name, r, b) for r, b in draws]
        met = sum(ok for _, ok in cells)
        mean_text, _ = _cell(name, *mean_draw(draws))
        out.append(f"| {name} | {row} | " + " | ".join(text for text, _ in cells)
                   + f" | {mean_text} | {met} of {len(cells)} | "
                   + _ci([100 * r["requests_within_slo"] for r, _ in draws], "{:.2f} ± {:.2f} %") + " | "
                   + _ci([r["cost_vs_oracle"] for r, _ in draws], "{:.3f} ± {:.3f}×") + " |")
    return [*out, "", *held_out_lines(doc)]


Draw = tuple[Mapping[str, Any], float | None]


def judged_draws(doc: Mapping[str, Any]) -> list[tuple[str, str, dict[int, Draw]]]:
    """(scenario, judged row, {seed: (row's measures, bound)}) for every judged row the page's seed ran,
    the page's seed first, then the extra seeds in their order."""
    spread, main = doc["seeds"], doc["setup"]["seed"]
    out = []
    for name, per_seed in spread["scenarios"].items():
        main_rows = doc["scenarios"].get(name, {})
        main_bound = doc.get("bounds", {}).get(name, {}).get("requests_within_slo_max")
        for row in JUDGED_ROWS:
            if row in main_rows:
                out.append((name, row, {main: (main_rows[row], main_bound),
                                        **{s: (per_seed[str(s)]["rows"][row], per_seed[str(s)]["bound"])
                                           for s in spread["seeds"]}}))
    return out


def held_out_lines(doc: Mapping[str, Any]) -> list[str]:
    """The goals on the draws the defaults were tuned on (`TUNED_SEEDS`) against those held out, per row."""
    spread = doc["seeds"]
    seeds = [doc["setup"]["seed"], *spread["seeds"]]
    held = [s for s in seeds if s not in TUNED_SEEDS]
    if not held:
        return []
    out = ["### Tuned on, held out", "",
           f"The shipped defaults were tuned on seeds {', '.join(map(str, TUNED_SEEDS))}; seeds "
           f"{', '.join(map(str, held))} were never looked at while tuning. Per row: the draws meeting both goals, "
           "and the mean with its 95 % confidence interval of the requests within the SLO and of the cost.", "",
           "| scenario | row | tuned: met | held out: met | tuned: requests | held out: requests | tuned: cost "
           "| held out: cost |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, row, draws in judged_draws(doc):
        cells = []
        for group in ([d for s, d in draws.items() if s in TUNED_SEEDS],
                      [d for s, d in draws.items() if s not in TUNED_SEEDS]):
            met = sum(_cell(name, r, b)[1] for r, b in group)
            cells.append((f"{met} of {len(group)}",
                          _ci([100 * r["requests_within_slo"] for r, _ in group], "{:.2f} ± {:.2f} %"),
                          _ci([r["cost_vs_oracle"] for r, _ in group], "{:.3f} ± {:.3f}×")))
        (tm, tr, tc), (hm, hr, hc) = cells
        out.append(f"| {name} | {row} | {tm} | {hm} | {tr} | {hr} | {tc} | {hc} |")
    return [*out, ""]


def _ci(values: Sequence[float | None], fmt: str) -> str:
    """Mean ± the half-width of its 95 % confidence interval, over the draws that have a value (one
    draw: its value alone)."""
    known = [v for v in values if v is not None]
    found = interval(known)
    if found is None:
        return ci_text(known[0] if known else None, None, fmt)
    return ci_text(*found, fmt)
