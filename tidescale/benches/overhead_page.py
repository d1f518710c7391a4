"""`tidescale bench overhead`'s page and plot (docs/benchmarks/overhead.md, .png), and the command.

The measurement itself is `tidescale/benches/overhead.py`; this turns its JSON into what people read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tidescale.benches.common import bench_main
from tidescale.benches.loadclients import CONCURRENCY
from tidescale.benches.overhead import (
    CRASH_NOTE,
    DEFAULT_MODES,
    GOAL_RATE,
    GOALS,
    IDLE_S,
    OTLP_QUIET_S,
    QUIET_S,
    READ_COST_READS,
    RESULT_MD,
    RESULT_PNG,
    ROUNDS,
    check_requests,
    check_rounds,
    parse_modes,
    run,
)
from tidescale.benches.proccpu import CLOCK_TICKS
from tidescale.benches.report import json_block, markdown_table


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.2f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:+.1f} %"


def number(value: float | None, fmt: str = ".1f") -> str:
    return "–" if value is None else format(value, fmt)


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "not met", None: "not measured"}[met]


def _goal_lines(result: dict[str, Any]) -> list[str]:
    g, t = result["goals"], result["goal_thresholds"]
    lines = []
    at = g.get(f"otlp-{GOAL_RATE}")
    if at is not None and "error" in at:
        lines.append(f"- OTLP rate={GOAL_RATE}: not measured, {at['error']}")
    elif at is not None:
        lines += [f"- OTLP rate={GOAL_RATE}, P99 error ≤ {t['p99_error_max']:.0%} over ≥ {t['min_requests']:,} "
                  f"requests: {_pct(at['p99_error'])} over {at['requests']:,} requests — "
                  f"{_verdict(at['p99_error_met'] and at['enough_requests'])}. Of that, the bucket layout alone "
                  f"(the client's own requests through the same buckets): {_pct(at.get('p99_error_of_buckets'))}; "
                  f"the rest (sampling, and what the server cannot see): {_pct(at.get('p99_error_beyond_buckets'))}.",
                  f"- OTLP rate={GOAL_RATE}, Triton's added CPU ≤ {t['triton_added_cpu_us_max']:g} µs per request: "
                  f"{_added(at)} — {_added_verdict(at)}"]
    for mode, e in g["exporter_cpu_per_traced_request"].items():
        lines.append(f"- {mode}: exporter ≤ {t['exporter_cpu_us_per_traced_request_max']:g} µs CPU per traced "
                     f"request on the live path: {number(e.get('live_us'))} µs (rounds: {_rounds(e)}; "
                     f"{number(e['net_us'])} µs net of its own idle cost with the bench's /metrics reads, "
                     f"{number(e['us'])} µs in all; its ingest threads, by its own count, "
                     f"{number(e.get('ingest_us'))} µs) — "
                     + ("not judged: a round's live CPU is within the noise of what was taken off (one stats "
                        "poll's idle cost per traced request, or more)." if e.get("within_noise")
                        else f"{_verdict(e['met'])}."))
    return lines


def _added(goal: dict[str, Any]) -> str:
    noise = goal.get("triton_added_cpu_noise_us")
    return f"{number(goal['triton_added_cpu_us'])}" + (f" ± {number(noise)}" if noise else "") + " µs"


def _added_verdict(goal: dict[str, Any]) -> str:
    if goal.get("triton_added_cpu_met") is None and goal["triton_added_cpu_us"] is not None:
        return ("not judged: the noise bound (half the widest move of Triton's CPU per request between two rounds "
                "of one mode in this run) straddles the goal.")
    return f"{_verdict(goal['triton_added_cpu_met'])}."


def _rounds(goal: dict[str, Any]) -> str:
    """Each round's live figure, with its noise bound where one was measured: "45.1 ± 6.4, 38.7 ± 6.2"."""
    values, bounds = goal.get("live_us_by_round") or [], goal.get("noise_us_by_round") or []
    return ", ".join(number(v) + (f" ± {number(b)}" if b else "")
                     for v, b in zip(values, bounds or [None] * len(values), strict=True)) or "–"


def _split_lines(result: dict[str, Any]) -> list[str]:
    """The P99 error in three parts, for the modes whose trace file recorded every stamp."""
    split = [r for r in result["modes"] if r.get("trace_frontend_p99_s") is not None]
    if not split:
        return []
    header = ("mode", "client P99 ms", "frontend window P99 ms", "request stage P99 ms (exact)", "exporter P99 ms",
              "P99 error", "= the histogram's buckets", "+ the frontend", "+ the client side")
    rows = [(r["mode"], _ms(r["client_p99_s"]), _ms(r["trace_frontend_p99_s"]), _ms(r["trace_request_p99_s"]),
             _ms(r["exporter_p99_s"]), _pct(r["p99_error"]), _pct(r["p99_error_histogram_vs_trace"]),
             _pct(r["p99_error_frontend"]), _pct(r["p99_error_client_side"])) for r in split]
    return ["## Where the P99 error comes from", "",
            "Triton's trace file records every stamp of every traced request, the frontend's included, so the "
            "trace-file modes split the error into three shares of the client's P99 that add up to it: the "
            "exporter's histogram against the exact P99 of the same requests' request stage (its buckets, and "
            "any traces written after the exporter's last read); that stage against the frontend's whole window, "
            "HTTP_RECV_START to the later of REQUEST_END and HTTP_SEND_END (what the request stage misses inside "
            "the server); and that window against the client's P99 (what no server stamp covers: the client "
            "itself and the loopback, on the same cores). The OTLP modes see the same server under the same load.",
            "", markdown_table(header, rows), ""]


def markdown(result: dict[str, Any]) -> str:
    header = ("mode", "requests", "req/s", "Triton CPU µs/req", "added vs none", "exporter CPU µs/req",
              "exporter CPU µs/traced req", "its idle ms/s", "net of its idle", "net of none's idle",
              "live path (net of idle and reads)", "ingest (its own count)",
              "detected N (confidence)", "client P99 ms",
              "exporter P99 ms", "P99 error", "of which buckets", "beyond buckets")
    rows = []
    for r in result["modes"]:
        detected = ("–" if r["detected_rate"] is None
                    else f"{r['detected_rate']:g} ({number(r['detected_confidence'], '.2f')})")
        served = "Triton failed" if r["error"] else f"{r['requests']:,}"
        rows.append((r["mode"], served, number(r["throughput_rps"], ".0f"),
                     number(r["triton_cpu_us_per_request"]), number(r["triton_added_cpu_us_vs_none"], "+.1f"),
                     number(r["exporter_cpu_us_per_request"]), number(r["exporter_cpu_us_per_traced_request"]),
                     number(r["exporter_idle_cpu_ms_per_s"], ".2f"),
                     number(r["exporter_net_cpu_us_per_traced_request"]),
                     number(r.get("exporter_net_cpu_us_per_traced_request_vs_none")),
                     number(r.get("exporter_live_cpu_us_per_traced_request")),
                     number(r.get("exporter_ingest_cpu_us_per_traced_request")), detected, _ms(r["client_p99_s"]),
                     _ms(r["exporter_p99_s"]), _pct(r["p99_error"]), _pct(r.get("p99_error_of_buckets")),
                     _pct(r.get("p99_error_beyond_buckets"))))
    summaries = [f"- `{r['mode']}`: Triton's own summary P99 (its last round) {_ms(r['triton_summary_p99_s'])} ms, "
                 f"{_pct(r['triton_summary_p99_error'])} against the client's P99 of that round; one pod's quantile "
                 "over its last minutes, which cannot be added across pods." for r in result["modes"]
                 if r["triton_summary_p99_s"] is not None]
    spreads = [r["triton_cpu_spread_us"] for r in result["modes"] if r["triton_cpu_spread_us"] is not None]
    spread = [] if not spreads else [
        f"- Each mode ran in {result['rounds']} rounds of {result['requests_per_mode'] // result['rounds']:,} "
        "requests, in ABBA order (every other round backwards), each on a fresh replica and exporter. Triton's CPU "
        "per request moved between a mode's rounds by "
        f"{min(spreads):.1f} to {max(spreads):.1f} µs (`triton_cpu_us_per_request_by_round`): the noise of this "
        "machine, against which \"added vs none\" should be read."]
    failures = [f"- `{r['mode']}`: Triton crashed or stopped answering in {r['crashes']} of "
                f"{r['crashes'] + r['rounds']} attempts ("
                + "; ".join(e.rstrip(".") for e in r["crash_errors"]) + "), after about "
                + ", ".join(number(c, ",.0f") for c in r["exporter_counted_before_crashes"])
                + " requests (the exporter's count); "
                + (f"the figures are those of the {r['rounds']} round(s) that completed." if r["rounds"]
                   else "no round completed.")
                for r in result["modes"] if r["crashes"]]
    failures += [f"- {CRASH_NOTE}"] if failures else []
    client = result["client"]
    settings = result["client_settings"]
    how = (f"perf_analyzer {settings['version']} over HTTP at concurrency {settings['concurrency']}"
           if client == "perf_analyzer" else
           f"the project's load generator, open loop at {settings['rps']:g} req/s (perf_analyzer: "
           f"{result['client_fallback_reason']})")
    return "\n".join([
        "# Benchmark: tracing overhead",
        "",
        "Generated by `tidescale bench overhead` (see `tidescale/benches/overhead.py`). Each mode runs a "
        f"fresh real Triton {result['triton_version']} replica serving `{result['model']['name']}` (Python "
        f"backend, dynamic batching, {result['model']['exec_ms_batch_1']} ms per batch-1 execution) and a fresh "
        f"`tidescale exporter serve` polling it; {result['requests_per_mode']:,} requests per mode from {how}, "
        f"after a warm-up of {result['warmup_requests']} that is not counted. Machine: {result['cpu_count']} CPU "
        f"cores; whole run {result['wall_s']:.0f} s.",
        "",
        "CPU figures are CPU time divided by Triton's `nv_inference_request_success` delta, never wall-clock "
        "times: Triton's with its Python backend stubs from /proc (utime + stime, in "
        f"{1e3 / CLOCK_TICKS:g} ms ticks), the exporter's from its process CPU-time clock (nanoseconds). "
        "The exporter runs in every mode; in `none` and `summaries` its CPU is its idle polling cost. After "
        f"each round the same exporter is left alone for {IDLE_S:g} s (\"its idle\": polling the idle replica, "
        "housekeeping, nothing sent or read), and \"net of its idle\" takes that rate off its CPU during the "
        "round: the live path (HTTP, decode, join, histograms) and the bench's own /metrics reads. \"Net of "
        "none's idle\" takes off the `none` mode's rate instead, as earlier pages did (another process, "
        "minutes apart). `settle` reads the exporter's /metrics once a second while it waits for the last "
        f"spans (until it has counted every request sent, or its count stood still for {OTLP_QUIET_S:g} s over "
        f"OTLP, {QUIET_S:g} s from a trace file); then the exporter's CPU over {READ_COST_READS} reads in a row, "
        "net of its idle, gives the cost of one read, and \"live path\" takes the round's reads off too: what "
        "the goal judges. \"Ingest (its own count)\" is the exporter's `tidescale_exporter_ingest_cpu_seconds_total` "
        "delta: the CPU time of the threads that decoded, joined and counted the traces, with none of the "
        "exporter's idle work in it. Over OTLP it runs from a body's decompression to the histograms, without the "
        "HTTP server's own work, so it is a floor under the live path; from a trace file it holds every "
        "poll of the tailer (once a second, reading, decoding and joining), the idle ones too. Traced "
        "requests = requests / N. The exporter's P99 is `histogram_quantile(0.99, …)` "
        "over the delta of its request-stage buckets (REQUEST_START to REQUEST_END inside Triton); the "
        "client's P99 is over exactly the requests it sent, HTTP included, so the error includes what the "
        "server cannot see.",
        "",
        markdown_table(header, rows),
        "",
        *spread,
        *summaries,
        *failures,
        "",
        *_split_lines(result),
        "## Goals (reported, not asserted)",
        "",
        *_goal_lines(result),
        "",
        f"![Triton and exporter CPU per request, and P99 error, by mode]({RESULT_PNG.name})",
        "",
        *json_block(result),
    ])


def plot(result: dict[str, Any], path: Path) -> None:
    """Triton CPU per request, exporter CPU per traced request and the P99 errors, by mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = result["modes"]
    names = [r["mode"] for r in modes]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4.2))
    cpu = [r["triton_cpu_us_per_request"] or 0.0 for r in modes]
    rounds = [[v for v in r["triton_cpu_us_per_request_by_round"] or [] if v is not None] or [c]
              for r, c in zip(modes, cpu, strict=True)]
    spread = [[c - min(v) for c, v in zip(cpu, rounds, strict=True)],
              [max(v) - c for c, v in zip(cpu, rounds, strict=True)]]
    bars = ax1.bar(names, cpu, color="tab:blue", yerr=spread, capsize=3, ecolor="grey")
    ax1.bar_label(bars, ["failed" if r["error"] else number(r["triton_cpu_us_per_request"], ".0f") for r in modes],
                  fontsize=7, padding=2)
    base = next((r["triton_cpu_us_per_request"] for r in modes if r["mode"] == "none"), None)
    if base is not None:
        ax1.axhline(base, color="grey", ls="--", lw=1, label="none")
        ax1.axhline(base + GOALS["triton_added_cpu_us_max"], color="tab:red", ls=":", lw=1, label="none + 10 µs goal")
        ax1.legend(fontsize=8, loc="lower right")
    ax1.set(title="Triton CPU per request (whiskers: its rounds)", ylabel="µs CPU / request")
    traced = [r for r in modes if r["traced_requests"]]
    unjudged = {m for m, e in result.get("goals", {}).get("exporter_cpu_per_traced_request", {}).items()
                if e.get("within_noise")}
    xs = np.arange(len(traced))
    for offset, key, label in ((-0.3, "exporter_cpu_us_per_traced_request", "all"),
                               (-0.1, "exporter_net_cpu_us_per_traced_request", "net of its own idle"),
                               (0.1, "exporter_live_cpu_us_per_traced_request", "live path"),
                               (0.3, "exporter_ingest_cpu_us_per_traced_request", "ingest (its own count)")):
        values = [r.get(key) for r in traced]
        # The live figure of a mode whose goal is not judged is drawn faint and labelled so, as the page says.
        faint = [key == "exporter_live_cpu_us_per_traced_request" and r["mode"] in unjudged for r in traced]
        bars = ax2.bar(xs + offset, [max(v or 0.0, 1e-3) for v in values], 0.2, label=label)
        for bar, pale in zip(bars, faint, strict=True):
            bar.set_alpha(0.35 if pale else 1.0)
        ax2.bar_label(bars, ["–" if v is None or v <= 0 else "noise" if pale else f"{v:.0f}"
                             for v, pale in zip(values, faint, strict=True)], fontsize=7)
        for x, v in zip(xs + offset, values, strict=True):
            if v is not None and v <= 0:  # below what was taken off: no bar on a log axis, say why
                ax2.text(x, 1.2, "noise", rotation=90, ha="center", va="bottom", fontsize=7)
    ax2.axhline(GOALS["exporter_cpu_us_per_traced_request_max"], color="tab:red", ls=":", lw=1, label="40 µs goal")
    ax2.set_xticks(xs, [r["mode"] for r in traced])
    ax2.set(title="exporter CPU per traced request", ylabel="µs CPU / traced request (log)", yscale="log",
            ylim=(1, None))
    ax2.legend(fontsize=8)
    errs = [(r["mode"], r["p99_error"], "exporter histogram") for r in modes if r["p99_error"] is not None]
    errs += [(r["mode"], r["triton_summary_p99_error"], "Triton summary") for r in modes
             if r["triton_summary_p99_error"] is not None]
    colors = {"exporter histogram": "tab:green", "Triton summary": "tab:orange"}
    for kind, color in colors.items():
        picked = [(m, e) for m, e, k in errs if k == kind]
        if picked:
            ax3.bar([m for m, _ in picked], [100 * e for _, e in picked], color=color, label=kind)
    for limit in (-2, 2):
        ax3.axhline(limit, color="tab:red", ls=":", lw=1)
    ax3.axhline(0, color="black", lw=0.8)
    ax3.set(title="P99 error vs the client's P99", ylabel="%")
    if errs:
        ax3.legend(fontsize=8)
    for ax in (ax1, ax2, ax3):
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_command(json_only: bool = False, quick: bool = False, modes: Sequence[str] = DEFAULT_MODES,
                requests: int | None = None, client: str = "auto", concurrency: int = CONCURRENCY,
                rounds: int = ROUNDS) -> None:
    """Check the input, run every mode, write docs/benchmarks/overhead.md and .png, print the JSON."""
    parse_modes(modes)
    check_rounds(rounds)
    if requests is not None:
        check_requests(requests)
    result = bench_main(lambda progress: run(modes, requests, quick, client, concurrency, progress, rounds=rounds),
                        markdown, RESULT_MD, json_only)
    plot(result, RESULT_PNG)
