"""`tidescale bench profiles`: streaming op-share parse vs `json.load` on a ≥ 200 MB Chrome trace.

The trace is the real torch.profiler fixture (`ranker_pystring.pt.trace.json.gz`) repeated
with shifted timestamps until it passes the target size, written to a temporary file.
Each contender runs in a fresh Python process so its peak RSS (VmHWM) is its own:
`tidescale` parses the trace and computes the full report; `json.load` only decodes the
document (the first step of any non-streaming tool). Goals: ≥ 50 MB/s, peak RSS ≤ 300 MB.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidescale.benches.common import bench_main
from tidescale.benches.report import BENCH_DIR
from tidescale.devstack.tools import FIXTURES, REPO_ROOT

FIXTURE = FIXTURES / "profiles" / "pytorch" / "ranker_pystring.pt.trace.json.gz"
RESULT_MD = BENCH_DIR / "profiles.md"
GOAL_MB_S = 50.0
GOAL_RSS_MB = 300.0

_CHILD = {
    "tidescale_stream": (
        "from exporters.profiles.ingest import parse_profile\n"
        "with open(PATH, 'rb') as fh:\n"
        "    rep = parse_profile(fh, PATH)\n"
        "extra = {'string_share': round(rep.op_class_share['string'], 4), 'format': rep.format}\n"
    ),
    "json_load": (
        "import json\n"
        "with open(PATH, 'rb') as fh:\n"
        "    doc = json.load(fh)\n"
        "extra = {'events': len(doc['traceEvents'])}\n"
    ),
}
_WRAPPER = """
import json, sys, time
PATH = sys.argv[1]
t0, c0 = time.perf_counter(), time.process_time()
{body}
elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM'))
print(json.dumps({{'seconds': elapsed, 'cpu_seconds': cpu, 'peak_rss_mb': hwm / 1024, **extra}}))
"""


def write_trace(path: Path, size_mb: int) -> int:
    """Repeat the fixture's events (timestamps shifted) until the file is *size_mb* MB; returns bytes."""
    doc = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    span = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events) + 1000.0
    target = size_mb * 1_000_000
    written = 0
    with path.open("w") as out:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        out.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        rep = 0
        first = True
        while written < target:
            lines = []
            for e in events:
                shifted = dict(e, ts=round(e["ts"] + rep * span, 3))
                lines.append(("" if first else ",\n") + json.dumps(shifted))
                first = False
            chunk = "".join(lines)
            out.write(chunk)
            written += len(chunk)
            rep += 1
        out.write("\n]}\n")
    return path.stat().st_size


def _measure(name: str, path: Path) -> dict[str, Any]:
    code = _WRAPPER.format(body=_CHILD[name])
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed: {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    size_mb = path.stat().st_size / 1e6
    out["mb_per_s"] = round(size_mb / out["seconds"], 1)
    out["mb_per_cpu_s"] = round(size_mb / out["cpu_seconds"], 1)
    out["seconds"] = round(out["seconds"], 2)
    out["cpu_seconds"] = round(out["cpu_seconds"], 2)
    out["peak_rss_mb"] = round(out["peak_rss_mb"], 1)
    return out


def run(size_mb: int = 220, progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tidescale-bench-") as tmp:
        path = Path(tmp) / "big.pt.trace.json"
        progress(f"writing a {size_mb} MB Chrome trace from {FIXTURE.name}")
        size = write_trace(path, size_mb)
        results = {}
        for name in _CHILD:
            progress(f"running {name}")
            results[name] = _measure(name, path)
    ours = results["tidescale_stream"]
    return {"benchmark": "profiles", "trace_mb": round(size / 1e6, 1), "cpu_count": os.cpu_count(),
            "goal_mb_per_s": GOAL_MB_S, "goal_peak_rss_mb": GOAL_RSS_MB,
            "load_average_1m": round(os.getloadavg()[0], 1),
            "meets_goal": ours["mb_per_cpu_s"] >= GOAL_MB_S and ours["peak_rss_mb"] <= GOAL_RSS_MB,
            "results": results}


def markdown(result: dict[str, Any]) -> str:
    rows = "\n".join(f"| {name} | {r['mb_per_cpu_s']} | {r['mb_per_s']} | {r['seconds']} | {r['peak_rss_mb']} |"
                     for name, r in result["results"].items())
    return f"""# Benchmark: profiles

`tidescale bench profiles` — a {result['trace_mb']} MB torch.profiler Chrome trace (the real
`ranker_pystring` fixture repeated with shifted timestamps), each contender in a fresh process on
{result['cpu_count']} CPU cores shared with other work (1-minute load average {result['load_average_1m']}
when it finished, so wall-clock MB/s understates; the goal is judged on MB per CPU-second).
Goals: ≥ {result['goal_mb_per_s']} MB/s and peak RSS ≤ {result['goal_peak_rss_mb']} MB.
Met: **{result['meets_goal']}**.

| contender | MB per CPU-second | MB/s (wall) | wall seconds | peak RSS MB |
|---|---|---|---|---|
{rows}

`tidescale_stream` reads the file as a stream and produces the full op-share report (self time per
thread, classes, top ops); `json_load` only decodes the document and does no analysis.

```json
{json.dumps(result, indent=1, sort_keys=True)}
```
"""


def run_command(json_only: bool = False, quick: bool = False, size_mb: int = 220) -> None:
    """Run the benchmark, write docs/benchmarks/profiles.md, print the JSON result (--quick: 200 MB)."""
    size = 200 if quick else max(200, size_mb)
    bench_main(lambda progress: run(size_mb=size, progress=progress), markdown, RESULT_MD, json_only)

