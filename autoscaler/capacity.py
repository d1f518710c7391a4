"""Per-replica capacity at the SLO from a load-test profile (perf_analyzer `-f` CSV).

perf_analyzer writes one row per load level with `Inferences/Second` and latency percentiles in
microseconds (`p99 latency`); the first column is the load: `Concurrency` (`--concurrency-range`,
closed loop) or `Request Rate` (`--request-rate-range`, open loop: Poisson or constant arrivals,
which is how production traffic arrives). A replica's capacity at the SLO is the highest
throughput among the rows whose P99 is within the SLO: beyond it, queueing eats the budget.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from tidescale.autoscaler.budget import BudgetShares, shares_from_capacities
from tidescale.contracts.errors import UsageError
from tidescale.contracts.slo import check_slo_threshold

THROUGHPUT_COLUMN = "Inferences/Second"
P99_COLUMN = "p99 latency"
# The load column of each mode perf_analyzer writes: closed loop, then open loop (rate or intervals).
LOAD_COLUMNS = ("Concurrency", "Request Rate")
MAX_PROFILE_BYTES = 1 << 20
MAX_PROFILE_REPLICAS = 1000  # a load test's fleet: more is a typo, not a profile


@dataclass(frozen=True)
class ProfileRow:
    load: float  # the concurrency or the request rate the row was measured at
    throughput_rps: float
    p99_s: float


def parse_profile(text: str, source: str = "profile") -> list[ProfileRow]:
    """Rows of a perf_analyzer CSV; UsageError naming missing columns or bad cells. A byte-order mark
    (a spreadsheet's save) is dropped: it hid the first column's name, an invisible missing column."""
    reader = csv.DictReader(io.StringIO(text.removeprefix("\ufeff"), newline=""))
    try:
        return _rows(reader, source)
    except csv.Error as exc:
        raise UsageError(f"{source}: not a CSV file ({exc})") from None


def _rows(reader: csv.DictReader[str], source: str) -> list[ProfileRow]:
    header = [h.strip() for h in (reader.fieldnames or [])]
    load_column = next((c for c in LOAD_COLUMNS if c in header), None)
    missing = [c for c in (THROUGHPUT_COLUMN, P99_COLUMN) if c not in header]
    if load_column is None:
        missing.insert(0, " or ".join(LOAD_COLUMNS))
    if missing or load_column is None:
        raise UsageError(f"{source}: missing column(s) {', '.join(missing)} (have: {', '.join(header) or 'none'})")
    columns = (load_column, THROUGHPUT_COLUMN, P99_COLUMN)
    rows = []
    for lineno, raw in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if isinstance(v, str)}
        try:
            load, thr, p99_us = (float(row[c]) for c in columns)
        except (KeyError, ValueError):
            raise UsageError(f"{source}:{lineno}: {', '.join(columns[:2])} and {P99_COLUMN} "
                             "must be numbers") from None
        if not all(math.isfinite(x) and x >= 0 for x in (load, thr, p99_us)):
            raise UsageError(f"{source}:{lineno}: values must be finite and >= 0")
        rows.append(ProfileRow(load, thr, p99_us / 1e6))
    if not rows:
        raise UsageError(f"{source}: no data rows")
    return rows


def throughput_within(rows: list[ProfileRow], budget_s: float) -> float | None:
    """The highest throughput among the rows whose P99 is within *budget_s* (None: no row is)."""
    ok = [r.throughput_rps for r in rows if r.p99_s <= budget_s]
    return max(ok) if ok else None


def capacity_at_slo(rows: list[ProfileRow], slo_latency_threshold_s: float, source: str = "profile",
                    replicas: int = 1) -> float:
    """Highest throughput whose P99 is within the SLO, per replica of the *replicas* the load test ran
    on (through the Service, so through the router the fleet runs: round robin hands each replica a
    smoother stream than one pod alone sees, which it batches better near a batch's execution time);
    UsageError when none (or zero) qualifies."""
    check_slo_threshold(slo_latency_threshold_s)
    if not 1 <= replicas <= MAX_PROFILE_REPLICAS:
        raise UsageError(f"{source}: the replicas the profile was measured on must be in "
                         f"[1, {MAX_PROFILE_REPLICAS}], got {replicas}")
    within = throughput_within(rows, slo_latency_threshold_s)
    if within is None:
        best = min(r.p99_s for r in rows)
        raise UsageError(f"{source}: no row has P99 within {slo_latency_threshold_s:g}s (best {best:g}s)")
    capacity = within / replicas
    if capacity <= 0:
        raise UsageError(f"{source}: capacity at the SLO is zero req/s")
    return capacity


def read_profile(path: Path) -> list[ProfileRow]:
    """The rows of a perf_analyzer CSV file; UsageError when it is missing, too large or malformed."""
    if not path.is_file():
        raise UsageError(f"profile {path} does not exist")
    if path.stat().st_size > MAX_PROFILE_BYTES:
        raise UsageError(f"profile {path} is larger than {MAX_PROFILE_BYTES} bytes")
    return parse_profile(path.read_text(errors="replace"), str(path))


def load_capacity(path: Path, slo_latency_threshold_s: float, replicas: int = 1) -> float:
    """Capacity (req/s per replica) at the SLO from a perf_analyzer CSV file measured on *replicas*."""
    return capacity_at_slo(read_profile(path), slo_latency_threshold_s, str(path), replicas)


def load_budget_shares(path: Path, slo_latency_threshold_s: float) -> BudgetShares:
    """The latency-vs-load curve of a perf_analyzer CSV file as queue sizing reads it (budget.py):
    the capacity within each fraction of the SLO over the capacity at the SLO (the replicas the
    profile ran on divide both, so they cancel). A fraction no row meets is left out."""
    rows = read_profile(path)
    return shares_from_capacities(lambda budget_s: throughput_within(rows, budget_s), slo_latency_threshold_s)
