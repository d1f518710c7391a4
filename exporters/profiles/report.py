"""The op-share report and the release gate's limits.

Shares are of **op self time**: each op's duration minus its nested ops', summed over the
profiled executions; the denominator (`total_self_time_us`) is the sum over all ops and is
printed with every report so a share is never read without its base.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tidescale.contracts.errors import UsageError
from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles.opclass import OP_CLASSES, OpClass
from tidescale.exporters.profiles.selftime import OpTotals

TOP_N = 10
DEFAULT_LIMITS: dict[str, float] = {"string": 0.05}
# A TF op recorded in fewer executions than this fraction of the most frequent one.
UNEVEN_OP_RATIO = 0.9


@dataclass(frozen=True)
class TopOp:
    op: str
    op_class: OpClass
    share: float
    self_time_us: float


@dataclass
class ProfileReport:
    """Op-class shares and top ops of one model version's profile."""

    op_class_share: dict[OpClass, float]
    top_ops: list[TopOp]
    total_self_time_us: float
    format: str
    model: str = ""
    version: str = ""
    captured_at: float | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.version,
            "format": self.format,
            "captured_at": self.captured_at,
            "op_class_share": {k: round(v, 6) for k, v in self.op_class_share.items()},
            "top_ops": [{"op": t.op, "op_class": t.op_class, "share": round(t.share, 6),
                         "self_time_us": round(t.self_time_us, 3)} for t in self.top_ops],
            "total_self_time_us": round(self.total_self_time_us, 3),
            "warnings": list(self.warnings),
        }


def build_report(totals: OpTotals, fmt: str, warnings: list[str] | None = None, top_n: int = TOP_N,
                 captured_at: float | None = None) -> ProfileReport:
    """Shares from op totals; a profile with no op time gets all-zero shares and a warning."""
    warns = list(warnings or [])
    by_class = totals.class_self_us()
    total = sum(by_class.values())
    _check_finite(totals, total)
    if total <= 0:
        warns.append("no op events found: shares are all zero (wrong file, or a profile without ops)")
    shares: dict[OpClass, float] = {c: (by_class[c] / total if total > 0 else 0.0) for c in OP_CLASSES}
    ranked = sorted(totals.self_us.items(), key=lambda kv: (-kv[1], kv[0]))[:top_n]
    top = [TopOp(op, cls, us / total if total > 0 else 0.0, us) for (op, cls), us in ranked]
    if totals.late_events:
        warns.append(f"{totals.late_events} events arrived out of order beyond the reorder window; "
                     "their nesting is approximate")
    if totals.dropped_events:
        warns.append(f"{totals.dropped_events} events dropped (bad timestamps, too many threads or nesting)")
    if totals.overflow_ops:
        warns.append(f"more than the op-type cap: {totals.overflow_ops} events counted under a catch-all op")
    return ProfileReport(shares, top, total, fmt, captured_at=captured_at, warnings=warns)


def _check_finite(totals: OpTotals, total: float) -> None:
    """BadInput when a self time is NaN or infinite: its shares would be NaN and the gate would pass.

    The parsers refuse times that could overflow; this is the net under them.
    """
    if math.isfinite(total):
        return
    bad = next(((op, us) for (op, _), us in totals.self_us.items() if not math.isfinite(us)), None)
    where = f" (op {bad[0][:80]!r}: {bad[1]})" if bad else ""
    raise BadInput(400, f"op self time is not finite{where}: an event duration is infinite, NaN or so large "
                        "that the sum overflows")


def uneven_tf_ops_warning(op_counts: dict[str, int]) -> str | None:
    """Warn when TF ops were recorded unevenly, the mark of a host tracer level 2 capture.

    In a complete capture every op of the served graph runs once per execution, so all op
    names occur equally often. Level 2 drops "inexpensive" ops once the process is warm, so
    cheap string ops appear in only some executions and their share reads low.
    """
    if len(op_counts) < 3:
        return None
    most = max(op_counts.values())
    low = sorted((n, name) for name, n in op_counts.items() if n < UNEVEN_OP_RATIO * most)
    if not low:
        return None
    return (f"{len(low)} of {len(op_counts)} TF ops were recorded in fewer executions than the most "
            f"frequent one ({low[0][0]} vs {most}, e.g. {low[0][1][:80]}): this looks like a host tracer "
            "level 2 capture, which drops inexpensive ops, so their share reads low; capture at level 3 "
            "(`tidescale profile capture`)")


def parse_limits(specs: list[str]) -> dict[str, float]:
    """`CLASS=FRACTION` flags over the defaults; UsageError names a bad one."""
    limits = dict(DEFAULT_LIMITS)
    for spec in specs:
        cls, sep, value = spec.partition("=")
        cls = cls.strip()
        if not sep or cls not in OP_CLASSES:
            raise UsageError(f"--max-share {spec!r}: expected CLASS=FRACTION with CLASS one of "
                             f"{', '.join(OP_CLASSES)}")
        try:
            frac = float(value)
        except ValueError:
            raise UsageError(f"--max-share {spec!r}: {value!r} is not a number") from None
        if not (0.0 <= frac <= 1.0) or math.isnan(frac):
            raise UsageError(f"--max-share {spec!r}: the fraction must be between 0 and 1")
        limits[cls] = frac
    return limits


def unjudgeable(report: ProfileReport) -> str | None:
    """Why the gate cannot judge *report*, None when it can.

    A profile without op self time (a wrong file, a capture of an idle process, every event
    dropped) has all-zero shares: they are within every limit, yet nothing was measured, so a
    pass would be a lie.
    """
    if not report.total_self_time_us > 0:
        return ("the profile holds no op self time (no op events, or every one dropped): there is no "
                "share to hold against the limits")
    return None


def violations(report: ProfileReport, limits: dict[str, float]) -> list[str]:
    """One line per op class whose share exceeds its limit."""
    out = []
    for cls, limit in sorted(limits.items()):
        share = report.op_class_share.get(cls, 0.0)  # type: ignore[call-overload]
        if share > limit:
            out.append(f"{cls} share {share:.1%} exceeds the limit {limit:.1%}")
    return out
