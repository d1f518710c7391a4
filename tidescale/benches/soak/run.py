"""`tidescale bench soak`: each service alone, for `--duration` seconds, under normal and hostile traffic.

One service at a time (the exporter, then the review service, then the recommender), so that on a
small machine one service's load never shows in another's figures. For each:

1. the service starts as its own process (`services.py`), and a watcher process (`monitor.py`)
   probes its `/healthz` on the health port every `--probe-every` seconds and reads its RSS, open
   files and CPU every `--sample-every` seconds;
2. this process drives, on one event loop, the normal clients (`--normal-rps` requests a second
   between them) and, at the same time, the hostile ones (`attacks.py`): `--slowloris` connections
   trickling a request head, `--trickled` writes without a token trickling a body, a body past the cap
   every `--oversized-every` seconds (with the token and without, declared, undeclared and lied about),
   a write with a bad token every `--bad-token-every` seconds, and every `--flood-every` seconds a
   flood of idle connections, the connection cap and `--flood-past-cap` more;
3. the figures: the share of normal requests served (2xx), `/healthz` latency (max, P99) and
   failures, RSS and open files after the warm-up against the goals (`stats.py`), and what each
   attack met.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tidescale.benches.report import BENCH_DIR
from tidescale.benches.soak import attacks, stats
from tidescale.benches.soak.services import SERVICES, STARTERS, Agent, Started
from tidescale.contracts.errors import UsageError
from tidescale.devstack.ports import LOOPBACK

RESULT_MD = BENCH_DIR / "soak.md"
RESULT_PNG = RESULT_MD.with_suffix(".png")
NORMAL_TIMEOUT_S = 10.0  # Prometheus' default scrape timeout; the normal clients' overall deadline
KEEPALIVE_S = 30.0  # the normal clients' idle connections: under every service's keep_alive_s (75 s)
PROBE_TIMEOUT_S = 3.0  # the chart's probes' timeoutSeconds
AGENT_GRACE_S = NORMAL_TIMEOUT_S + 1.0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    duration_s: float = 600.0
    services: tuple[str, ...] = SERVICES
    normal_rps: float = 5.0
    slowloris: int = 40
    trickled: int = 10
    flood_every_s: float = 60.0
    flood_past_cap: int = 200
    oversized_every_s: float = 3.0
    bad_token_every_s: float = 1.0
    probe_every_s: float = 0.5
    sample_every_s: float = 2.0
    warmup_share: float = stats.WARMUP_SHARE
    workdir: Path | None = None
    seed: int = 0

    def check(self) -> None:
        """UsageError (exit 2) on a value the bench cannot run with, before anything starts."""
        unknown = [s for s in self.services if s not in SERVICES]
        if unknown or not self.services:
            raise UsageError(f"--services: unknown service(s) {', '.join(map(repr, unknown)) or '(none given)'}; "
                             f"choose from {', '.join(SERVICES)}")
        if len(set(self.services)) != len(self.services):
            raise UsageError("--services: a service is named twice")
        positive = {"--duration": self.duration_s, "--normal-rps": self.normal_rps,
                    "--probe-every": self.probe_every_s, "--sample-every": self.sample_every_s}
        for flag, value in positive.items():
            if not (value > 0 and value < float("inf")):
                raise UsageError(f"{flag} must be a positive number, got {value}")
        if self.duration_s < 5:
            raise UsageError(f"--duration must be at least 5 s, got {self.duration_s:g}")
        for flag, count in (("--slowloris", self.slowloris), ("--trickled", self.trickled),
                            ("--flood-past-cap", self.flood_past_cap)):
            if count < 0:
                raise UsageError(f"{flag} must be 0 or more, got {count}")
        for flag, every in (("--flood-every", self.flood_every_s), ("--oversized-every", self.oversized_every_s),
                            ("--bad-token-every", self.bad_token_every_s)):
            if not (every >= 0 and every < float("inf")):
                raise UsageError(f"{flag} must be 0 (off) or a positive number of seconds, got {every}")
        if not 0 <= self.warmup_share < 1:
            raise UsageError(f"--warmup must be a share in [0, 1), got {self.warmup_share}")

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["services"] = list(self.services)
        out.pop("workdir")
        return out


def flood_starts(duration_s: float, every_s: float, header_timeout_s: float) -> list[float]:
    """When floods start (seconds into the run): the first at 5 % of the run (within the warm-up, at most
    half a period in), then one every *every_s*, each only if the server's header deadline closes its
    connections before the run ends; none when *every_s* is 0."""
    if every_s <= 0:
        return []
    t, out = min(every_s / 2, 0.05 * duration_s), []
    while t + header_timeout_s + attacks.HOLD_SLACK_S <= duration_s:
        out.append(round(t, 3))
        t += every_s
    return out


@dataclass
class Driven:
    """What the load generator saw (times in seconds since the run started)."""

    normal: dict[str, Counter[str]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    tally: attacks.Tally = field(default_factory=attacks.Tally)
    floods: list[tuple[float, float]] = field(default_factory=list)


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, seconds))


async def run_agent(agent: Agent, base_url: str, interval_s: float, phase_s: float, stop: asyncio.Event,
                    driven: Driven) -> None:
    """One normal client: a request every *interval_s* (after *phase_s*) on one keep-alive connection."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=KEEPALIVE_S)
    counts = driven.normal.setdefault(agent.route, Counter())
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=NORMAL_TIMEOUT_S) as client:
        tick = loop.time() + phase_s
        await _pause(stop, phase_s)
        n = 0
        while not stop.is_set():
            body = agent.body(n) if agent.body is not None else None
            start = time.perf_counter()
            try:
                answer = await client.request(agent.method, agent.path, headers=agent.headers, content=body)
                outcome = str(answer.status_code)
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
            driven.latencies.append(time.perf_counter() - start)
            counts[outcome] += 1
            n += 1
            tick += interval_s
            await _pause(stop, tick - loop.time())


async def run_floods(target: attacks.Target, starts: list[float], size: int, t0: float, duration_s: float,
                     stop: asyncio.Event, driven: Driven) -> None:
    """The floods at their *starts*; each one's window runs from its first connect to its last connection
    gone (one cut short by the run's end: to the end)."""
    for at in starts:
        await _pause(stop, t0 + at - time.monotonic())
        if stop.is_set():
            return
        index = len(driven.floods)
        driven.floods.append((time.monotonic() - t0, duration_s))
        start, end = await attacks.flood(target, driven.tally, size)
        driven.floods[index] = (start - t0, end - t0)


async def drive(started: Started, opts: Options, t0: float, rng: random.Random) -> Driven:
    """The normal and the hostile traffic at once, for the run's duration from *t0* (time.monotonic())."""
    driven = Driven()
    stop = asyncio.Event()
    target = started.target
    base_url = f"http://{target.host}:{target.port}"
    interval = len(started.agents) / opts.normal_rps
    agents = [asyncio.ensure_future(run_agent(a, base_url, interval, rng.uniform(0, interval), stop, driven))
              for a in started.agents]
    hostile: list[asyncio.Future[Any]] = []
    hostile += [asyncio.ensure_future(attacks.slowloris(target, driven.tally, stop)) for _ in range(opts.slowloris)]
    hostile += [asyncio.ensure_future(attacks.trickled_body(target, driven.tally, stop)) for _ in range(opts.trickled)]
    if opts.oversized_every_s > 0:
        hostile.append(asyncio.ensure_future(attacks.oversized(target, driven.tally, stop, opts.oversized_every_s)))
    if opts.bad_token_every_s > 0:
        hostile.append(asyncio.ensure_future(attacks.bad_tokens(target, driven.tally, stop, opts.bad_token_every_s)))
    starts = flood_starts(opts.duration_s, opts.flood_every_s, target.header_timeout_s)
    size = target.max_connections + opts.flood_past_cap
    hostile.append(asyncio.ensure_future(run_floods(target, starts, size, t0, opts.duration_s, stop, driven)))
    await asyncio.sleep(max(0.0, t0 + opts.duration_s - time.monotonic()))
    stop.set()
    for task in hostile:  # what is in flight at the end is not counted
        task.cancel()
    await asyncio.gather(*hostile, return_exceptions=True)
    _, late = await asyncio.wait(agents, timeout=AGENT_GRACE_S)
    for task in late:
        task.cancel()
    await asyncio.gather(*agents, return_exceptions=True)
    return driven


def start_monitor(started: Started, opts: Options, t0: float) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "tidescale.benches.soak.monitor", "--pid", str(started.proc.pid),
            "--host", LOOPBACK, "--port", str(started.health_port), "--t0", repr(t0),
            "--probe-every", str(opts.probe_every_s), "--sample-every", str(opts.sample_every_s),
            "--probe-timeout", str(PROBE_TIMEOUT_S)]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def stop_monitor(monitor: subprocess.Popen[bytes]) -> dict[str, Any]:
    out, _ = monitor.communicate(timeout=PROBE_TIMEOUT_S + 30)
    seen: dict[str, Any] = json.loads(out or b"{}")
    return seen


def raise_open_files(need: int) -> None:
    """The flood holds a connection cap's worth of sockets in this process: raise the soft limit to fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        wanted = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def soak_one(name: str, opts: Options, workdir: Path, progress: Progress) -> dict[str, Any]:
    """Start *name*, soak it for the run's duration, stop it: its result (with its series for the plot)."""
    svc_dir = workdir / name
    svc_dir.mkdir(parents=True, exist_ok=True)
    started = STARTERS[name](svc_dir)
    try:
        raise_open_files(started.target.max_connections + opts.flood_past_cap + opts.slowloris + 512)
        t0 = time.monotonic()
        monitor = start_monitor(started, opts, t0)
        try:
            progress(f"{name}: pid {started.proc.pid}, {opts.duration_s:g} s of normal and hostile traffic")
            driven = asyncio.run(drive(started, opts, t0, random.Random(opts.seed)))
        finally:
            seen = stop_monitor(monitor)
        exit_code = started.proc.returncode
    finally:
        started.stop()
    log_bytes = started.proc.log_path.stat().st_size if started.proc.log_path.exists() else 0
    return summarise(name, opts, started, driven, seen, exit_code, log_bytes)


def summarise(name: str, opts: Options, started: Started, driven: Driven, seen: dict[str, Any],
              exit_code: int | None, log_bytes: int) -> dict[str, Any]:
    end = opts.duration_s
    probes = [stats.Probe(t, latency, ok, detail) for t, latency, ok, detail in seen.get("probes", []) if t <= end]
    samples = [stats.Sample(t, rss, fds, cpu) for t, rss, fds, cpu in seen.get("samples", []) if t <= end]
    interval = len(started.agents) / opts.normal_rps
    normal = stats.served({route: dict(c) for route, c in driven.normal.items()})
    normal.update({"latency_p50_s": stats.percentile(driven.latencies, 50),
                   "latency_p99_s": stats.percentile(driven.latencies, 99),
                   "latency_max_s": max(driven.latencies, default=None),
                   "clients": [{"name": a.name, "route": a.route, "every_s": round(interval, 3)}
                               for a in started.agents]})
    hostile = driven.tally.as_json()
    takes_writes = bool(started.target.writes)
    for kind, data in hostile.items():
        data["limits_held"] = stats.limits_held(kind, data, started.target.header_timeout_s, takes_writes)
    result: dict[str, Any] = {
        "service": name,
        "duration_s": opts.duration_s,
        "limits": started.limits,
        "normal": normal,
        "healthz": stats.healthz(probes),
        "resources": stats.resources(samples, opts.duration_s, driven.floods, opts.warmup_share),
        "hostile": hostile,
        "floods": [[round(s, 2), round(e, 2)] for s, e in driven.floods],
        "log_bytes": log_bytes,
        "exit_code": exit_code,  # None: it was still running when the run ended
        "series": {"samples": [[s.t, s.rss_bytes, s.fds] for s in samples],
                   "probes": [[p.t, p.latency_s, p.ok] for p in probes]},
    }
    result["goals"] = stats.goals(result)
    return result


def run(opts: Options, progress: Progress = lambda _: None) -> dict[str, Any]:
    """Soak every service of *opts* in turn; the whole result (each service's series included)."""
    opts.check()
    load_before = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory(prefix="tidescale-bench-soak-") as tmp:
        workdir = opts.workdir or Path(tmp)
        for name in opts.services:
            results[name] = soak_one(name, opts, workdir, progress)
            progress(f"{name}: {verdict_line(results[name])}")
    met = [v for r in results.values() for v in r["goals"].values()]
    return {
        "benchmark": "soak",
        "schedule": "each service alone, one after another",
        "options": opts.as_json(),
        "goals": {"rss_margin": stats.RSS_MARGIN, "fd_margin": stats.FD_MARGIN, "settle_s": stats.SETTLE_S,
                  "healthz_p99_s": stats.HEALTHZ_P99_S, "normal_served_min": stats.SERVED_MIN,
                  "warmup_share": opts.warmup_share},
        "cpu_count": os.cpu_count(),
        "load_average_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "all_goals_met": bool(met) and all(v is True for v in met),
        "services": results,
    }


def verdict_line(result: dict[str, Any]) -> str:
    n, h = result["normal"], result["healthz"]
    share = "–" if n["share"] is None else f"{100 * n['share']:.2f} %"
    p99 = "–" if h["p99_s"] is None else f"{1000 * h['p99_s']:.1f} ms"
    missed = [g for g, ok in result["goals"].items() if ok is False]
    return (f"served {share} of {n['sent']}, /healthz P99 {p99} ({h['failures']} failed), "
            f"{'goals met' if not missed else 'missed: ' + ', '.join(missed)}")


def public(result: dict[str, Any]) -> dict[str, Any]:
    """The result as printed and recorded: without the series (the plot shows them)."""
    out = dict(result)
    out["services"] = {name: {k: v for k, v in r.items() if k != "series"} for name, r in result["services"].items()}
    return out


def run_command(opts: Options, json_only: bool = False, record: bool = True) -> dict[str, Any]:
    """Check the options, soak, write docs/benchmarks/soak.md and soak.png, print the JSON."""
    from rich.console import Console

    from tidescale.benches.soak import report

    opts.check()
    console = Console(stderr=True)

    def progress(msg: str) -> None:
        if not json_only:
            console.log(msg)

    result = run(opts, progress)
    shown = public(result)
    if record:
        RESULT_MD.parent.mkdir(parents=True, exist_ok=True)
        report.plot(result, RESULT_PNG)
        RESULT_MD.write_text(report.markdown(shown, RESULT_PNG.name))
        progress(f"wrote {RESULT_MD} and {RESULT_PNG}")
    print(json.dumps(shown, indent=None if json_only else 1, sort_keys=True))
    return shown
