"""One entry point for every profile format: bytes in, a ProfileReport out."""

from __future__ import annotations

import io
import math
from typing import Any, BinaryIO

from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles.chrome import chrome_op_totals, show_number
from tidescale.exporters.profiles.report import ProfileReport, build_report, uneven_tf_ops_warning
from tidescale.exporters.profiles.selftime import OpTotals
from tidescale.exporters.profiles.sources import DEFAULT_MAX_INFLATED_BYTES, detect_format, open_profile
from tidescale.exporters.profiles.tables import op_stats_op_totals, trtexec_op_totals
from tidescale.exporters.profiles.xplane import xplane_op_totals

# The capture time a file records must fall in these Unix seconds (2000-01-01 to 2100-01-01):
# anything else is a clock that was never set, another unit, or an overflow, and would turn the
# exported profile age into nonsense (or, converted unchecked, into a 500 and a gate traceback).
MIN_CAPTURE_S = 946_684_800
MAX_CAPTURE_S = 4_102_444_800
_MAX_DIGITS = 20  # a uint64 of nanoseconds

def parse_totals(raw: BinaryIO, filename: str = "", max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES
                 ) -> tuple[OpTotals, str, list[str], float | None]:
    """Op totals, format, warnings and capture time (Unix s, when the file says) of one profile."""
    stream = open_profile(raw, max_inflated_bytes)
    fmt = detect_format(stream, filename)
    warnings: list[str] = []
    captured_at: float | None = None
    if fmt == "chrome_trace":
        totals, tf_counts, metadata = chrome_op_totals(stream)
        captured_at = _chrome_time(metadata)
        warn = uneven_tf_ops_warning(tf_counts)
    elif fmt == "xplane":
        totals, reader = xplane_op_totals(stream)
        tf_counts = reader.tf_op_counts
        warn = uneven_tf_ops_warning(tf_counts)
        for plane in reader.planes:
            start = capture_time(plane.stats.get("profile_start_time"),
                                 f"xplane plane {plane.name[:80]!r} stat profile_start_time")
            captured_at = captured_at if start is None else start
    elif fmt == "trtexec":
        totals, warn = trtexec_op_totals(stream), None
    else:
        totals, warn = op_stats_op_totals(stream), None
    if warn:
        warnings.append(warn)
    return totals, fmt, warnings, captured_at


def _chrome_time(metadata: dict[str, Any]) -> float | None:
    return capture_time(metadata.get("baseTimeNanoseconds"), "trace baseTimeNanoseconds")


def capture_time(value: Any, what: str) -> float | None:
    """Unix seconds of a capture time in nanoseconds (an integer, or its ASCII decimal text as
    xplane stats carry it); None when absent or 0 (not recorded); BadInput (400) naming *what*
    otherwise: not an integer (`NaN`, `²`), or outside 2000–2100 (a 400-digit integer)."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= _MAX_DIGITS:
        value = int(value)
    integral = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if isinstance(value, bool) or not integral:
        raise BadInput(400, f"{what} must be an integer of nanoseconds since 1970, got {value!r:.40}")
    if value == 0:
        return None
    # Compared as nanoseconds: a huge integer is compared exactly, never converted to a float first.
    if not MIN_CAPTURE_S * 10**9 <= value < MAX_CAPTURE_S * 10**9:
        raise BadInput(400, f"{what} {show_number(value)} ns is not a time between 2000 and 2100")
    return float(value) / 1e9


def parse_profile(raw: BinaryIO | bytes, filename: str = "",
                  max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES) -> ProfileReport:
    """The report of one profile file or upload (any supported format, gzip or not)."""
    stream = io.BytesIO(raw) if isinstance(raw, bytes) else raw
    totals, fmt, warnings, captured_at = parse_totals(stream, filename, max_inflated_bytes)
    return build_report(totals, fmt, warnings, captured_at=captured_at)


def combined_report(paths: list[str], max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES) -> ProfileReport:
    """One report over several files of the same model version (e.g. one xplane.pb per host)."""
    merged = OpTotals()
    formats: list[str] = []
    warnings: list[str] = []
    captured: list[float] = []
    for path in paths:
        with open(path, "rb") as fh:
            totals, fmt, warns, captured_at = parse_totals(fh, path, max_inflated_bytes)
        merged.merge(totals)
        formats.append(fmt)
        warnings.extend(f"{path}: {w}" for w in warns)
        if captured_at is not None:
            captured.append(captured_at)
    fmt = formats[0] if len(set(formats)) == 1 else "+".join(sorted(set(formats)))
    return build_report(merged, fmt, warnings, captured_at=min(captured) if captured else None)
