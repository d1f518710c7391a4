"""`tidescale bench scale-out`: one exporter against one exporter per node, at 2,000 and 10,000 pods.

What grows with the fleet is what a single exporter must do: one stats request per Triton pod
per poll interval, the spans of every pod, and the latency label sets of every pod (its series
are per pod, and its cardinality cap bounds them). The per-node design (chart `exporter.mode:
daemonset`) gives each exporter only the pods on its own node, so its load stays that of
`PODS_PER_NODE` pods however large the fleet is; the fleet runs fleet / PODS_PER_NODE of them.
Both are measured here with the real code, in the configuration the chart deploys:

- poll: the StatsPoller in this process against a fake Triton process that serves recorded 2.51
  stats through one loopback address per pod: wall and CPU seconds per cycle, against the 5 s
  poll interval;
- ingest: `tidescale exporter serve` as its own process with its default series cap, fed one
  OTLP body per pod (32 traced requests of its 2 models, `k8s.pod.name` set as Triton's
  `resource=` flags set it): spans per CPU second of the server, latency label sets kept and
  dropped, resident memory, and the size and time of one /metrics scrape.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from tidescale.benches.common import bench_main
from tidescale.benches.ingest import SPANS_PER_REQUEST, TOKEN, exporter_rate, triton_request_spans
from tidescale.benches.otlp_encode import encode_protobuf
from tidescale.benches.poll import fake_triton_process, poll_cycles, target_urls
from tidescale.benches.report import BENCH_DIR
from tidescale.devstack.exporter import spawn_exporter
from tidescale.exporters.otlp import DEPLOYMENT_ATTR, NAMESPACE_ATTRS, POD_ATTR, Span
from tidescale.exporters.settings import ExporterSettings

RESULT_MD = BENCH_DIR / "scale-out.md"
HEADER = ("| fleet pods | design | exporters | pods each | poll wall s / cycle | poll CPU s / cycle | spans / CPU s "
          "| label sets kept / needed | series dropped | RSS MiB | scrape MB | scrape s |")
FLEETS = (2_000, 10_000)
QUICK_FLEETS = (100,)
PODS_PER_NODE = 8  # an 8-GPU node, one Triton pod per GPU
MODELS_PER_POD = ("ranker", "embedder")
REQUESTS_PER_BODY = 32
MIN_BODIES = 2_000
POLL_INTERVAL_S = ExporterSettings.model_construct().poll_interval_s
DEFAULT_MAX_SERIES = ExporterSettings.model_construct().max_series
# A scrape that takes longer than this misses Prometheus' default scrape timeout.
SCRAPE_TIMEOUT_S = 10.0


def pod_bodies(pods: int, rounds: int = 1, seed: int = 5) -> list[bytes]:
    """*rounds* OTLP bodies per pod, as each Triton pod's batch exporter posts them."""
    rng = np.random.default_rng(seed)
    t0 = 1_795_276_338_000_000_000
    out = []
    for n in range(pods * rounds):
        i = n % pods
        spans: list[Span] = []
        for _ in range(REQUESTS_PER_BODY):
            t0 += 1_000_000
            spans += triton_request_spans(rng, t0, MODELS_PER_POD)
        resource = {NAMESPACE_ATTRS[0]: "serving", POD_ATTR: f"triton-7d9c8b5f4-{i:05d}", DEPLOYMENT_ATTR: "triton"}
        out.append(encode_protobuf(spans, resource=resource))
    return out


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _scrape(url: str) -> dict[str, Any]:
    t0 = time.monotonic()
    text = httpx.get(f"{url}/metrics", timeout=120).text
    wall = time.monotonic() - t0
    kept = sum(1 for line in text.splitlines() if line.startswith("tidescale_request_duration_seconds_count{"))
    dropped = sum(float(line.split()[-1]) for line in text.splitlines()
                  if line.startswith("tidescale_exporter_series_dropped_total{"))
    return {"label_sets_kept": kept, "series_dropped": dropped, "scrape_bytes": len(text), "scrape_s": round(wall, 3)}


def ingest(pods: int, max_series: int | None = None) -> dict[str, Any]:
    """The exporter process fed the bodies of *pods*: what it keeps, what it costs. At least
    MIN_BODIES bodies, so the server's CPU time is well above /proc's 10 ms resolution."""
    payloads = pod_bodies(pods, rounds=-(-MIN_BODIES // pods))
    with tempfile.TemporaryDirectory(prefix="tidescale-bench-scaleout-") as tmp:
        env = {"TIDESCALE_EXPORTER_MAX_SERIES": str(max_series)} if max_series else None
        proc, url = spawn_exporter(Path(tmp), token=TOKEN, env=env)
        try:
            rate = exporter_rate(url, proc.pid, payloads, "application/x-protobuf",
                                 spans_per_body=REQUESTS_PER_BODY * SPANS_PER_REQUEST)
            scrape = _scrape(url)
            rss = _rss_bytes(proc.pid)
        finally:
            proc.stop()
    return {"pods": pods, "bodies": len(payloads), "spans_per_cpu_s": round(rate["spans_per_cpu_s"]),
            "server_cpu_s": round(rate["server_cpu_s"], 2), "label_sets_needed": None,
            "rss_mib": round(rss / 2**20, 1), "max_series": max_series or DEFAULT_MAX_SERIES, **scrape}


def poll(pods: int, port: int, cycles: int) -> dict[str, Any]:
    result = asyncio.run(poll_cycles(target_urls(pods, port), cycles))
    return {"pods": pods, **result, "within_interval": result["wall_s_median"] < POLL_INTERVAL_S}


def design(pods: int, port: int, cycles: int, progress: Callable[[str], None],
           max_series: int | None = None) -> dict[str, Any]:
    progress(f"polling {pods} pods")
    polled = poll(pods, port, cycles)
    progress(f"ingesting the spans of {pods} pods (series cap {max_series or DEFAULT_MAX_SERIES})")
    fed = ingest(pods, max_series)
    return {"poll": polled, "ingest": fed}


def holds(d: dict[str, Any], needed: int) -> bool:
    """Polls within the interval without errors, keeps every label set, answers a scrape in time."""
    d["ingest"]["label_sets_needed"] = needed
    return bool(d["poll"]["within_interval"] and d["poll"]["errors"] == 0 and d["ingest"]["label_sets_kept"] >= needed
                and d["ingest"]["scrape_s"] < SCRAPE_TIMEOUT_S)


def run(quick: bool = False, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    fleets = QUICK_FLEETS if quick else FLEETS
    cycles = 1 if quick else 2
    out: dict[str, Any] = {}
    with fake_triton_process(len(MODELS_PER_POD)) as port:
        progress(f"one exporter per node: {PODS_PER_NODE} pods")
        node = design(PODS_PER_NODE, port, cycles, progress)
        needed_per_node = node["ingest"]["label_sets_kept"]
        for fleet in fleets:
            # Every pod needs as many label sets as a node's pod does (none is dropped there).
            needed = needed_per_node * fleet // PODS_PER_NODE
            progress(f"one exporter for {fleet} pods, as shipped")
            one = design(fleet, port, cycles, progress)
            one["holds_the_fleet"] = holds(one, needed)
            # The single exporter at its best setting: a series cap that fits the whole fleet.
            progress(f"one exporter for {fleet} pods, series cap raised to {needed}")
            raised = design(fleet, port, cycles, progress, max_series=needed)
            raised["holds_the_fleet"] = holds(raised, needed)
            exporters = -(-fleet // PODS_PER_NODE)
            spans = fleet * REQUESTS_PER_BODY * SPANS_PER_REQUEST  # one body from every pod of the fleet
            one["ingest_cpu_s_per_fleet_body"] = round(spans / one["ingest"]["spans_per_cpu_s"], 2)
            raised["ingest_cpu_s_per_fleet_body"] = round(spans / raised["ingest"]["spans_per_cpu_s"], 2)
            out[str(fleet)] = {
                "one_exporter": one,
                "one_exporter_cap_raised": raised,
                "per_node": {"exporters": exporters, "each": node,
                             "fleet_poll_cpu_s_per_cycle": round(node["poll"]["cpu_s_median"] * exporters, 2),
                             "ingest_cpu_s_per_fleet_body": round(spans / node["ingest"]["spans_per_cpu_s"], 2)},
            }
    node["holds_its_node"] = holds(node, needed_per_node)
    return {"benchmark": "scale-out", "pods_per_node": PODS_PER_NODE, "models_per_pod": len(MODELS_PER_POD),
            "requests_per_body": REQUESTS_PER_BODY, "poll_interval_s": POLL_INTERVAL_S,
            "default_max_series": DEFAULT_MAX_SERIES, "per_node": node, "fleets": out}


def markdown(result: dict[str, Any]) -> str:
    rows = []
    for fleet, r in result["fleets"].items():
        one, raised, each = r["one_exporter"], r["one_exporter_cap_raised"], r["per_node"]["each"]
        for name, d, n in (("one exporter", one, 1), ("one exporter, cap raised", raised, 1),
                           ("one per node", each, r["per_node"]["exporters"])):
            p, i = d["poll"], d["ingest"]
            rows.append(f"| {fleet} | {name} | {n} | {p['pods']} | {p['wall_s_median']} | {p['cpu_s_median']} | "
                        f"{i['spans_per_cpu_s']} | {i['label_sets_kept']} / {i['label_sets_needed']} | "
                        f"{i['series_dropped']:.0f} | {i['rss_mib']} | {i['scrape_bytes'] / 1e6:.2f} | "
                        f"{i['scrape_s']} |")
    held = {True: "holds", False: "does not hold"}
    verdict = "\n".join(f"- {fleet} pods: one exporter {held[r['one_exporter']['holds_the_fleet']]}"
                        f" the fleet ({r['one_exporter']['ingest']['label_sets_kept']} of "
                        f"{r['one_exporter']['ingest']['label_sets_needed']} label sets kept), with its cap raised it "
                        f"{held[r['one_exporter_cap_raised']['holds_the_fleet']]} it (poll "
                        f"{r['one_exporter_cap_raised']['poll']['wall_s_median']} s per cycle, scrape "
                        f"{r['one_exporter_cap_raised']['ingest']['scrape_bytes'] / 1e6:.0f} MB in "
                        f"{r['one_exporter_cap_raised']['ingest']['scrape_s']} s); one per node needs "
                        f"{r['per_node']['exporters']} exporters, {r['per_node']['fleet_poll_cpu_s_per_cycle']} CPU s "
                        f"per poll cycle in all, and every label set."
                        for fleet, r in result["fleets"].items())
    return f"""# Benchmark: scale-out

`tidescale bench scale-out`: one exporter against one exporter per node (chart `exporter.mode:
daemonset`), with {result['pods_per_node']} Triton pods per node, {result['models_per_pod']} models per pod,
one OTLP body of {result['requests_per_body']} traced requests per pod, the {result['poll_interval_s']:g} s poll
interval and the default cap of {result['default_max_series']} latency label sets, all as the chart deploys
them. "one per node" rows measure one exporter with its node's pods; the fleet runs that many of them.

{HEADER}
|---|---|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

{verdict}

```json
{json.dumps(result, indent=1, sort_keys=True)}
```
"""


def run_command(json_only: bool = False, quick: bool = False) -> None:
    """Run the benchmark, write docs/benchmarks/scale-out.md, print the JSON result."""
    bench_main(lambda progress: run(quick=quick, progress=progress), markdown, RESULT_MD, json_only)
