"""`tidescale bench ingest`: OTLP spans per second per core into the running exporter.

The exporter runs as its own process (`tidescale exporter serve`); the bench posts Triton-shaped
bodies (per request an `InferRequest`, a model span and a `compute` span, 512 requests a body)
over keep-alive HTTP, then divides the spans by the CPU seconds the *server process* used
(/proc/<pid>/stat), so client cost does not count. The peer is bare protobuf decoding
(`ExportTraceServiceRequest.FromString`) of the same bodies in this process: the ratio says how
much of the ceiling the whole pipeline (HTTP, decode, join, histograms) reaches. The
same spans as OTLP/JSON (hex ids, what Triton 2.51 posts) are measured too.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tidescale.benches.common import bench_main
from tidescale.benches.otlp_encode import encode_json, encode_protobuf
from tidescale.benches.report import BENCH_DIR
from tidescale.devstack.exporter import spawn_exporter
from tidescale.exporters.otlp import Span

REQUESTS_PER_BODY = 512
SPANS_PER_REQUEST = 3
MODELS = ("ranker", "embedder", "tokenizer", "reranker")
RESULT_MD = BENCH_DIR / "ingest.md"
TOKEN = "bench-token"


def triton_request_spans(rng: np.random.Generator, t0: int, models: tuple[str, ...] = MODELS) -> list[Span]:
    """The three spans Triton 2.51 emits for one request (shapes as in real-2.51/otlp)."""
    trace_id = rng.bytes(16)
    root, model_id, compute_id = rng.bytes(8), rng.bytes(8), rng.bytes(8)
    model = models[int(rng.integers(len(models)))]
    queue = int(rng.lognormal(11, 1))
    infer = int(rng.lognormal(15, 0.5))
    stamps = np.cumsum([t0, 50_000, 10_000, queue, 30_000, infer, 20_000, 10_000])
    rs, qs, cs, cie, cos, ce, re_ = (int(x) for x in stamps[:7])
    return [
        Span(trace_id, root, b"", "InferRequest", None, None, "",
             {"HTTP_RECV_START": t0, "HTTP_RECV_END": t0 + 5_000, "HTTP_SEND_END": re_ + 20_000}),
        Span(trace_id, model_id, root, model, model, "1", "",
             {"REQUEST_START": rs, "QUEUE_START": qs, "REQUEST_END": re_}),
        Span(trace_id, compute_id, model_id, "compute", None, None, "",
             {"COMPUTE_START": cs, "COMPUTE_INPUT_END": cie, "COMPUTE_OUTPUT_START": cos, "COMPUTE_END": ce}),
    ]


def bodies(n: int, seed: int = 3, encode: Callable[[list[Span]], bytes] = encode_protobuf) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    t0 = 1_795_276_338_000_000_000
    for _ in range(n):
        spans: list[Span] = []
        for _ in range(REQUESTS_PER_BODY):
            t0 += 1_000_000
            spans += triton_request_spans(rng, t0)
        out.append(encode(spans))
    return out


def bare_decode_rate(payloads: list[bytes]) -> float:
    """Spans per CPU second of `FromString` alone, in this process."""
    start = time.process_time()
    spans = 0
    for body in payloads:
        request = ExportTraceServiceRequest.FromString(body)
        spans += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    return spans / max(time.process_time() - start, 1e-9)


def cpu_seconds(pid: int) -> float:
    """utime + stime of *pid* from /proc (the server's own CPU, whatever core it ran on)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def exporter_rate(url: str, pid: int, payloads: list[bytes], content_type: str,
                  spans_per_body: int = REQUESTS_PER_BODY * SPANS_PER_REQUEST) -> dict[str, float]:
    headers = {"content-type": content_type, "authorization": f"Bearer {TOKEN}"}
    with httpx.Client(timeout=30) as client:
        client.post(f"{url}/v1/traces", content=payloads[0], headers=headers).raise_for_status()  # warm-up
        cpu0, wall0 = cpu_seconds(pid), time.monotonic()
        for body in payloads:
            client.post(f"{url}/v1/traces", content=body, headers=headers).raise_for_status()
        cpu, wall = cpu_seconds(pid) - cpu0, time.monotonic() - wall0
        metrics = client.get(f"{url}/metrics").text
    spans = len(payloads) * spans_per_body
    accepted = next(float(line.split()[-1]) for line in metrics.splitlines()
                    if line.startswith("tidescale_exporter_spans_accepted_total "))
    return {"spans": spans, "server_cpu_s": cpu, "wall_s": wall, "spans_per_cpu_s": spans / max(cpu, 1e-9),
            "spans_per_wall_s": spans / max(wall, 1e-9), "accepted": accepted}


def run(quick: bool = False, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    n = 40 if quick else 200
    progress(f"building {n} bodies of {REQUESTS_PER_BODY * SPANS_PER_REQUEST} spans, protobuf and JSON")
    payloads = bodies(n)
    json_payloads = bodies(n, encode=encode_json)
    decode = bare_decode_rate(payloads)
    with tempfile.TemporaryDirectory(prefix="tidescale-bench-ingest-") as tmp:
        proc, url = spawn_exporter(Path(tmp), token=TOKEN)
        try:
            progress(f"posting protobuf to {url}")
            served = exporter_rate(url, proc.pid, payloads, "application/x-protobuf")
            progress("posting OTLP/JSON (what Triton 2.51 sends)")
            served_json = exporter_rate(url, proc.pid, json_payloads, "application/json")
        finally:
            proc.stop()
    return {
        "exporter": served,
        "exporter_json": served_json,
        "bare_protobuf_decode_spans_per_cpu_s": decode,
        "ratio_to_bare_decode": served["spans_per_cpu_s"] / decode,
        "body_spans": REQUESTS_PER_BODY * SPANS_PER_REQUEST,
        "body_bytes_mean": float(np.mean([len(b) for b in payloads])),
        "json_body_bytes_mean": float(np.mean([len(b) for b in json_payloads])),
        "goal_spans_per_cpu_s": 50_000,
    }


def markdown(result: dict[str, Any]) -> str:
    ex = result["exporter"]
    return "\n".join([
        "# Benchmark: OTLP ingest",
        "",
        "Generated by `tidescale bench ingest` (see `tidescale/benches/ingest.py`). Triton-shaped protobuf "
        f"bodies of {result['body_spans']} spans (~{result['body_bytes_mean'] / 1024:.0f} KiB) posted over "
        "keep-alive HTTP to `tidescale exporter serve`; rate = spans / CPU seconds of the server process.",
        "",
        "| path | spans per CPU second |",
        "|---|---|",
        f"| exporter, protobuf (HTTP + decode + join + histograms) | {ex['spans_per_cpu_s']:,.0f} |",
        f"| exporter, OTLP/JSON as Triton 2.51 posts it | {result['exporter_json']['spans_per_cpu_s']:,.0f} |",
        f"| bare `ExportTraceServiceRequest.FromString` | {result['bare_protobuf_decode_spans_per_cpu_s']:,.0f} |",
        "",
        f"Ratio exporter (protobuf) / bare decode: {result['ratio_to_bare_decode']:.3f}. "
        "Goal: ≥ 50,000 spans/s per core. "
        f"Wall-clock rate with one client: {ex['spans_per_wall_s']:,.0f} spans/s.",
        "",
        "```json",
        json.dumps(result, indent=1, sort_keys=True),
        "```",
        "",
    ])


def run_command(json_only: bool = False, quick: bool = False) -> None:
    bench_main(lambda progress: run(quick=quick, progress=progress), markdown, RESULT_MD, json_only)
