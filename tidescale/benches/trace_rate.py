"""`tidescale bench trace-rate`: how many traced requests a P99 needs, and so which `rate=N` to run.

Triton traces one request in N (`--trace-config rate=N`, a counter, not a coin). Over a
Prometheus window of W requests the exporter's histogram then holds W/N traced requests, each
counted N times. When latencies are independent of the request's position, every N-th request is
as good as a random sample of W/N requests, so the P99 that `histogram_quantile` reads from the
exporter's buckets errs by an amount that depends on the traced count (and the latency
distribution's tail), not on N or W apart. This bench measures that error: it draws n requests
from a latency population many times, buckets them as the exporter does, reads the P99 as
Prometheus does, and compares it with the population's exact P99. The error includes the bucket
interpolation error, which is what is left at large n.

Populations: the heavy-tailed fleet mix of `bench percentiles` (a lognormal body, batching steps,
a cached fast path and a 1.5 % Pareto tail, the hard case), and a narrow lognormal like the one
the local fleet's Python-backend model gives. `bench overhead` checks the curve against real
Triton replicas at rate 1, 10 and 100.

The advice: the smallest traced count whose 95th-percentile error is within the target, and from
it the largest N per request rate: N = rate × window / traced needed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tidescale.benches.common import bench_main
from tidescale.benches.histogram import histogram_quantiles
from tidescale.benches.percentiles import workload
from tidescale.benches.report import BENCH_DIR, save_figure
from tidescale.contracts.errors import UsageError
from tidescale.exporters.buckets import log_buckets
from tidescale.exporters.settings import ExporterSettings
from tidescale.sim.samples import sample_quantile

RESULT_MD = BENCH_DIR / "trace-rate.md"
RESULT_PNG = RESULT_MD.with_suffix(".png")
TRACED_COUNTS = (100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)
TARGET_ERROR = 0.02  # the goal: P99 within 2 %
WINDOW_S = 300.0  # the recording rules' 5-minute rate window
REQUEST_RATES = (1.0, 10.0, 100.0, 1_000.0, 10_000.0)
# Triton's rate is a whole number; the advice never goes past this (a pod must trace something
# in every window for the exporter to detect N and for the dashboards to draw a line).
MAX_ADVISED_RATE = 1_000


def exporter_bounds() -> tuple[float, ...]:
    """The bucket bounds the exporter serves by default (its settings' SLO thresholds and range)."""
    s = ExporterSettings.model_validate({})
    return log_buckets(s.bucket_min_s, s.bucket_max_s, s.boundary_thresholds_s(), s.max_buckets)


def p99_errors(population: np.ndarray, bounds: Sequence[float], traced: int, trials: int,
               rng: np.random.Generator) -> np.ndarray:
    """Relative errors of the bucketed P99 of *trials* samples of *traced* requests each."""
    truth = float(sample_quantile(population, 0.99) or 0.0)
    bucket_of = np.searchsorted(np.asarray(bounds), population, side="left")  # "le" buckets
    picks = bucket_of[rng.integers(0, len(population), size=(trials, traced))]
    counts = np.stack([np.bincount(row, minlength=len(bounds) + 1) for row in picks]).astype(float)
    return np.abs(histogram_quantiles(0.99, counts, bounds) - truth) / truth


def error_curve(population: np.ndarray, bounds: Sequence[float], traced_counts: Sequence[int] = TRACED_COUNTS,
                trials: int = 200, seed: int = 11) -> list[dict[str, float]]:
    """Per traced count: the median and 95th-percentile relative P99 error."""
    rng = np.random.default_rng(seed)
    curve = []
    for n in traced_counts:
        errors = p99_errors(population, bounds, int(n), trials, rng)
        curve.append({"traced": int(n), "median_error": float(np.median(errors)),
                      "p95_error": float(sample_quantile(errors, 0.95) or 0.0)})
    return curve


def traced_needed(curve: Sequence[dict[str, float]], target: float = TARGET_ERROR) -> int | None:
    """The smallest traced count from which on the 95th-percentile error stays within *target*."""
    needed = None
    for point in reversed(curve):
        if point["p95_error"] > target:
            break
        needed = int(point["traced"])
    return needed


def advised_rate(request_rps: float, needed: int, window_s: float = WINDOW_S) -> int:
    """The largest whole N that still traces *needed* requests per window at *request_rps*."""
    if request_rps <= 0 or needed < 1 or window_s <= 0:
        raise UsageError(f"need a positive request rate, traced count and window, got {request_rps}, {needed}, "
                         f"{window_s}")
    return int(max(1, min(MAX_ADVISED_RATE, math.floor(request_rps * window_s / needed))))


def populations(quick: bool = False) -> dict[str, np.ndarray]:
    """The heavy-tailed fleet mix of `bench percentiles`, and a narrow single-model lognormal."""
    fleet = np.concatenate(workload(seed=7, per_pod=10_000 if quick else 50_000))
    narrow = np.random.default_rng(5).lognormal(mean=math.log(0.012), sigma=0.12, size=len(fleet))
    return {"fleet_heavy_tail": fleet, "single_model_narrow": narrow}


def run(quick: bool = False, target: float = TARGET_ERROR, progress: Callable[[str], None] = lambda _: None,
        ) -> dict[str, Any]:
    if not 0 < target < 1:
        raise UsageError(f"--target must be a relative error between 0 and 1, got {target}")
    bounds = exporter_bounds()
    trials = 60 if quick else 300
    counts = TRACED_COUNTS[:7] if quick else TRACED_COUNTS
    result: dict[str, Any] = {"target_error": target, "window_s": WINDOW_S, "trials": trials,
                              "buckets": len(bounds) + 1, "populations": {}}
    for name, population in populations(quick).items():
        progress(f"{name}: {len(population):,} latencies, {trials} samples per traced count")
        curve = error_curve(population, bounds, counts, trials)
        needed = traced_needed(curve, target)
        result["populations"][name] = {
            "p99_s": sample_quantile(population, 0.99), "curve": curve, "traced_needed": needed,
            "advised_rate": None if needed is None else {
                f"{rps:g}": advised_rate(rps, needed) for rps in REQUEST_RATES}}
    hard = result["populations"]["fleet_heavy_tail"]["traced_needed"]
    result["advice"] = {"traced_per_window": hard, "rate_by_request_rps": None if hard is None else {
        f"{rps:g}": advised_rate(rps, hard) for rps in REQUEST_RATES}}
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for (name, pop), color in zip(result["populations"].items(), ("tab:red", "tab:blue"), strict=False):
        traced = [p["traced"] for p in pop["curve"]]
        ax.plot(traced, [100 * p["p95_error"] for p in pop["curve"]], "o-", color=color,
                label=f"{name.replace('_', ' ')}: 95th pct")
        ax.plot(traced, [100 * p["median_error"] for p in pop["curve"]], "o--", color=color, alpha=0.6,
                label=f"{name.replace('_', ' ')}: median")
    ax.axhline(100 * result["target_error"], color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("traced requests per window")
    ax.set_ylabel("P99 relative error, %")
    ax.set_title("P99 from the exporter's buckets vs traced requests")
    ax.legend(frameon=False, fontsize=8)
    save_figure(fig, path)


def markdown(result: dict[str, Any]) -> str:
    plot(result, RESULT_PNG)
    pops = result["populations"]
    rows = []
    for i, point in enumerate(next(iter(pops.values()))["curve"]):
        cells = " | ".join(f"{100 * p['curve'][i]['median_error']:.2f} % / {100 * p['curve'][i]['p95_error']:.2f} %"
                           for p in pops.values())
        rows.append(f"| {point['traced']:,} | {cells} |")
    advice = result["advice"]["rate_by_request_rps"] or {}
    target = 100 * result["target_error"]
    return "\n".join([
        "# Benchmark: trace rate and P99 error",
        "",
        "Generated by `tidescale bench trace-rate` (see `tidescale/benches/trace_rate.py`). Relative error of "
        "the P99 read by Prometheus' `histogram_quantile` from the exporter's default buckets, against the "
        f"population's exact P99, over {result['trials']} samples per traced count (median / 95th percentile).",
        "",
        "| traced requests per window | " + " | ".join(n.replace("_", " ") for n in pops) + " |",
        "|---|" + "---|" * len(pops),
        *rows,
        "",
        *[f"- {name.replace('_', ' ')}: exact P99 {p['p99_s'] * 1e3:.1f} ms; " + (
            f"the 95th-percentile error stays within {target:g} % from {p['traced_needed']:,} traced requests "
            "per window on." if p["traced_needed"] else
            f"never within {target:g} % up to {p['curve'][-1]['traced']:,} traced requests: the bucket layout's "
            f"own error ({100 * p['curve'][-1]['median_error']:.1f} % where this P99 falls in its bucket) "
            "dominates, whatever the rate.")
          for name, p in pops.items()],
        "",
        f"Advice, from the heavy-tailed case, for a {result['window_s'] / 60:g}-minute window: Triton's `rate=N` "
        f"with N at most request rate × {result['window_s']:g} s / {result['advice']['traced_per_window']}:",
        "",
        "| requests per second per model | largest N |",
        "|---|---|",
        *[f"| {rps} | {n} |" for rps, n in advice.items()],
        "",
        f"![P99 error vs traced requests]({RESULT_PNG.name})",
        "",
        "```json",
        json.dumps(result, indent=1, sort_keys=True),
        "```",
        "",
    ])


def run_command(json_only: bool = False, quick: bool = False, target: float = TARGET_ERROR) -> None:
    bench_main(lambda progress: run(quick=quick, target=target, progress=progress), markdown, RESULT_MD, json_only)
