"""tidescale against itself with its tuning changed, paired by draw (`bench sizing`, `bench tuning`).

A knob is worth changing only if it is no worse where it matters, on draws it was not tuned on. The
autoscale pages run the peers and the oracle, so they cover a few scenarios on a few draws; this
comparison runs tidescale alone, as shipped but for the knobs a `TuningPair` names, on every
scenario of 20 minutes (the named groups' included) and on many draws. Both tunings meet the same
arrivals and clocks on a draw, so each measure's difference is judged draw by draw, with a 95 %
interval: a scenario where one serves more requests within the SLO and the other costs less is a
trade, not a win. No oracle runs (its schedule search is most of a draw's cost): cost is the
replica-hours, and the difference is the candidate's over the baseline, in per cent.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tidescale.autoscaler.settings import RecommenderTuning
from tidescale.benches.autoscale import scenarios as bench
from tidescale.benches.autoscale.closedloop import SimParams, with_seed
from tidescale.benches.autoscale.report import (
    QUICK_S,
    SLO_FLAG,
    BenchOptions,
    check_profile_replicas,
    replica_setup,
)
from tidescale.benches.autoscale.seeds import TUNED_SEEDS
from tidescale.benches.forked import fork_map
from tidescale.benches.report import BENCH_DIR, markdown_table, recorded, save_figure, write_page
from tidescale.benches.stats import ci_text, interval
from tidescale.contracts.errors import UsageError
from tidescale.contracts.slo import check_slo_threshold

MEASURES = ("requests_within_slo", "windows_within_slo", "replica_hours")
DEFAULT_DRAWS, MAX_DRAWS = 20, 100
MAX_SETTINGS = 8  # knobs one candidate changes: a page name, and a comparison, stay readable
# Groups of days, not 20-minute scenarios: a draw is an hour of simulation or more.
LONG_GROUPS = ("seasonal", "weekly")
VERDICTS = ("better", "no clear difference", "a trade", "worse")  # `verdict`, in the page's order


@dataclass(frozen=True)
class TuningPair:
    """Two tunings of tidescale compared draw by draw: each a label and the `recommender.tuning` knobs
    it sets over the shipped ones; the page it writes and the command that writes it."""

    baseline: str
    candidate: str
    tunings: Mapping[str, Mapping[str, Any]]  # label -> knobs set over the shipped tuning
    page: str  # docs/benchmarks/<page>.md and .png
    command: str  # what regenerates the page, without --draws
    title: str
    described: Sequence[str] = field(default_factory=tuple)  # the page's bullets on the two tunings
    slo_s: float = bench.DEFAULT_SLO_S  # the P99 both tunings are judged at
    profile_replicas: int = 1  # the capacity's load test ran through round robin on this many replicas

    def at_slo(self, slo_s: float) -> TuningPair:
        """The same pair judged at a P99 of *slo_s*: a page and a command of its own where not the default."""
        check_slo_threshold(slo_s, SLO_FLAG)
        if slo_s == self.slo_s:
            return self
        return replace(self, slo_s=slo_s, page=f"{self.page}-slo-{slo_s:g}s",
                       command=f"{self.command} {SLO_FLAG} {slo_s:g}")

    def profiled_on(self, replicas: int) -> TuningPair:
        """The same pair with the capacity (and queue sizing's curve) load-tested through round robin
        on *replicas* replicas, as `bench autoscale --profile-replicas` does: a page and a command of
        its own where not one replica."""
        check_profile_replicas(replicas)
        if replicas == self.profile_replicas:
            return self
        return replace(self, profile_replicas=replicas, page=f"{self.page}-profile-{replicas}-replicas",
                       command=f"{self.command} --profile-replicas {replicas}")

    @property
    def labels(self) -> tuple[str, str]:
        return self.baseline, self.candidate

    def setup(self) -> dict[str, Any]:
        """What the JSON document and its page need of the pair."""
        return {"baseline": self.baseline, "candidate": self.candidate,
                "tunings": {k: dict(v) for k, v in self.tunings.items()}, "command": self.command,
                "title": self.title, "described": list(self.described)}


SIZING = TuningPair(
    "fixed", "burst", {"fixed": {"sizing": "fixed"}, "burst": {"sizing": "burst"}}, "autoscale-sizing",
    "tidescale bench sizing", "tidescale's sizings side by side",
    ("fixed: the projected rate at 0.9 of the capacity (0.8 down); burst: the margin a fluid queue "
     "needs for the bursts of the last 10 minutes, at the full capacity (docs/autoscaler.md, \"Sizing "
     "for the bursts seen\")",))


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def candidate_pair(settings: Sequence[str]) -> TuningPair:
    """The shipped tuning against the same with *settings* (`KEY=VALUE` each, `bench tuning --set`),
    each checked as the chart's `recommender.tuning` checks it: an unknown knob, a value out of its
    range, or one that changes nothing is a usage error naming it."""
    if not settings:
        raise UsageError("name at least one knob to change: --set KEY=VALUE (the knobs: "
                         "`tidescale autoscale recommend --print-config`)")
    if len(settings) > MAX_SETTINGS:
        raise UsageError(f"at most {MAX_SETTINGS} --set, got {len(settings)}")
    raw: dict[str, str] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise UsageError(f"--set takes KEY=VALUE, got {item[:80]!r}")
        if key in raw:
            raise UsageError(f"--set {key} given twice")
        raw[key] = value
    try:
        tuned = RecommenderTuning.model_validate(raw).as_json()
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"--set: {problems}") from None
    shipped = RecommenderTuning().as_json()
    unchanged = [k for k in raw if tuned[k] == shipped[k]]
    if unchanged:
        raise UsageError(f"--set {', '.join(unchanged)}: the shipped value already; nothing to compare")
    knobs = {k: tuned[k] for k in raw}
    label = ", ".join(f"{k}={_shown(v)}" for k, v in knobs.items())
    slug = re.sub(r"[^A-Za-z0-9_.]+", "-", "-".join(f"{k}-{_shown(v)}" for k, v in knobs.items())).strip("-")
    return TuningPair(
        "shipped", label, {"shipped": {}, label: knobs}, f"autoscale-tuning-{slug}",
        "tidescale bench tuning " + " ".join(f"--set {k}={_shown(v)}" for k, v in knobs.items()),
        f"tidescale as shipped against {label}",
        ("shipped: the service's shipped tuning (`tidescale autoscale recommend --print-config`, "
         f"{', '.join(f'{k}={_shown(shipped[k])}' for k in knobs)}); candidate: the same but {label}",))


def default_scenarios(available: Mapping[str, bench.BenchScenario]) -> list[str]:
    """Every 20-minute scenario, the named groups' included; not the days of the seasonal pages."""
    long = {n for g in LONG_GROUPS for n in bench.NAMED_ONLY[g]}
    return [n for n in available if n not in long and n != "trace"]


def check_draws(draws: int) -> None:
    if not 2 <= draws <= MAX_DRAWS:
        raise UsageError(f"--draws must be in [2, {MAX_DRAWS}] (two at least, for an interval), got {draws}")


def run(pair: TuningPair, names: Sequence[str] | None = None, draws: int = DEFAULT_DRAWS, jobs: int = 1,
        progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Each scenario on seeds 0 .. *draws* - 1 under each of *pair*'s tunings; the JSON document."""
    check_draws(draws)
    opts = BenchOptions(list(names) if names else None, quick=True, jobs=jobs, slo_s=pair.slo_s,
                        profile_replicas=pair.profile_replicas)
    available = bench.build_scenarios(QUICK_S, opts.base_rps)
    chosen = list(names) if names else default_scenarios(available)
    bench.check_scenarios(chosen, list(available))
    curve, queue_policy, cfg, capacity = replica_setup(opts)
    queue = any(t.get("sizing") == "queue" for t in pair.tunings.values())
    shares = bench.measure_budget_shares(curve, cfg, opts.slo_s, replicas=opts.profile_replicas) if queue else ()
    params = SimParams(curve, cfg, bench.DEFAULT_COLD_START_S, opts.slo_s, budget_shares=shares)
    started = time.monotonic()

    def one(draw: tuple[str, int]) -> dict[str, dict[str, Any]]:
        name, seed = draw
        def scores(label: str) -> dict[str, Any]:
            found = bench.tidescale_scores(available[name], with_seed(params, seed), capacity, pair.tunings[label])
            return {k: recorded(v) for k, v in found.items() if k in MEASURES}

        return {label: scores(label) for label in pair.labels}

    work = [(name, seed) for name in chosen for seed in range(draws)]
    results = fork_map(one, work, jobs, lambda d: progress(f"{d[0]}: seed {d[1]} done"))
    by_scenario: dict[str, dict[str, Any]] = {}
    for (name, seed), result in zip(work, results, strict=True):
        by_scenario.setdefault(name, {})[str(seed)] = result
    return {
        "benchmark": pair.page,
        # a run on named scenarios records them in its command, so the page's command reruns what ran
        "setup": {**pair.setup(), "command": pair.command + "".join(f" --scenario {n}" for n in names or ()),
                  "duration_s": QUICK_S, "base_rps": opts.base_rps,
                  "slo_latency_threshold_s": opts.slo_s,
                  "capacity_rps_per_replica": round(capacity, 1), "queue_policy": queue_policy["kind"],
                  **({"profile_replicas": opts.profile_replicas} if opts.profile_replicas != 1 else {}),
                  "queue_timeout_s": queue_policy["timeout_s"], "seeds": list(range(draws)),
                  **({"budget_shares": [[f, round(share, 4)] for f, share in shares]} if shares else {}),
                  "tuned_seeds": list(TUNED_SEEDS), "delivery": "adapter", "jobs": jobs,
                  "scenarios": chosen,  # in the order run (the JSON's keys are sorted)
                  "wall_s": round(time.monotonic() - started, 1)},
        "scenarios": {name: {"draws": d, "compared": compare(d, pair.labels)}
                      for name, d in by_scenario.items()},
    }


def difference(draws: Mapping[str, Mapping[str, Mapping[str, float]]], measure: str, labels: tuple[str, str],
               seeds: Sequence[str] | None = None) -> tuple[float, float] | None:
    """The candidate's difference from the baseline (*labels*: baseline, candidate) on *measure*, draw
    by draw: points of requests or windows within the SLO, per cent more replica-hours; (mean, 95 %
    half-width), None under two draws."""
    diffs = []
    for seed, d in draws.items():
        if seeds is not None and seed not in seeds:
            continue
        base, cand = d[labels[0]][measure], d[labels[1]][measure]
        diffs.append(100 * (cand / base - 1) if measure == "replica_hours" else 100 * (cand - base))
    return interval(diffs)


def verdict(diffs: Mapping[str, tuple[float, float] | None]) -> str:
    """"better", "worse", "a trade" (better on one measure and worse on another, each with its interval
    clear of zero) or "no clear difference", for the candidate; more requests or windows within the
    SLO is better, more replica-hours worse."""
    better = worse = False
    for measure, found in diffs.items():
        if found is None:
            continue
        low, high = found[0] - found[1], found[0] + found[1]
        gain = -1 if measure == "replica_hours" else 1
        better |= (low > 0) if gain > 0 else (high < 0)
        worse |= (high < 0) if gain > 0 else (low > 0)
    return "a trade" if better and worse else "better" if better else "worse" if worse else "no clear difference"


def compare(draws: Mapping[str, Mapping[str, Mapping[str, float]]], labels: tuple[str, str]
            ) -> dict[str, Any]:
    """Each tuning's (*labels*: baseline, candidate) mean and 95 % interval per measure, the paired
    differences and the verdict, over all the draws and over the held-out ones (seeds not in
    `TUNED_SEEDS`)."""
    def spread(label: str, measure: str) -> dict[str, float | None]:
        found = interval([d[label][measure] for d in draws.values()])
        return {"mean": None if found is None else recorded(found[0]),
                "ci95": None if found is None else recorded(found[1])}

    held = [s for s in draws if int(s) not in TUNED_SEEDS]
    out: dict[str, Any] = {"tunings": {label: {m: spread(label, m) for m in MEASURES} for label in labels}}
    for label, seeds in (("all", None), ("held_out", held)):
        diffs = {m: difference(draws, m, labels, seeds) for m in MEASURES}
        out[label] = {"difference": {m: None if v is None else {"mean": recorded(v[0]), "ci95": recorded(v[1])}
                                     for m, v in diffs.items()},
                      "verdict": verdict(diffs), "draws": len(draws) if seeds is None else len(seeds)}
    return out


def _in_order(doc: Mapping[str, Any]) -> list[str]:
    return list(doc["setup"].get("scenarios") or doc["scenarios"])


def _diff_text(found: Mapping[str, Any] | None, unit: str) -> str:
    if found is None:
        return "–"
    return ci_text(found["mean"], found["ci95"], "{:+.2f} ± {:.2f} " + unit)


def lines(doc: Mapping[str, Any], png: str | None = None) -> list[str]:
    """The page: each tuning's figures and the paired differences, scenario by scenario."""
    setup = doc["setup"]
    n = len(setup["seeds"])
    base, cand = setup["baseline"], setup["candidate"]
    out = [
        f"# Benchmark: autoscale, {setup['title']}", "",
        f"Generated by `{setup['command']} --draws {n}` (tidescale alone on the fast simulator, adapter "
        "mode, as shipped but for the `recommender.tuning` knobs named; both tunings meet the same arrivals "
        "and clocks on a draw).", "",
        f"- {n} draws per scenario (seeds 0–{n - 1}; held out: those not in {setup['tuned_seeds']}, the "
        "seeds the shipped defaults were tuned on), 20-minute scenarios, base "
        f"{setup['base_rps']:g} req/s, SLO P99 ≤ {setup['slo_latency_threshold_s']:g} s; replica capacity at "
        f"the SLO {setup['capacity_rps_per_replica']:g} req/s"
        + (f" (a load test through round robin on {setup['profile_replicas']} replicas)"
           if setup.get("profile_replicas", 1) != 1 else "")
        + f"; queue policy {setup['queue_policy']}",
        *(f"- {line}" for line in setup["described"]),
        f"- difference: {cand} − {base}, draw by draw, mean ± 95 % interval: points of requests and of "
        "1-minute windows within the SLO, and per cent more replica-hours; the verdict (the candidate's) "
        "counts a difference whose interval clears zero",
        "- no oracle runs here: for the cost against the optimum and the peers see "
        "[autoscale.md](autoscale.md) and the pages beside it", ""]
    rows = []
    for name in _in_order(doc):
        s = doc["scenarios"][name]
        figures = s["compared"]["tunings"]
        cells = [name]
        for label in (base, cand):
            req, hours = figures[label]["requests_within_slo"], figures[label]["replica_hours"]
            cells.append(f"{ci_text(100 * req['mean'], 100 * (req['ci95'] or 0), '{:.2f} ± {:.2f} %')}, "
                         f"{ci_text(hours['mean'], hours['ci95'], '{:.3f} ± {:.3f}')} h")
        for draws in ("all", "held_out"):
            d = s["compared"][draws]["difference"]
            cells += [_diff_text(d["requests_within_slo"], "pt"), _diff_text(d["windows_within_slo"], "pt"),
                      _diff_text(d["replica_hours"], "%"), f"**{s['compared'][draws]['verdict']}**"]
        rows.append(cells)
    header = ["scenario", f"{base}: requests, replica-hours", f"{cand}: requests, replica-hours",
              "Δ requests (all)", "Δ windows (all)", "Δ cost (all)", "verdict (all)",
              "Δ requests (held out)", "Δ windows (held out)", "Δ cost (held out)", "verdict (held out)"]
    out += [markdown_table(header, rows), ""]
    if png:
        out += [f"![{cand} − {base} per scenario]({png})", ""]
    tally: dict[str, list[str]] = {}
    for name in _in_order(doc):
        tally.setdefault(doc["scenarios"][name]["compared"]["held_out"]["verdict"], []).append(name)
    out += [f"On the held-out draws {cand} is " + "; ".join(
        f"{v} on {', '.join(tally[v])}" for v in VERDICTS if v in tally) + ".", ""]
    out.append(f"Wall time {setup['wall_s']:.0f} s with {setup['jobs']} job(s).")
    return out


def plot(doc: Mapping[str, Any], path: Path) -> None:
    """Three panels: each scenario's paired difference in requests and in 1-minute windows within the
    SLO (points) and in replica-hours (%), mean ± 95 % interval over all the draws; green where the
    candidate is better with the interval clear of zero, red where worse, grey where the interval
    holds zero. The windows have a panel of their own: a knob that keeps the requests can still
    lose whole minutes (the lulls' verdicts turn on them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    names = _in_order(doc)
    setup = doc["setup"]
    panels = (("requests_within_slo", "Δ requests within SLO (points)"),
              ("windows_within_slo", "Δ 1-minute windows within SLO (points)"),
              ("replica_hours", "Δ replica-hours (%)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(16.8, 0.45 * len(names) + 1.8), sharey=True)
    for ax, (measure, label) in zip(axes, panels, strict=True):
        for k, name in enumerate(names):
            found = doc["scenarios"][name]["compared"]["all"]["difference"][measure]
            if found is None:
                continue
            judged = verdict({measure: (found["mean"], found["ci95"] or 0.0)})
            ax.errorbar(found["mean"], k, xerr=found["ci95"] or 0.0, fmt="o", capsize=3,
                        color={"better": "tab:green", "worse": "tab:red"}.get(judged, "tab:gray"))
        ax.axvline(0, color="black", linewidth=0.8)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6))  # a hundredth of a point in long labels overlapped
        ax.set(xlabel=f"{label},\ncandidate − {setup['baseline']}, mean ± 95 % CI")
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(names)), names)
    axes[0].invert_yaxis()
    fig.suptitle(f"{setup['candidate']} against {setup['baseline']}, paired by draw ({len(setup['seeds'])} draws)")
    save_figure(fig, path)


def paths(page: str, out_dir: Path = BENCH_DIR) -> tuple[Path, Path]:
    """The page and its plot."""
    return out_dir / f"{page}.md", out_dir / f"{page}.png"


def write(doc: dict[str, Any], out_dir: Path = BENCH_DIR) -> tuple[Path, Path]:
    """Write the comparison's page and plot (named by its pair) into *out_dir*; their paths."""
    md, png = paths(doc["benchmark"], out_dir)
    plot(doc, png)
    write_page(md.stem, "\n".join(lines(doc, png.name)), doc, out_dir)
    return md, png
