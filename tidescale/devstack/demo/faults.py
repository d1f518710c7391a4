"""What the demo injects half-way, so on-call signals have something to show."""

from __future__ import annotations

import json


def string_heavy_trace_viewer(string_share: float = 0.3, executions: int = 200) -> bytes:
    """A TF trace-viewer JSON in which string ops (AsString) take *string_share* of op self time.

    Op events carry `<op_name>:<op_type>` in `args.long_name` like xprof's conversion does.
    """
    events, ts = [], 0
    for i in range(executions):
        for name, op_type, dur in (
            (f"hash_{i}", "AsString", round(100 * string_share)),
            (f"dense_{i}/MatMul", "MatMul", round(100 * (1 - string_share))),
        ):
            events.append({"ph": "X", "name": op_type, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                           "args": {"long_name": f"{name}:{op_type}"}})
            ts += dur
    return json.dumps({"displayTimeUnit": "ns", "traceEvents": events}).encode()
