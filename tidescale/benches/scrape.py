"""`tidescale bench scrape`: what one `/metrics` scrape costs at 2,000 and 10,000 latency series.

Series are filled the way a hostile or merely busy client fills them: Triton-shaped model and
`compute` spans (five stages per model) with model names of the longest label value a client can
send (`NAME_CHARS`, longer than the label cap so every name is cut), 20 requests per model spread
over two decades of durations, so each series fills many histogram buckets. Measured:

- render: seconds to build the exposition in this process (`render_metrics`, what the route runs in
  a worker thread), and its size in bytes;
- served: `tidescale exporter serve` as a child process, one client scraping `/metrics` while
  another asks `/healthz` every 5 ms; the slowest `/healthz` answer during the scrape says whether
  the event loop stayed free (goal: under 100 ms at 2,000 series).
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from tidescale.benches.common import bench_main
from tidescale.benches.otlp_encode import encode_protobuf
from tidescale.benches.report import BENCH_DIR, markdown_table
from tidescale.devstack.exporter import spawn_exporter
from tidescale.exporters.otlp import Span

RESULT_MD = BENCH_DIR / "scrape.md"
TOKEN = "bench-token"
STAGES_PER_MODEL = 5
REQUESTS_PER_MODEL = 20
NAME_CHARS = 300
MODELS_PER_BODY = 100
GOAL_RENDER_S = 0.3
GOAL_HEALTHZ_S = 0.1
BEFORE = ("Before the fix (commit 01df338, same machine, same 2,000 series): /metrics rendered on the event "
          "loop with prometheus-client in 2.17 s (41.4 MB: labels were cut at 200 characters then), and the "
          "slowest /healthz during a scrape took 1.74 s.")


def model_name(i: int) -> str:
    return f"model-{i:06d}-".ljust(NAME_CHARS, "x")


def request_spans(rng: np.random.Generator, model: str, t0: int) -> list[Span]:
    """A model span and its compute child: all five stages of one request."""
    trace_id, model_id, compute_id = rng.bytes(16), rng.bytes(8), rng.bytes(8)
    queue, infer = (int(x) for x in rng.lognormal((12.0, 15.0), 1.0))
    rs, qs = t0, t0 + 10_000
    cs = qs + queue
    cie, cos = cs + 20_000, cs + 20_000 + infer
    ce = cos + 10_000
    return [
        Span(trace_id, model_id, b"", model, model, "1", "",
             {"REQUEST_START": rs, "QUEUE_START": qs, "REQUEST_END": ce + 5_000}),
        Span(trace_id, compute_id, model_id, "compute", None, None, "",
             {"COMPUTE_START": cs, "COMPUTE_INPUT_END": cie, "COMPUTE_OUTPUT_START": cos, "COMPUTE_END": ce}),
    ]


def bodies(series: int, seed: int = 5) -> list[bytes]:
    """Protobuf bodies that create *series* latency series (series / 5 models)."""
    rng = np.random.default_rng(seed)
    t0 = time.time_ns()
    models = [model_name(i) for i in range(series // STAGES_PER_MODEL)]
    out = []
    for start in range(0, len(models), MODELS_PER_BODY):
        spans: list[Span] = []
        for model in models[start:start + MODELS_PER_BODY]:
            for _ in range(REQUESTS_PER_MODEL):
                t0 += 1_000
                spans += request_spans(rng, model, t0)
        out.append(encode_protobuf(spans))
    return out


def render_in_process(series: int, payloads: list[bytes], repeats: int = 3) -> dict[str, float]:
    """Render seconds (median of *repeats*) and bytes of the exposition with *series* series."""
    from tidescale.exporters.otlp import decode_protobuf
    from tidescale.exporters.service import build_state, render_metrics
    from tidescale.exporters.settings import ExporterSettings

    state = build_state(ExporterSettings.model_validate({"max_series": series}))
    for body in payloads:
        samples, _ = state.joiner.add(decode_protobuf(body))
        state.latency.observe_all(samples)
    times, size = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        size = len(render_metrics(state))
        times.append(time.perf_counter() - start)
    return {"render_s": statistics.median(times), "bytes": size,
            "series": float(state.latency.series_count())}


def _healthz_during(url: str, scrape: Callable[[], int]) -> dict[str, float]:
    """Scrape once while another client asks /healthz every 5 ms; latencies seen during the scrape."""
    latencies: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=30) as client:
            while not done.is_set():
                start = time.perf_counter()
                client.get(f"{url}/healthz").raise_for_status()
                latencies.append(time.perf_counter() - start)
                time.sleep(0.005)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    time.sleep(0.05)
    start = time.perf_counter()
    size = scrape()
    wall = time.perf_counter() - start
    done.set()
    prober.join()
    return {"scrape_wall_s": wall, "scrape_bytes": float(size), "healthz_max_s": max(latencies),
            "healthz_p50_s": statistics.median(latencies), "healthz_probes": float(len(latencies))}


def served(series: int, payloads: list[bytes]) -> dict[str, float]:
    """The same series in `tidescale exporter serve`: scrape time and /healthz latency during it."""
    headers = {"content-type": "application/x-protobuf", "authorization": f"Bearer {TOKEN}"}
    with tempfile.TemporaryDirectory(prefix="tidescale-bench-scrape-") as tmp:
        proc, url = spawn_exporter(Path(tmp), token=TOKEN, env={"TIDESCALE_EXPORTER_MAX_SERIES": str(series)})
        try:
            with httpx.Client(timeout=120) as client:
                for body in payloads:
                    client.post(f"{url}/v1/traces", content=body, headers=headers).raise_for_status()
                client.get(f"{url}/metrics")  # warm-up
                return _healthz_during(url, lambda: len(client.get(f"{url}/metrics").content))
        finally:
            proc.stop()


def run(quick: bool = False, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    out: dict[str, Any] = {"name_chars": NAME_CHARS, "requests_per_model": REQUESTS_PER_MODEL,
                           "goal_render_s": GOAL_RENDER_S, "goal_healthz_s": GOAL_HEALTHZ_S, "points": {}}
    for series in (2_000,) if quick else (2_000, 10_000):
        progress(f"building spans for {series} series")
        payloads = bodies(series)
        progress(f"rendering {series} series in process")
        point = render_in_process(series, payloads)
        progress(f"scraping {series} series from a served exporter")
        point.update(served(series, payloads))
        out["points"][str(series)] = point
    return out


def markdown(result: dict[str, Any]) -> str:
    rows = [[int(p["series"]), f"{p['render_s'] * 1000:.0f}", f"{p['bytes'] / 1e6:.2f}",
             f"{p['scrape_wall_s'] * 1000:.0f}", f"{p['healthz_max_s'] * 1000:.1f}",
             f"{p['healthz_p50_s'] * 1000:.1f}", int(p["healthz_probes"])]
            for p in result["points"].values()]
    table = markdown_table(["series", "render ms", "exposition MB", "served scrape ms",
                            "/healthz max ms during scrape", "/healthz p50 ms", "probes"], rows)
    return "\n".join([
        "# Benchmark: /metrics scrape",
        "",
        "Generated by `tidescale bench scrape` (`tidescale/benches/scrape.py`). Latency series filled "
        f"with Triton-shaped spans ({result['requests_per_model']} requests per model, five stages each), "
        f"model names of {result['name_chars']} characters (cut to the label cap). *render*: building the "
        "exposition in process; *served*: `tidescale exporter serve` scraped while another client asks "
        "`/healthz` every 5 ms.",
        f"Goals at 2,000 series: render ≤ {result['goal_render_s'] * 1000:.0f} ms, "
        f"/healthz ≤ {result['goal_healthz_s'] * 1000:.0f} ms during a scrape.",
        "",
        table,
        "",
        BEFORE,
        "",
        "```json",
        __import__("json").dumps(result, indent=1, sort_keys=True),
        "```",
        "",
    ])


def run_command(json_only: bool = False, quick: bool = False) -> None:
    bench_main(lambda progress: run(quick=quick, progress=progress), markdown, RESULT_MD, json_only)
