"""`tidescale bench sim`: how fast the fleet simulator runs, against a naive event-per-request peer.

The workload is the issue's figure: 1 simulated hour of Poisson traffic at 2,000 req/s over 50
replicas of the V100-calibrated model (quick: 5 minutes), stepped the way an autoscaling
experiment steps it (scrape every 15 s through MetricsLag). The peer is the textbook
discrete-event loop (`fastsim.reference`, one heap event per arrival/timer/completion) on a short
slice of the same traffic, extrapolated per request; on that slice both must give identical
latencies, which the result records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tidescale.benches.report import markdown_table, write_page
from tidescale.sim import BatcherConfig, FleetSim, MetricsLag
from tidescale.sim.reference import simulate_naive
from tidescale.sim.samples import sample_quantile
from tidescale.sim.servicecurve import ServiceCurve

GOAL_WALL_SECONDS = 30.0
STEP_S = 15.0
BATCHING_REPLICAS = 20


def poisson_chunk(rng: np.random.Generator, rate: float, start: float, end: float) -> np.ndarray:
    """Homogeneous Poisson arrivals in [start, end), generated with numpy only."""
    n = rng.poisson(rate * (end - start))
    return np.sort(rng.uniform(start, end, n))


def run_fast(duration_s: float, rps: float, replicas: int, seed: int = 0,
             progress: Callable[[float], None] | None = None, scheduler: str = "stepped") -> dict[str, Any]:
    """Run the simulator over the whole duration; times only the simulation, not arrival generation."""
    sim = FleetSim(ServiceCurve.v100(), BatcherConfig(scheduler=scheduler), replicas, cold_start_s=45.0, seed=seed,
                   keep_history_s=STEP_S * 4)
    lag = MetricsLag(sim, scrape_interval_s=STEP_S)
    rng = np.random.default_rng(seed)
    gen_s, requests, t = 0.0, 0, 0.0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while t < duration_s:
        g0 = time.perf_counter()
        chunk = poisson_chunk(rng, rps, t, min(duration_s, t + STEP_S))
        gen_s += time.perf_counter() - g0
        requests += len(chunk)
        sim.offer(chunk)
        t = min(duration_s, t + STEP_S)
        lag.advance(t)
        if progress is not None:
            progress(t)
    observed_rps = lag.rate("requests", 60.0)  # what a controller saw at the end
    lag.advance(duration_s + 60.0)  # let the last requests finish
    wall = time.perf_counter() - wall0 - gen_s
    cpu = time.process_time() - cpu0 - gen_s
    c = sim.counters()
    tail = sim.completed(since_t=duration_s - STEP_S * 3)
    return {
        "simulated_seconds": duration_s,
        "requests": requests,
        "completed": c.requests,
        "replicas": replicas,
        "wall_seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "arrival_generation_seconds": round(gen_s, 3),
        "requests_per_wall_second": round(requests / wall),
        "executions": c.exec_count,
        "mean_batch_size": round(c.inference_count / max(c.exec_count, 1), 3),
        "mean_latency_ms": round(1e3 * c.request_duration_s / max(c.requests, 1), 3),
        "p99_latency_ms_last_45s": round(1e3 * tail.latency_quantile(0.99), 3),
        "controller_observed_rps_at_end": None if observed_rps is None else round(observed_rps, 1),
    }


def run_peer(slice_s: float, rps: float, replicas: int, seed: int = 0) -> dict[str, Any]:
    """The naive per-request event loop on a slice, and the fast sim on the same slice (must agree)."""
    curve, cfg = ServiceCurve.v100(), BatcherConfig()
    arrivals = poisson_chunk(np.random.default_rng(seed + 7), rps, 0.0, slice_s)
    t0 = time.perf_counter()
    ref = simulate_naive(curve, cfg, replicas, arrivals, seed=seed)
    naive_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim = FleetSim(curve, cfg, replicas, cold_start_s=0.0, seed=seed, keep_history_s=None)
    sim.offer(arrivals)
    sim.advance(slice_s + 60.0)
    fast_wall = time.perf_counter() - t0
    fast_lat = np.sort(sim.completed().latency)
    ref_lat = np.sort(ref.latencies)
    same = len(fast_lat) == len(ref_lat) and bool(np.allclose(fast_lat, ref_lat, rtol=0, atol=1e-9))
    return {
        "name": "naive per-request heapq event loop",
        "slice_simulated_seconds": slice_s,
        "slice_requests": len(arrivals),
        "slice_wall_seconds": round(naive_wall, 3),
        "requests_per_wall_second": round(len(arrivals) / naive_wall),
        "fast_sim_slice_wall_seconds": round(fast_wall, 3),
        "identical_latencies_on_slice": same,
        "p99_latency_ms_on_slice": round(1e3 * float(sample_quantile(ref_lat, 0.99) or 0.0), 3),
    }


def run_bench(quick: bool, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    duration = 300.0 if quick else 3600.0
    rps, replicas = 2000.0, 50
    fast = run_fast(duration, rps, replicas, progress=progress)
    peer = run_peer(10.0, rps, replicas)
    peer["extrapolated_wall_seconds"] = round(fast["requests"] / peer["requests_per_wall_second"], 1)
    full_projection = fast["wall_seconds"] * (3600.0 / duration)
    return {
        **fast,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "quick": quick,
        "goal_wall_seconds": GOAL_WALL_SECONDS,
        "meets_goal": full_projection <= GOAL_WALL_SECONDS,
        "projected_wall_seconds_for_1h": round(full_projection, 2),
        "speedup_vs_peer": round(fast["requests_per_wall_second"] / peer["requests_per_wall_second"], 1),
        "peer": peer,
        "batching_variant": run_variant(duration / 6, rps, BATCHING_REPLICAS),
        "triton_mode": run_triton_mode(duration / 6, rps, replicas),
    }


def run_triton_mode(duration_s: float, rps: float, replicas: int) -> dict[str, Any]:
    """The same workload with the event-by-event triton-2.51 scheduler model, projected to 1 h."""
    fast = run_fast(duration_s, rps, replicas, scheduler="triton-2.51")
    return {
        "simulated_seconds": duration_s,
        "cpu_seconds": fast["cpu_seconds"],
        "requests_per_wall_second": fast["requests_per_wall_second"],
        "projected_cpu_seconds_for_1h": round(fast["cpu_seconds"] * 3600.0 / duration_s, 1),
    }


def run_variant(duration_s: float, rps: float, replicas: int) -> dict[str, Any]:
    """The same traffic on fewer replicas (~100 req/s each): real batching, so fewer, larger batches."""
    fast = run_fast(duration_s, rps, replicas, seed=1)
    peer = run_peer(5.0, rps, replicas, seed=1)
    return {
        "replicas": replicas,
        "simulated_seconds": duration_s,
        "requests": fast["requests"],
        "cpu_seconds": fast["cpu_seconds"],
        "requests_per_wall_second": fast["requests_per_wall_second"],
        "mean_batch_size": fast["mean_batch_size"],
        "peer_requests_per_wall_second": peer["requests_per_wall_second"],
        "peer_identical_latencies_on_slice": peer["identical_latencies_on_slice"],
        "speedup_vs_peer": round(fast["requests_per_wall_second"] / peer["requests_per_wall_second"], 1),
    }


def render(result: dict[str, Any]) -> str:
    peer = result["peer"]
    rows = [
        ["fastsim (batch-stepped)", result["simulated_seconds"], result["requests"], result["wall_seconds"],
         result["cpu_seconds"], result["requests_per_wall_second"]],
        [peer["name"] + " (extrapolated)", result["simulated_seconds"], result["requests"],
         peer["extrapolated_wall_seconds"], "", peer["requests_per_wall_second"]],
    ]
    verdict = "meets" if result["meets_goal"] else "misses"
    return (
        "# bench sim: fast fleet simulator speed\n\n"
        f"`tidescale bench sim{' --quick' if result['quick'] else ''}`: Poisson traffic at 2,000 req/s over "
        f"{result['replicas']} replicas of the V100-calibrated model (max batch 32, preferred 8/16, 2 ms queue "
        "delay), scraped every 15 s through `MetricsLag`, one process on the shared 2-core machine. "
        "Arrival generation is excluded from the timings.\n\n"
        + markdown_table(["simulator", "simulated s", "requests", "wall s", "CPU s", "requests / wall s"], rows)
        + f"\n\nGoal: 1 simulated hour in <= {GOAL_WALL_SECONDS:g} s. Projected for 1 h: "
        f"{result['projected_wall_seconds_for_1h']} s, so this run **{verdict}** the goal; "
        f"{result['speedup_vs_peer']}x the naive peer's throughput. On a {peer['slice_simulated_seconds']:g} s "
        f"slice ({peer['slice_requests']} requests) both simulators produced "
        f"{'identical' if peer['identical_latencies_on_slice'] else 'DIFFERENT'} per-request latencies.\n"
        f"\nWith real batching ({_variant_line(result)}).\n"
        f"\nThe event-by-event `triton-2.51` scheduler model on the same workload: "
        f"{result['triton_mode']['requests_per_wall_second']} requests per wall second, "
        f"{result['triton_mode']['projected_cpu_seconds_for_1h']} CPU s projected for 1 h.\n"
        f"\nCPU seconds are the one-core cost; wall seconds also include waiting for the CPU on the shared "
        f"machine (1-minute load average {result.get('load_average_1m', 'n/a')} on 2 cores at the end of the run)."
        "\n"
        f"\nMean batch size {result['mean_batch_size']}, mean latency {result['mean_latency_ms']} ms, "
        f"P99 (last 45 s) {result['p99_latency_ms_last_45s']} ms.\n"
    )


def record(result: dict[str, Any]) -> None:
    write_page("sim", render(result), result)


def _variant_line(result: dict[str, Any]) -> str:
    v = result.get("batching_variant")
    if not v:
        return "not run"
    return (f"the same traffic over {v['replicas']} replicas for {v['simulated_seconds']:g} s, mean batch "
            f"{v['mean_batch_size']}: {v['requests_per_wall_second']} requests per wall second, "
            f"{v['speedup_vs_peer']}x the naive peer, identical latencies on the slice: "
            f"{v['peer_identical_latencies_on_slice']}")
