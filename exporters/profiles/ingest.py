"""One entry point for every profile format: bytes in, a ProfileReport out."""

from __future__ import annotations

import io
from typing import Any, BinaryIO

from tidescale.exporters.profiles.chrome import chrome_op_totals
from tidescale.exporters.profiles.report import ProfileReport, build_report, uneven_tf_ops_warning
from tidescale.exporters.profiles.selftime import OpTotals
from tidescale.exporters.profiles.sources import DEFAULT_MAX_INFLATED_BYTES, detect_format, open_profile
from tidescale.exporters.profiles.tables import op_stats_op_totals, trtexec_op_totals
from tidescale.exporters.profiles.xplane import xplane_op_totals


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
            start = plane.stats.get("profile_start_time", "")
            if start.isdigit():
                captured_at = int(start) / 1e9
    elif fmt == "trtexec":
        totals, warn = trtexec_op_totals(stream), None
    else:
        totals, warn = op_stats_op_totals(stream), None
    if warn:
        warnings.append(warn)
    return totals, fmt, warnings, captured_at


def _chrome_time(metadata: dict[str, Any]) -> float | None:
    base = metadata.get("baseTimeNanoseconds")
    return base / 1e9 if isinstance(base, int) and base > 0 else None


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
