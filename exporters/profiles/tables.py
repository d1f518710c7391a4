"""Small tabular profiles: trtexec `--exportProfile` JSON and xprof `framework_op_stats` JSON.

Both are per-layer/per-op tables already aggregated by the tool, so there is no nesting to
undo: trtexec's `timeMs` (total over `count` runs) is the layer's self time; xprof's
`total_self_time` (µs) is the op's self time (its IDLE row is not an op). They are small
by construction and decoded whole, with a byte cap.
"""

from __future__ import annotations

import io
import json
from typing import Any

from tidescale.contracts import jsonio
from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles.chrome import MAX_TIME_US
from tidescale.exporters.profiles.opclass import classify_op_type
from tidescale.exporters.profiles.selftime import OpTotals

MAX_TABLE_BYTES = 64 << 20


def _load(stream: io.BufferedReader, what: str) -> Any:
    data = stream.read(MAX_TABLE_BYTES + 1)
    if len(data) > MAX_TABLE_BYTES:
        raise BadInput(413, f"{what} larger than {MAX_TABLE_BYTES} bytes")
    try:
        return jsonio.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(400, f"{what} is not valid JSON: {exc}") from None
    except jsonio.NestedTooDeeply:
        raise BadInput(400, f"{what} nests arrays or objects too deeply to decode") from None
    except ValueError as exc:  # e.g. an integer past the interpreter's digit limit
        raise BadInput(400, f"{what} is not valid JSON: {exc}"[:200]) from None


def _number(value: Any, what: str, scale: float = 1.0) -> float:
    """*value* × *scale* as µs; a time at or past `MAX_TIME_US` is refused, as its sum could overflow."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BadInput(400, f"{what} is not a number: {value!r:.40}")
    try:
        out = float(value) * scale
    except ValueError:
        raise BadInput(400, f"{what} is not a number: {value!r:.40}") from None
    except OverflowError:
        raise BadInput(400, f"{what} is too large to be a finite number: {value!r:.40}…") from None
    if not 0 <= out < MAX_TIME_US:
        raise BadInput(400, f"{what} must be a finite non-negative time below {MAX_TIME_US:g} µs, "
                            f"got {value!r:.40}")
    return out


def trtexec_op_totals(stream: io.BufferedReader) -> OpTotals:
    """Layer self time from `trtexec --exportProfile` (`[{"count": n}, {"name", "timeMs", ...}]`)."""
    rows = _load(stream, "trtexec profile")
    if not isinstance(rows, list):
        raise BadInput(400, "trtexec profile must be a JSON array")
    totals = OpTotals()
    for row in rows:
        if not isinstance(row, dict) or "name" not in row:
            continue
        name = row["name"]
        if not isinstance(name, str):
            raise BadInput(400, "trtexec profile: layer name is not a string")
        totals.events += 1
        totals.add((name, classify_op_type(name)), _number(row.get("timeMs", 0), f"timeMs of {name!r:.60}", 1e3))
    return totals


def op_stats_op_totals(stream: io.BufferedReader) -> OpTotals:
    """Op self time from xprof's framework_op_stats tables (first table; IDLE skipped)."""
    tables = _load(stream, "framework_op_stats")
    if not isinstance(tables, list) or not tables or not isinstance(tables[0], dict):
        raise BadInput(400, "framework_op_stats must be a non-empty JSON array of tables")
    table = tables[0]
    cols = table.get("cols")
    rows = table.get("rows")
    if not isinstance(cols, list) or not isinstance(rows, list):
        raise BadInput(400, "framework_op_stats table needs `cols` and `rows`")
    index = {c.get("id"): i for i, c in enumerate(cols) if isinstance(c, dict)}
    if "type" not in index or "total_self_time" not in index:
        raise BadInput(400, "framework_op_stats table lacks the `type` or `total_self_time` column")
    totals = OpTotals()
    for row in rows:
        cells = row.get("c") if isinstance(row, dict) else None
        if not isinstance(cells, list) or len(cells) < len(cols):
            raise BadInput(400, "framework_op_stats row does not match its columns")
        values = [c.get("v") if isinstance(c, dict) else None for c in cells]
        op_type = values[index["type"]]
        if not isinstance(op_type, str) or op_type == "IDLE":
            continue
        totals.events += 1
        totals.add((op_type, classify_op_type(op_type)),
                   _number(values[index["total_self_time"]], f"total_self_time of {op_type!r:.60}"))
    return totals
