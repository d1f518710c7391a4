"""The peers on every draw (`bench autoscale --extra-seed N`), and dominance judged across the draws.

A peer's knob is tuned in hindsight on the page's seed: its row is its best point there. One draw says
little of a point a few tenths of a percent from another, and a peer tuned on a draw is graded on it.
So the extra draws rerun each peer at the setting its sweep chose (held out, as tidescale's defaults
are on the seeds outside `seeds.TUNED_SEEDS`), and every peer point that dominated a tidescale row on
the page's seed, whether it still does on other arrivals and clock phases.

Every draw runs the same arrivals and clocks for every policy, so tidescale and a peer are compared
draw by draw: a point dominates a row across the draws when its means are no worse on the requests and
windows within the SLO and on the cost, and better on one; the verdict is *significant* where the 95 %
interval of the paired differences excludes zero, in the peer's favour, for at least one of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tidescale.benches.autoscale.goals import GOALS, JUDGED_ROWS
from tidescale.benches.autoscale.scenarios import sweep_row
from tidescale.benches.autoscale.seeds import MEASURES, TUNED_SEEDS
from tidescale.benches.report import recorded, save_figure
from tidescale.benches.stats import ci_text, interval

# +1 where more is better, -1 where less is (the cost)
BETTER = {"requests_within_slo": 1, "windows_within_slo": 1, "cost_vs_oracle": -1}


def settings_to_rerun(rows: Mapping[str, Mapping[str, Any]], frontiers: Mapping[str, Sequence[Mapping[str, Any]]]
                      ) -> dict[str, tuple[float, ...]]:
    """Per peer, the settings its extra draws run: its best point's on the page's seed, and those of
    its frontier points that dominated one of tidescale's judged rows there."""
    points = {sweep_row(peer, e["setting"]): (peer, float(e["setting"]))
              for peer, front in frontiers.items() for e in front}
    out: dict[str, set[float]] = {}
    for peer in frontiers:
        if "setting" in rows.get(peer, {}):
            out.setdefault(peer, set()).add(float(rows[peer]["setting"]))
    for row in JUDGED_ROWS:
        for name in rows.get(row, {}).get("dominated_by", []):
            if name in points:
                peer, value = points[name]
                out.setdefault(peer, set()).add(value)
    return {peer: tuple(sorted(values)) for peer, values in out.items()}


def page_seed_points(doc: Mapping[str, Any], scenario: str) -> dict[str, dict[str, Any]]:
    """The page seed's measures of every point the extra draws reran, by `peer@setting`."""
    sweeps = doc["sweeps"].get(scenario, {})
    out = {}
    rerun = {name: None for draw in doc["seeds"]["scenarios"][scenario].values() for name in draw.get("peers", {})}
    for name in rerun:
        peer = name.rpartition("@")[0]
        entry = next((e for e in sweeps.get(peer, []) if sweep_row(peer, e["setting"]) == name), None)
        if entry is not None:
            out[name] = {k: entry[k] for k in MEASURES}
    return out


def draws_by_point(doc: Mapping[str, Any], scenario: str) -> dict[str, list[dict[str, Any]]]:
    """Every judged tidescale row and every rerun peer point of *scenario*, with its measures on the
    page's seed and then on each extra seed, in the seeds' order (points some draw lacks left out)."""
    per_seed = doc["seeds"]["scenarios"][scenario]
    seeds = [str(s) for s in doc["seeds"]["seeds"]]
    first = {row: {k: doc["scenarios"][scenario][row][k] for k in MEASURES}
             for row in JUDGED_ROWS if row in doc["scenarios"][scenario]}
    first.update(page_seed_points(doc, scenario))
    out = {}
    for name, measures in first.items():
        drawn = [per_seed[s]["rows"].get(name) or per_seed[s].get("peers", {}).get(name) for s in seeds]
        if all(d is not None for d in drawn):
            out[name] = [measures, *drawn]
    return out


def spread(draws: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each measure's mean and the half-width of its 95 % interval over the draws (None: fewer than two
    draws with a value), and the draws meeting both SLO goals."""
    out: dict[str, Any] = {}
    for k in MEASURES:
        known = [d[k] for d in draws if d[k] is not None]
        found = interval(known)
        out[k] = {"mean": None if not known else recorded(sum(known) / len(known)),
                  "ci95": None if found is None else recorded(found[1])}
    out["draws"] = len(draws)
    out["draws_meeting_slo_goals"] = sum(d["requests_within_slo"] >= GOALS["requests_within_slo"]
                                         and d["windows_within_slo"] >= GOALS["windows_within_slo"] for d in draws)
    return out


Draws = Sequence[Mapping[str, Any]]


def paired(peer: Draws, row: Draws) -> dict[str, tuple[float, float] | None]:
    """Per measure, the mean and 95 % half-width of the peer's advantage over the row, draw by draw
    (positive: the peer is better), over the draws where both have a value."""
    out: dict[str, tuple[float, float] | None] = {}
    for k in MEASURES:
        diffs = [BETTER[k] * (p[k] - r[k]) for p, r in zip(peer, row, strict=True)
                 if p[k] is not None and r[k] is not None]
        out[k] = interval(diffs)
    return out


def dominance(peer: Draws, row: Draws) -> str | None:
    """"significant", "on the mean" (no worse on every mean, better on one, no interval clear of zero),
    or None where the peer's means do not dominate the row's."""
    advantage = paired(peer, row)
    if any(a is None for a in advantage.values()):
        return None
    means = [a[0] for a in advantage.values() if a is not None]
    if any(m < 0 for m in means) or all(m == 0 for m in means):
        return None
    return "significant" if any(a is not None and a[0] - a[1] > 0 for a in advantage.values()) else "on the mean"


def across_draws(doc: Mapping[str, Any]) -> dict[str, Any]:
    """`{"ci95": {scenario: {point: spread}}, "dominated_by": {scenario: {row: [{"point", "verdict"}]}},
    "held_out": {"seeds": [...], "ci95": ..., "dominated_by": ...}}`: over the page's seed and the extra
    seeds, then over the draws no one tuned on (the peers were tuned on the page's seed, tidescale's
    defaults on `TUNED_SEEDS`); "held_out" is None with fewer than two such draws."""
    seeds = [doc["setup"]["seed"], *doc["seeds"]["seeds"]]
    held = [k for k, s in enumerate(seeds) if s not in TUNED_SEEDS and s != doc["setup"]["seed"]]
    by_scenario = {scenario: draws_by_point(doc, scenario) for scenario in doc["seeds"]["scenarios"]}
    out = _judged(by_scenario)
    held_out = _judged({scenario: {name: [draws[k] for k in held] for name, draws in points.items()}
                        for scenario, points in by_scenario.items()})
    return {**out, "held_out": {"seeds": [seeds[k] for k in held], **held_out} if len(held) >= 2 else None}


def _judged(by_scenario: Mapping[str, Mapping[str, Draws]]) -> dict[str, Any]:
    ci95: dict[str, Any] = {}
    dominated: dict[str, Any] = {}
    for scenario, points in by_scenario.items():
        ci95[scenario] = {name: spread(d) for name, d in points.items()}
        peers = {n: d for n, d in points.items() if n not in JUDGED_ROWS}
        dominated[scenario] = {}
        for row in JUDGED_ROWS:
            if row in points:
                found = [(n, dominance(d, points[row])) for n, d in peers.items()]
                dominated[scenario][row] = [{"point": n, "verdict": v} for n, v in found if v is not None]
    return {"ci95": ci95, "dominated_by": dominated}


def _ci(value: Mapping[str, Any], fmt: str, scale: float = 1.0) -> str:
    mean, half = value["mean"], value["ci95"]
    return ci_text(None if mean is None else scale * mean, None if half is None else scale * half, fmt)


PERCENT_TOP = 100.5  # the plot's ceiling: room above a point at 100 % for its marker


def draws_png(frontier_png: Path) -> Path:
    """Where a page's plot of the draws goes: beside its frontier plot (autoscale-draws.png)."""
    return frontier_png.with_name(frontier_png.name.replace("-frontiers.png", "-draws.png"))


def plot(doc: Mapping[str, Any], path: Path) -> None:
    """A panel per scenario: each rerun point's mean cost against its mean requests within the SLO over
    all the draws, with their 95 % intervals as error bars; tidescale as shipped a black star."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    found = doc["seeds"]["across_draws"]["ci95"]
    names = list(found)
    cols = min(3, max(1, len(names)))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.8 * rows), squeeze=False)
    for ax, scenario in zip(axes.flat, names, strict=False):
        for k, (name, s) in enumerate(found[scenario].items()):
            cost, req = s["cost_vs_oracle"], s["requests_within_slo"]
            if cost["mean"] is None or name in JUDGED_ROWS[1:]:
                continue
            mine = name == "tidescale"
            ax.errorbar(cost["mean"], 100 * req["mean"], xerr=cost["ci95"] or 0.0, yerr=100 * (req["ci95"] or 0.0),
                        fmt="*" if mine else "o", markersize=14 if mine else 5, capsize=3, label=name,
                        color="black" if mine else plt.get_cmap("tab20")(k % 20))
        ax.set_xscale("log")
        for axis_format in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
            axis_format(FuncFormatter(lambda x, _pos: f"{x:.3g}×"))
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.legend(fontsize=6, ncol=2, loc="lower right")
        ax.set(title=scenario, xlabel="cost vs optimum (log), mean ± 95 % CI",
               ylabel="requests within SLO (%), mean ± 95 % CI")
        # No share passes 100 %: where every point sits there, matplotlib's ±5 % margin drew ticks at 104 %.
        ax.set_ylim(top=min(ax.get_ylim()[1], PERCENT_TOP))
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    save_figure(fig, path)


def lines(doc: Mapping[str, Any], png: str | None = None) -> list[str]:
    """The page's section: every rerun point's figures over the draws, then who dominates tidescale."""
    found = doc.get("seeds", {}).get("across_draws")
    if not found or all(name in JUDGED_ROWS for points in found["ci95"].values() for name in points):
        return []
    n = len(doc["seeds"]["seeds"]) + 1
    held = found.get("held_out")
    held_text = ("" if held is None else
                 f" Held out: the draws no one tuned on, seeds {', '.join(map(str, held['seeds']))} (the peers were "
                 f"tuned on seed {doc['setup']['seed']}, tidescale's defaults on seeds "
                 f"{', '.join(map(str, TUNED_SEEDS))}).")
    out = ["## Peers on every draw", "",
           f"Each peer ran again on the {n - 1} extra draws at the setting its sweep chose on seed "
           f"{doc['setup']['seed']} (its row above: tuned there in hindsight, held out on the others), and so did "
           "every peer point that dominated a tidescale row on that seed. Per point: the draws meeting both SLO "
           f"goals (≥ {100 * GOALS['requests_within_slo']:g} % of requests, ≥ {100 * GOALS['windows_within_slo']:g} % "
           f"of windows) and the mean with its 95 % confidence interval (Student's t) over all {n} draws."
           + held_text, "",
           "| scenario | point | draws meeting the SLO goals | requests within SLO | windows within SLO | cost |"
           + (" held out: meeting | held out: requests | held out: cost |" if held else ""),
           "|---|---|---:|---:|---:|---:|" + ("---:|---:|---:|" if held else "")]
    if png:
        out[4:4] = [f"![each rerun point's mean over the draws with its 95 % intervals, tidescale a star]({png})", ""]
    for scenario, points in found["ci95"].items():
        for name, s in points.items():
            line = f"| {scenario} | {name} | " + " | ".join(_figures(s, windows=True)) + " |"
            if held:
                line += " " + " | ".join(_figures(held["ci95"][scenario][name], windows=False)) + " |"
            out.append(line)
    out += ["", "### Dominated across the draws?", "",
            "A point dominates a row when, over the same draws, its mean requests and windows within the SLO are "
            "no lower, its mean cost no higher, and one is better; **significant** where the 95 % interval of "
            "the draw-by-draw difference clears zero in the peer's favour on at least one of the three.", "",
            "| scenario | row | dominated across all the draws by |" + (" on the held-out draws by |" if held else ""),
            "|---|---|---|" + ("---|" if held else "")]
    for scenario, rows in found["dominated_by"].items():
        for row, by in rows.items():
            line = f"| {scenario} | {row} | {_dominators(by)} |"
            if held:
                line += f" {_dominators(held['dominated_by'][scenario][row])} |"
            out.append(line)
    return [*out, ""]


def _figures(s: Mapping[str, Any], windows: bool) -> list[str]:
    return [f"{s['draws_meeting_slo_goals']} of {s['draws']}",
            _ci(s["requests_within_slo"], "{:.2f} ± {:.2f} %", 100),
            *([_ci(s["windows_within_slo"], "{:.1f} ± {:.1f} %", 100)] if windows else []),
            _ci(s["cost_vs_oracle"], "{:.3f} ± {:.3f}×")]


def _dominators(by: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{d['point']} ({'**significant**' if d['verdict'] == 'significant' else 'on the mean'})"
                     for d in by) or "no"


def judged_dominators(doc: Mapping[str, Any], scenario: str, row: str) -> list[str] | None:
    """The points dominating *row* significantly on the held-out draws where there are enough, else on
    all the draws; None where the extra draws did not rerun the row."""
    found = doc.get("seeds", {}).get("across_draws")
    if not found:
        return None
    by = (found.get("held_out") or found)["dominated_by"].get(scenario, {}).get(row)
    return None if by is None else [d["point"] for d in by if d["verdict"] == "significant"]
