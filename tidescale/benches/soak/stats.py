"""The soak's arithmetic, pure: percentiles, warm-up vs the rest, flatness, the share served, the goals.

Flat means: after the warm-up (the first `WARMUP_SHARE` of a service's run), the largest settled
sample is within a margin of the first settled sample (RSS: +`RSS_MARGIN` of it; open file
descriptors: +`FD_MARGIN`). A sample is *settled* when it was not taken during a flood of idle
connections or within `SETTLE_S` after the flood's connections were gone: a flood holds up to the
connection cap's worth of sockets (and their buffers) on purpose, and those are bounded by the cap,
not leaked; the samples taken then are kept and reported as the flood peak. The least-squares slope
of the settled samples after the warm-up is reported with the verdict (per minute).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tidescale.sim.samples import sample_quantile

WARMUP_SHARE = 0.2
RSS_MARGIN = 0.10  # the rest's largest RSS may exceed its first by this share
FD_MARGIN = 16  # ... and its open file descriptors by this many
SETTLE_S = 2.0  # after a flood's last connection is gone, its sockets are counted this long still
HEALTHZ_P99_S = 0.1
SERVED_MIN = 0.999
HOLD_SLACK_S = 5.0  # a connection the server must close at its header deadline may take this much longer

Window = tuple[float, float]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank *q*-th percentile (0 < q <= 100): the smallest value with at least q % of the
    values at or below it; None for no values."""
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is not in (0, 100]")
    return sample_quantile(values, q / 100, "inverted_cdf")


def slope_per_min(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per minute; None for fewer than two distinct times."""
    if len(points) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return 60.0 * sum((t - mt) * (v - mv) for t, v in points) / var


def in_windows(t: float, windows: Iterable[Window], settle_s: float = SETTLE_S) -> bool:
    """Whether *t* falls in any (start, end) window, or within *settle_s* after its end."""
    return any(start <= t <= end + settle_s for start, end in windows)


@dataclass(frozen=True)
class Sample:
    """One reading of the service process (t: seconds since the service's run started)."""

    t: float
    rss_bytes: int
    fds: int
    cpu_s: float = 0.0


def flatness(points: Sequence[tuple[float, float]], margin: float, relative: bool) -> dict[str, Any]:
    """The verdict on settled (t, value) points after the warm-up: their first value, their largest,
    the limit (the first + *margin*, a share of it when *relative*), flat or not, and the slope."""
    if not points:
        return {"samples": 0, "start": None, "max": None, "limit": None, "flat": None, "slope_per_min": None}
    start = points[0][1]
    top = max(v for _, v in points)
    limit = start * (1 + margin) if relative else start + margin
    return {"samples": len(points), "start": start, "max": top, "limit": limit, "flat": top <= limit,
            "slope_per_min": slope_per_min(points)}


def resources(samples: Sequence[Sample], duration_s: float, floods: Sequence[Window],
              warmup_share: float = WARMUP_SHARE) -> dict[str, Any]:
    """RSS and open files: warm-up vs the rest (flatness of the settled samples), and the flood peaks."""
    warmup_end = warmup_share * duration_s
    warm = [s for s in samples if s.t < warmup_end]
    rest = [s for s in samples if s.t >= warmup_end]
    settled = [s for s in rest if not in_windows(s.t, floods)]
    during = [s for s in samples if in_windows(s.t, floods)]
    cpu = None
    if len(samples) >= 2 and samples[-1].t > samples[0].t:
        cpu = (samples[-1].cpu_s - samples[0].cpu_s) / (samples[-1].t - samples[0].t)
    return {
        "warmup_s": warmup_end,
        "samples": len(samples),
        "samples_settled_after_warmup": len(settled),
        "rss": {"warmup_max_bytes": max((s.rss_bytes for s in warm), default=None),
                "flood_max_bytes": max((s.rss_bytes for s in during), default=None),
                **flatness([(s.t, float(s.rss_bytes)) for s in settled], RSS_MARGIN, relative=True)},
        "fds": {"warmup_max": max((s.fds for s in warm), default=None),
                "flood_max": max((s.fds for s in during), default=None),
                **flatness([(s.t, float(s.fds)) for s in settled], FD_MARGIN, relative=False)},
        "cpu_share": cpu,  # CPU seconds per second of the service process over the run
    }


@dataclass(frozen=True)
class Probe:
    """One /healthz probe: when (seconds since the run started), how long, and whether it answered 200.
    A probe that timed out counts as taking its whole timeout."""

    t: float
    latency_s: float
    ok: bool
    detail: str = "200"


def healthz(probes: Sequence[Probe]) -> dict[str, Any]:
    """Latency (max, P50, P99) of every probe, failed ones included, and the failures (the longest run
    of consecutive ones: the kubelet restarts a pod after 3)."""
    latencies = [p.latency_s for p in probes]
    failures: dict[str, int] = {}
    run = longest = 0
    for p in probes:
        if p.ok:
            run = 0
            continue
        failures[p.detail] = failures.get(p.detail, 0) + 1
        run += 1
        longest = max(longest, run)
    return {"probes": len(probes), "max_s": max(latencies, default=None), "p50_s": percentile(latencies, 50),
            "p99_s": percentile(latencies, 99), "failures": sum(failures.values()), "failure_kinds": failures,
            "longest_failure_run": longest}


def served(outcomes: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Normal requests by route: {route: {outcome: count}}, an outcome being the status code or an
    error's name; served = 2xx. The share served of all sent, and per route."""
    routes = {}
    sent = ok = 0
    for route, counts in sorted(outcomes.items()):
        n = sum(counts.values())
        good = sum(c for k, c in counts.items() if k.isdigit() and 200 <= int(k) < 300)
        routes[route] = {"sent": n, "served": good, "outcomes": dict(sorted(counts.items()))}
        sent += n
        ok += good
    return {"sent": sent, "served": ok, "share": ok / sent if sent else None, "routes": routes}


def goals(result: dict[str, Any]) -> dict[str, bool | None]:
    """Each goal met (True), missed (False) or not judged (None: no data) for one service's result."""
    res, probe, normal = result["resources"], result["healthz"], result["normal"]
    p99 = probe["p99_s"]
    return {
        "rss_flat": res["rss"]["flat"],
        "fds_flat": res["fds"]["flat"],
        "healthz_p99": None if p99 is None else (p99 < HEALTHZ_P99_S and probe["failures"] == 0),
        "normal_served": None if normal["share"] is None else normal["share"] >= SERVED_MIN,
    }


def _is_4xx(outcome: str) -> bool:
    return outcome.isdigit() and 400 <= int(outcome) < 500


def limits_held(kind: str, data: dict[str, Any], header_timeout_s: float, takes_writes: bool) -> bool | None:
    """Whether what an attack met is what the service's Limits section promises (None: nothing to judge).

    Any connection may meet a 503 at once (the cap was full: a flood). Otherwise:
    - slowloris: closed by the server, no answer, within the header deadline (+ HOLD_SLACK_S);
    - a body trickled without a token: answered 4xx at once (401; 405 where there is no write route),
      and the connection closed a header deadline after that answer;
    - a flood: each connection refused (503) or closed, within the header deadline;
    - an oversized body: answered 4xx (401 without the token, 413 with it, 400 for a body that lied
      about its length) or closed, never served;
    - a bad token: 401 on a write route; a service that takes no token (the recommender) is not judged.
    """
    outcomes: dict[str, int] = data.get("outcomes", {})
    if not outcomes:
        return None
    held_max = data.get("held_max_s")
    in_time = held_max is None or held_max <= header_timeout_s + HOLD_SLACK_S
    seen = {o for o in outcomes if o != "503"}
    if kind == "slowloris":
        return seen <= {"closed"} and in_time
    if kind == "trickled_body_no_token":
        return all(_is_4xx(o) for o in seen) and in_time
    if kind == "flood":
        return seen <= {"closed"} and in_time
    if kind == "oversized_body":
        return all(_is_4xx(o) or o == "closed" for o in seen)
    if kind == "bad_token":
        return seen <= {"401"} if takes_writes else None
    raise ValueError(f"unknown attack {kind!r}")
