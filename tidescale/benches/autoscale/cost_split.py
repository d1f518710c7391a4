"""Where tidescale's replica-hours above the optimum go (`bench cost`), by the decision behind them.

A cost of 1.2× the optimum says how much, not why. Here tidescale (as shipped, adapter mode) and
each draw's searched optimum run the same arrivals; every second, the replicas tidescale had asked
for above (or below) the optimum's count are put down to the decision that set the count it had
published then: a scale-up and its reason (`lookahead`, `panic`, `queue`, `withdrawn`, ...), or a
scale-down and its reason. A scale-down "to a count still above the optimum's" is the margin its
shares and the down delay keep; a scale-up's is what it asked for that the optimum did without.
The split is what a tuning change must remove, and what it may not (docs/autoscaler.md, "Where
the Azure trace's cost goes").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tidescale.benches.autoscale import policies as pol
from tidescale.benches.autoscale import scenarios as bench
from tidescale.benches.autoscale.closedloop import RunResult, SimParams, run_policy, score, with_seed
from tidescale.benches.autoscale.report import QUICK_S, BenchOptions, replica_setup, trace_flags, trace_slug
from tidescale.benches.autoscale.seeds import TUNED_SEEDS
from tidescale.benches.autoscale.tuning_pairs import check_draws, default_scenarios, paths
from tidescale.benches.forked import fork_map
from tidescale.benches.report import BENCH_DIR, markdown_table, recorded, save_figure, write_page

PAGE = "autoscale-cost"
DEFAULT_DRAWS = 13  # the autoscale page's draws: its seed and twelve extra
OPENING = "the opening fleet"  # the count before tidescale first published one


def origin_label(previous: int | None, count: int, reason: str) -> str:
    """What set *count*, published after *previous*: the direction and the recommendation's reason."""
    if previous is None:
        return f"first answer: {reason}"
    return f"{'up' if count > previous else 'down'}: {reason}"


class PublishedOrigins:
    """Remembers when tidescale's published count changed and why (`origin_label`): it wraps the
    target's `publish`, so the reason is the recommendation that produced the count, even when a
    slow evaluation in the same tick then records another."""

    def __init__(self, policy: pol.TidescalePolicy) -> None:
        self.changes: list[tuple[float, str]] = []
        state = policy.state
        publish = state.publish

        def recorded_publish(count: int, now: float, lag_s: float) -> None:
            before = state.published
            if count != before:
                last = state.recommender.last
                self.changes.append((now, origin_label(before, count, last.reason if last else "unknown")))
            publish(count, now, lag_s)

        state.publish = recorded_publish  # type: ignore[method-assign]

    def at(self, grid: np.ndarray) -> list[str]:
        """The origin of the count published at each time of *grid* (`OPENING` before the first)."""
        times = [-np.inf, *(t for t, _ in self.changes)]
        return [str(o) for o in step_values(times, [OPENING, *(label for _, label in self.changes)], grid)]


def step_values(times: Sequence[float], values: Sequence[int] | Sequence[str], grid: np.ndarray) -> np.ndarray:
    """A step function's value at each time of *grid*: the last of *values* set at or before it (the
    first before the first time)."""
    index = np.searchsorted(np.asarray(times, dtype=float), grid, side="right") - 1
    return np.asarray(values)[np.maximum(index, 0)]


def split_by_origin(ours: np.ndarray, optimum: np.ndarray, origins: Sequence[str], step_s: float
                    ) -> dict[str, dict[str, float]]:
    """Replica-seconds above and below the optimum's count, by the origin of ours at each step."""
    out: dict[str, dict[str, float]] = {}
    for mine, best, origin in zip(ours, optimum, origins, strict=True):
        gap = float(mine - best) * step_s
        if gap:
            found = out.setdefault(origin, {"above_s": 0.0, "below_s": 0.0})
            found["above_s" if gap > 0 else "below_s"] += abs(gap)
    return out


def one_draw(sc: bench.BenchScenario, params: SimParams, capacity_rps: float) -> dict[str, Any]:
    """tidescale and the optimum on one draw: both runs' replica-hours and tidescale's split."""
    arrivals, end, needed, initial, p = bench.draw_setup(sc, params, capacity_rps)
    policy = bench.make_policy("tidescale", initial, capacity_rps, sc.cold_start_s, [], params.slo_latency_threshold_s,
                               sync_offset_s=p.sync_offset_s, history=bench.history_samples(sc, params.seed),
                               max_replicas=sc.max_replicas, budget_shares=p.budget_shares)
    assert isinstance(policy, pol.TidescalePolicy)
    origins = PublishedOrigins(policy)
    ours = run_policy(policy, arrivals, end, initial, p)
    levels = bench.optimal_schedule(sc, arrivals, end, initial, needed, p).levels
    best = run_policy(bench.make_policy("oracle", initial, capacity_rps, sc.cold_start_s, list(levels),
                                        params.slo_latency_threshold_s, oracle_ahead_s=sc.oracle_ahead_s,
                                        max_replicas=sc.max_replicas), arrivals, end, initial, p)
    grid = np.arange(bench.WARMUP_S, end, 1.0)

    def hours(run: RunResult) -> float:
        found = score(run, params.slo_latency_threshold_s, bench.WARMUP_S, end, sc.surge_at_s)["replica_hours"]
        return float(found or 0.0)

    split = split_by_origin(step_values(ours.times, ours.replicas, grid), step_values(best.times, best.replicas, grid),
                            origins.at(grid), 1.0)
    return {"tidescale_hours": recorded(hours(ours)), "optimum_hours": recorded(hours(best)),
            "split_hours": {o: {"above_h": recorded(s["above_s"] / 3600.0), "below_h": recorded(s["below_s"] / 3600.0)}
                            for o, s in split.items()}}


def summed(draws: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A scenario's draws together: replica-hours of both, and the split summed over the draws."""
    split: dict[str, dict[str, float]] = {}
    for d in draws.values():
        for origin, s in d["split_hours"].items():
            found = split.setdefault(origin, {"above_h": 0.0, "below_h": 0.0})
            found["above_h"] += s["above_h"]
            found["below_h"] += s["below_h"]
    ours = sum(d["tidescale_hours"] for d in draws.values())
    best = sum(d["optimum_hours"] for d in draws.values())
    return {"tidescale_hours": recorded(ours), "optimum_hours": recorded(best),
            "ratio": recorded(ours / best) if best else None,
            "split": {o: {k: recorded(v) for k, v in s.items()} for o, s in split.items()}}


def run(names: Sequence[str] | None = None, draws: int = DEFAULT_DRAWS, jobs: int = 1,
        progress: Callable[[str], None] = lambda _m: None, trace: Path | None = None,
        target_rps: float | None = None, trace_unit: str | None = None) -> dict[str, Any]:
    """Each scenario on seeds 0 .. *draws* - 1: the JSON document. A *trace* (`--trace`) is replayed as
    the autoscale bench's `--quick --trace` replays it (an hour in 20 minutes, at *target_rps* or the
    base rate), its draws shifted in time; alone unless *names* name others beside `trace`."""
    check_draws(draws)
    opts = BenchOptions(list(names) if names else None, quick=True, jobs=jobs, trace=trace, target_rps=target_rps,
                        trace_unit=trace_unit)
    available = bench.build_scenarios(QUICK_S, opts.base_rps, trace, target_rps, trace_unit)
    chosen = list(names) if names else ["trace"] if trace else default_scenarios(available)
    bench.check_scenarios(chosen, list(available))
    if reading := (traced := opts.traced(available)).get("trace_reading"):
        progress(f"trace: {reading}")
    curve, queue_policy, cfg, capacity = replica_setup(opts)
    params = SimParams(curve, cfg, bench.DEFAULT_COLD_START_S, opts.slo_s)
    started = time.monotonic()
    work = [(name, seed) for name in chosen for seed in range(draws)]
    results = fork_map(lambda w: one_draw(available[w[0]], with_seed(params, w[1]), capacity), work, jobs,
                       lambda w: progress(f"{w[0]}: seed {w[1]} done"))
    by_scenario: dict[str, dict[str, Any]] = {}
    for (name, seed), result in zip(work, results, strict=True):
        by_scenario.setdefault(name, {})[str(seed)] = result
    return {
        "benchmark": page_name(names, trace.name if trace else None),
        "setup": {"command": "tidescale bench cost" + trace_flags(traced)
                  + "".join(f" --scenario {n}" for n in names or ()),
                  **traced,
                  "duration_s": QUICK_S, "base_rps": opts.base_rps, "slo_latency_threshold_s": opts.slo_s,
                  "capacity_rps_per_replica": round(capacity, 1), "queue_policy": queue_policy["kind"],
                  "seeds": list(range(draws)), "tuned_seeds": list(TUNED_SEEDS), "delivery": "adapter",
                  "jobs": jobs, "scenarios": chosen, "wall_s": round(time.monotonic() - started, 1)},
        "scenarios": {name: {"draws": d, "total": summed(d)} for name, d in by_scenario.items()},
    }


def page_name(names: Sequence[str] | None, trace: str | None = None) -> str:
    """`autoscale-cost`, with the trace replayed (`--trace`, by its file's name) and the scenarios
    named (`--scenario`) in its name: a run of either is recorded beside the default page."""
    return PAGE + (f"-trace-{trace_slug(trace)}" if trace else "") + "".join(f"-{n}" for n in names or ())


def lines(doc: Mapping[str, Any], png: str | None = None) -> list[str]:
    """The page: per scenario, tidescale against the optimum, then the split by origin."""
    setup = doc["setup"]
    out = ["# Benchmark: where tidescale's replica-hours above the optimum go", "",
           f"Generated by `{setup['command']} --draws {len(setup['seeds'])}` (tidescale as shipped, "
           f"{setup['delivery']} mode, and each draw's searched optimum on the same arrivals; the fast "
           "simulator).", "",
           f"- seeds {setup['seeds'][0]}–{setup['seeds'][-1]}, {scenarios_text(setup)}, base "
           f"{setup['base_rps']:g} req/s, SLO P99 ≤ {setup['slo_latency_threshold_s']:g} s; replica capacity "
           f"at the SLO {setup['capacity_rps_per_replica']} req/s; queue policy {setup['queue_policy']}",
           "- every second, tidescale's replicas (asked for, starting included) above or below the "
           "optimum's are put down to the decision that set the count tidescale had published then: "
           "`up: <reason>` or `down: <reason>` (the recommendation's reason, docs/autoscaler.md); "
           "summed over the draws",
           "- a `down:` origin above the optimum is the margin the scale-down kept (its share and the "
           "down delay); an `up:` one is what the scale-up asked for that the optimum did without", ""]
    for name in setup["scenarios"]:
        total = doc["scenarios"][name]["total"]
        best = total["optimum_hours"]
        out += [f"## {name}", "",
                f"tidescale {total['tidescale_hours']:.3f} replica-hours, the optimum {best:.3f} "
                f"(**{total['ratio']:.3f}×**), over {len(doc['scenarios'][name]['draws'])} draws.", ""]
        rows = sorted(total["split"].items(), key=lambda kv: -kv[1]["above_h"])
        out.append(markdown_table(
            ("what set tidescale's count", "replica-hours above the optimum", "of the optimum's", "below it"),
            [(f"`{o}`", f"{s['above_h']:.3f}", f"{100 * s['above_h'] / best:.1f} %" if best else "–",
              f"{s['below_h']:.3f}") for o, s in rows]))
        out.append("")
    if png:
        out += [f"![replica-hours above the optimum by origin]({png})", ""]
    out.append(f"Wall time {setup['wall_s']:.0f} s with {setup['jobs']} job(s).")
    return out


def scenarios_text(setup: Mapping[str, Any]) -> str:
    """What the scenarios are: 20-minute ones, and how the page's `trace`, where it has one, replayed
    the trace named (its own length, at a third of its pace)."""
    others = [n for n in setup["scenarios"] if n != "trace"]
    text = "20-minute scenarios" if others else ""
    if not setup.get("trace"):
        return text
    rate = setup.get("target_rps") or setup["base_rps"]
    return (text + " and " if text else "") + (
        f"`trace`: the trace {trace_slug(setup['trace'])} played three times as fast (an hour in 20 minutes), "
        f"rescaled to {rate:g} req/s on average, each draw but seed 0 shifted in time"
        + (f" ({setup['trace_reading']})" if setup.get("trace_reading") else ""))


def plot(doc: Mapping[str, Any], path: Path) -> None:
    """One bar per scenario: the replica-hours above the optimum, as shares of the optimum's, stacked
    by origin (the largest first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(doc["setup"]["scenarios"])
    origins = sorted({o for n in names for o in doc["scenarios"][n]["total"]["split"]},
                     key=lambda o: -sum(doc["scenarios"][n]["total"]["split"].get(o, {}).get("above_h", 0.0)
                                        for n in names))
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(names) + 2.2))
    left = np.zeros(len(names))
    colours = plt.get_cmap("tab20")
    for k, origin in enumerate(origins):
        share = np.array([100 * doc["scenarios"][n]["total"]["split"].get(origin, {}).get("above_h", 0.0)
                          / doc["scenarios"][n]["total"]["optimum_hours"] for n in names])
        ax.barh(range(len(names)), share, left=left, label=origin, color=colours(k % 20))
        left += share
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set(xlabel="replica-hours above the optimum, % of the optimum's (summed over the draws)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"tidescale above the optimum, by what set its count ({len(doc['setup']['seeds'])} draws)")
    save_figure(fig, path)


def write(doc: dict[str, Any], out_dir: Path = BENCH_DIR) -> tuple[Path, Path]:
    """Write the page and its plot into *out_dir*; their paths."""
    md, png = paths(doc["benchmark"], out_dir)
    plot(doc, png)
    write_page(md.stem, "\n".join(lines(doc, png.name)), doc, out_dir)
    return md, png
