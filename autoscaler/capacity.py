"""Per-replica capacity at the SLO from a load-test profile (perf_analyzer `-f` CSV).

perf_analyzer writes one row per concurrency level with `Inferences/Second` and latency
percentiles in microseconds (`p99 latency`). A replica's capacity at the SLO is the highest
throughput among the rows whose P99 is within the SLO: beyond it, queueing eats the budget.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from tidescale.contracts.errors import UsageError

THROUGHPUT_COLUMN = "Inferences/Second"
P99_COLUMN = "p99 latency"
CONCURRENCY_COLUMN = "Concurrency"
MAX_PROFILE_BYTES = 1 << 20


@dataclass(frozen=True)
class ProfileRow:
    concurrency: float
    throughput_rps: float
    p99_s: float


def parse_profile(text: str, source: str = "profile") -> list[ProfileRow]:
    """Rows of a perf_analyzer CSV; UsageError naming missing columns or bad cells."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        return _rows(reader, source)
    except csv.Error as exc:
        raise UsageError(f"{source}: not a CSV file ({exc})") from None


def _rows(reader: csv.DictReader[str], source: str) -> list[ProfileRow]:
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in (CONCURRENCY_COLUMN, THROUGHPUT_COLUMN, P99_COLUMN) if c not in header]
    if missing:
        raise UsageError(f"{source}: missing column(s) {', '.join(missing)} (have: {', '.join(header) or 'none'})")
    rows = []
    for lineno, raw in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if isinstance(v, str)}
        try:
            conc, thr, p99_us = (float(row[c]) for c in (CONCURRENCY_COLUMN, THROUGHPUT_COLUMN, P99_COLUMN))
        except (KeyError, ValueError):
            raise UsageError(f"{source}:{lineno}: {CONCURRENCY_COLUMN}, {THROUGHPUT_COLUMN} and {P99_COLUMN} "
                             "must be numbers") from None
        if not all(math.isfinite(x) and x >= 0 for x in (conc, thr, p99_us)):
            raise UsageError(f"{source}:{lineno}: values must be finite and >= 0")
        rows.append(ProfileRow(conc, thr, p99_us / 1e6))
    if not rows:
        raise UsageError(f"{source}: no data rows")
    return rows


def capacity_at_slo(rows: list[ProfileRow], slo_latency_threshold_s: float, source: str = "profile") -> float:
    """Highest throughput whose P99 is within the SLO; UsageError when none (or zero) qualifies."""
    if slo_latency_threshold_s <= 0:
        raise UsageError(f"SLO P99 must be > 0 s, got {slo_latency_threshold_s}")
    ok = [r.throughput_rps for r in rows if r.p99_s <= slo_latency_threshold_s]
    if not ok:
        best = min(r.p99_s for r in rows)
        raise UsageError(f"{source}: no row has P99 within {slo_latency_threshold_s:g}s (best {best:g}s)")
    capacity = max(ok)
    if capacity <= 0:
        raise UsageError(f"{source}: capacity at the SLO is zero req/s")
    return capacity


def load_capacity(path: Path, slo_latency_threshold_s: float) -> float:
    """Capacity (req/s per replica) at the SLO from a perf_analyzer CSV file."""
    if not path.is_file():
        raise UsageError(f"profile {path} does not exist")
    if path.stat().st_size > MAX_PROFILE_BYTES:
        raise UsageError(f"profile {path} is larger than {MAX_PROFILE_BYTES} bytes")
    return capacity_at_slo(parse_profile(path.read_text(errors="replace"), str(path)), slo_latency_threshold_s,
                           str(path))

