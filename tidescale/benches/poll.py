"""`tidescale bench poll`: one poll cycle over 500+ Triton targets × 10 models.

The targets are recorded real responses served fast: the `/v2/models/stats` body Triton
2.51 returned in `fixtures/triton/real-2.51/stats.json`, replicated to 10 models whose
counters grow every poll, served by one aiohttp process on one port and reached through
500 loopback addresses (127.0.x.y), so every target is a distinct connection. Measured
per cycle, in this process: wall seconds and CPU seconds, for our poller (parsing, deltas,
histograms included) and, on the same server in the same run, two peers that only fetch
and decode: tritonclient's aio client (one per target, the documented way) and one shared
httpx.AsyncClient.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web

from tidescale.benches.common import bench_main
from tidescale.benches.report import BENCH_DIR
from tidescale.devstack.ports import free_port
from tidescale.devstack.tools import FIXTURES, REPO_ROOT

FIXTURE = FIXTURES / "triton" / "real-2.51" / "stats.json"
RESULT_MD = BENCH_DIR / "poll.md"
MODELS = 10
GOAL_S = 2.0


def synthetic_stats(models: int, cycle: int, template: dict[str, Any] | None = None) -> bytes:
    """The recorded stats of the `batcher` model as *models* models, counters scaled by cycle+1."""
    doc = template or json.loads(FIXTURE.read_text())
    base = next(m for m in doc["model_stats"] if m["name"] == "batcher")
    scale = cycle + 1

    def scaled(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: (v if k in ("batch_size", "name", "version") else scaled(v)) for k, v in obj.items()}
        if isinstance(obj, list):
            return [scaled(v) for v in obj]
        return obj * scale if isinstance(obj, int) else obj

    out = []
    for i in range(models):
        m = scaled(base)
        m["name"] = f"model_{i}"
        out.append(m)
    return json.dumps({"model_stats": out}).encode()


class FakeTriton:
    """An aiohttp app answering like Triton: /v2, /v2/models/stats, model config.

    Each client address (127.0.x.y) has its own poll counter, so counters grow per target.
    *stats_body(host, n)* can be replaced to serve resets, garbage or slow answers in tests.
    """

    def __init__(self, models: int = MODELS, version: str = "2.51.0", max_batch_size: int = 32,
                 stats_body: Callable[[str, int], bytes] | None = None, cycles: int = 64) -> None:
        self.version = version
        self.max_batch_size = max_batch_size
        self.counts: dict[str, int] = {}
        self.delay_s = 0.0
        if stats_body is None:
            template = json.loads(FIXTURE.read_text())
            bodies = [synthetic_stats(models, c, template) for c in range(cycles)]
            stats_body = lambda host, n: bodies[min(n, len(bodies) - 1)]  # noqa: E731
        self.stats_body = stats_body

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v2", self._meta)
        app.router.add_get("/v2/models/stats", self._stats)
        app.router.add_get("/v2/models/{name}/versions/{version}/config", self._config)
        return app

    async def _meta(self, request: web.Request) -> web.Response:
        return web.json_response({"name": "triton", "version": self.version, "extensions": []})

    async def _stats(self, request: web.Request) -> web.Response:
        host = request.host
        n = self.counts.get(host, 0)
        self.counts[host] = n + 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return web.Response(body=self.stats_body(host, n), content_type="application/json")

    async def _config(self, request: web.Request) -> web.Response:
        return web.json_response({"name": request.match_info["name"], "max_batch_size": self.max_batch_size})


def serve_forever(port: int, models: int = MODELS) -> None:
    """Run a FakeTriton on 0.0.0.0:*port* (the benchmark's server process)."""
    web.run_app(FakeTriton(models).app(), host="0.0.0.0", port=port, print=None, access_log=None)


def target_urls(n: int, port: int) -> list[str]:
    """*n* distinct loopback addresses on one port."""
    return [f"http://127.0.{1 + i // 250}.{1 + i % 250}:{port}" for i in range(n)]


async def _cycles(poll: Callable[[], Any], cycles: int) -> list[tuple[float, float]]:
    out = []
    for _ in range(cycles):
        w0, c0 = time.perf_counter(), time.process_time()
        await poll()
        out.append((time.perf_counter() - w0, time.process_time() - c0))
    return out


async def poll_cycles(urls: list[str], cycles: int) -> dict[str, Any]:
    """tidescale's StatsPoller over *urls*: wall and CPU seconds per cycle after a warm-up cycle."""
    from tidescale.exporters.stats_poller import StatsPoller
    from tidescale.exporters.targets import TargetSet

    poller = StatsPoller(TargetSet(urls), concurrency=64, timeout_s=10.0)
    try:
        await poller.poll_once()  # first cycle also reads server version and model configs
        timings = await _cycles(poller.poll_once, cycles)
        errors = sum(poller.self_metrics.poll_errors.values())
        return {**_summary(timings), "series": poller.series_count(), "errors": errors}
    finally:
        await poller.close()


async def _tritonclient(urls: list[str], cycles: int) -> dict[str, Any]:
    import tritonclient.http.aio as tc

    clients = [tc.InferenceServerClient(u.removeprefix("http://"), conn_timeout=10.0) for u in urls]
    sem = asyncio.Semaphore(64)

    async def one(c: Any) -> None:
        async with sem:
            await c.get_inference_statistics()

    async def poll() -> None:
        await asyncio.gather(*(one(c) for c in clients))

    try:
        await poll()
        return _summary(await _cycles(poll, cycles))
    finally:
        await asyncio.gather(*(c.close() for c in clients))


async def _httpx(urls: list[str], cycles: int) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=64, max_keepalive_connections=len(urls))
    sem = asyncio.Semaphore(64)
    async with httpx.AsyncClient(timeout=30.0, limits=limits) as client:
        async def poll() -> None:
            async def one(u: str) -> None:
                async with sem:
                    json.loads((await client.get(f"{u}/v2/models/stats")).content)

            await asyncio.gather(*(one(u) for u in urls))

        await poll()
        return _summary(await _cycles(poll, cycles))


def _summary(timings: list[tuple[float, float]]) -> dict[str, Any]:
    walls = [w for w, _ in timings]
    cpus = [c for _, c in timings]
    return {"wall_s_median": round(statistics.median(walls), 4), "wall_s_max": round(max(walls), 4),
            "cpu_s_median": round(statistics.median(cpus), 4), "cycles": len(timings)}


@contextlib.contextmanager
def fake_triton_process(models: int = MODELS) -> Iterator[int]:
    """A FakeTriton in its own process (so its CPU is not the poller's); yields its port."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tidescale.benches.poll", str(port), str(models)],
                              cwd=REPO_ROOT, stdin=subprocess.DEVNULL)
    try:
        _wait_port(port)
        yield port
    finally:
        server.terminate()
        server.wait(10)


def run(targets: int = 500, quick: bool = False, progress: Callable[[str], None] = lambda m: None
        ) -> dict[str, Any]:
    cycles = 3 if quick else 8
    with fake_triton_process() as port:
        urls = target_urls(targets, port)
        progress(f"fake Triton on :{port}; {targets} targets × {MODELS} models, {cycles} cycles each")
        results: dict[str, Any] = {}
        for name, fn in (("tidescale_poller", poll_cycles), ("tritonclient_aio_fetch_only", _tritonclient),
                         ("httpx_fetch_only", _httpx)):
            progress(f"running {name}")
            try:
                results[name] = asyncio.run(fn(urls, cycles))
            except Exception as exc:  # a peer failing is a result, not a crash of the benchmark
                results[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    ours = results["tidescale_poller"]
    return {"benchmark": "poll", "targets": targets, "models_per_target": MODELS,
            "body_bytes": len(synthetic_stats(MODELS, 0)), "cpu_count": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 1), "goal_wall_s": GOAL_S,
            "meets_goal": "error" not in ours and ours["wall_s_median"] <= GOAL_S and ours["errors"] == 0,
            "results": results}


def _wait_port(port: int, timeout: float = 20.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"fake Triton did not listen on {port}")


def markdown(result: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {name} | {r['wall_s_median']} | {r['wall_s_max']} | {r['cpu_s_median']} |" if "error" not in r
        else f"| {name} | failed: {r['error']} | | |"
        for name, r in result["results"].items())
    return f"""# Benchmark: poll

`tidescale bench poll` — {result['targets']} Triton targets × {result['models_per_target']} models per
cycle (recorded Triton 2.51 `/v2/models/stats`, {result['body_bytes']} bytes per target, served by one
aiohttp process through {result['targets']} loopback addresses), {result['cpu_count']} CPU cores shared
with the server process and other work (1-minute load average {result['load_average_1m']} at the end).
Goal: ≤ {result['goal_wall_s']} s per cycle. Met: **{result['meets_goal']}**.

| client | wall s / cycle (median) | wall s (max) | CPU s / cycle (median) |
|---|---|---|---|
{rows}

`tidescale_poller` does the whole job (fetch, parse, reset-safe deltas, histograms, efficiency,
queue estimate); the two peers only fetch and JSON-decode the same responses.
Series exported after the run: {result['results']['tidescale_poller'].get('series')};
poll errors: {result['results']['tidescale_poller'].get('errors')}.

```json
{json.dumps(result, indent=1, sort_keys=True)}
```
"""


def run_command(json_only: bool = False, quick: bool = False, targets: int = 500) -> None:
    """Run the benchmark, write docs/benchmarks/poll.md, print the JSON result."""
    bench_main(lambda progress: run(targets=targets, quick=quick, progress=progress), markdown, RESULT_MD, json_only)


if __name__ == "__main__":  # pragma: no cover
    serve_forever(int(sys.argv[1]), *(int(a) for a in sys.argv[2:3]))
