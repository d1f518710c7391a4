"""`tidescale bench overhead`: what request tracing costs Triton and the exporter, and how close the
exporter's P99 comes to the client's.

Each mode gets a fresh real `tritonserver` 2.51 replica serving the local fleet's `ctr_ranker` model
(Python backend, dynamic batching) and a fresh `tidescale exporter serve` process that polls it
(a targets file naming the replica's namespace and pod, as the chart's pod discovery would):

- `none`: no tracing; `summaries`: Triton's own latency summaries (`--metrics-config
  summary_latencies=true`), no tracing;
- `otlp-N`: `--trace-config mode=opentelemetry,rate=N` posting to the exporter's `/v1/traces`,
  with the resource attributes the chart's serving pods set (`k8s.namespace.name`, `k8s.pod.name`);
  the exporter is given N (`--trace-sample-rate`, as the docs show) and reports the N it detects
  from the stats it polls, read as the client finishes;
- `tracefile-N`: `mode=triton,rate=N` writing a trace file (`log-frequency` 100, so Triton writes
  `trace.json.0`, `.1`, ... as traces complete) that the exporter reads as the chart's
  `exporter.traceFiles` deploys it: from the pod's own subdirectory of a trace directory
  (`<dir>/<namespace>_<pod>/`), deleting the rotations it has read beyond the newest two. The bench
  hard-links each rotation aside as it appears, to read the server's own windows after the round.

A warm-up of WARMUP_REQUESTS (not counted, its spans in before the run starts) wakes the model
and the connections; then a fixed number of requests comes from a real client: perf_analyzer (HTTP,
fixed concurrency, `--request-count`, per-request stamps from `--profile-export-file`) where it
runs, else the project's open-loop load generator at a fixed rate. The run ends once the exporter
has counted every request sent; failing that, SETTLE_S after the last answer at the earliest, once
its count has stood still for longer than Triton's OTLP batch processor waits between posts (5 s).
Each mode runs in ROUNDS rounds of its requests, in ABBA order (every other round backwards), so a
machine whose speed drifts during the run weighs on every mode alike; the rounds' spread is
reported. Triton 2.51 crashes while tracing under load (most at rate 1, in both modes): a round
whose replica dies is tried once more, and the crashes are reported with the mode.

Costs are CPU time divided by requests, never wall-clock times: Triton's is the utime + stime of the
whole process tree (tritonserver and its Python backend stubs, /proc), its requests the delta of
`nv_inference_request_success`; the exporter's is its own process tree's. The exporter runs in every
mode, so Triton serves the same stats polls throughout and "added vs none" is the cost of tracing
alone; in `none` and `summaries` the exporter's CPU is its idle polling cost, which is subtracted
to give the exporter's net cost per traced request. The exporter's P99 is Prometheus'
`histogram_quantile` over the delta of its request-stage buckets across the run; the client's P99
is over exactly the requests the client sent.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np

from tidescale.benches.common import Progress
from tidescale.benches.histogram import histogram_quantile
from tidescale.benches.loadclients import CONCURRENCY, Client, ClientRun, ServerStoppedAnswering, choose_client
from tidescale.benches.proccpu import process_cpu_seconds, process_tree, read_proc_stats, tree_cpu_seconds
from tidescale.benches.report import BENCH_DIR
from tidescale.benches.tracefile import ServerWindows, read_text, server_windows
from tidescale.contracts import catalog
from tidescale.contracts.errors import TidescaleError, UsageError
from tidescale.devstack import tools
from tidescale.devstack.exporter import spawn_exporter
from tidescale.devstack.fleet.exposition import parse
from tidescale.devstack.fleet.model_repo import DEFAULT_MODELS, ModelSpec, write_model_repository
from tidescale.devstack.fleet.triton import OTLP_SCHEDULE_DELAY_S, ReplicaPorts, TraceSettings, TritonReplica
from tidescale.exporters.tracefile import trace_files
from tidescale.sim.samples import sample_quantile

RESULT_MD = BENCH_DIR / "overhead.md"
RESULT_PNG = RESULT_MD.with_suffix(".png")
MODEL_SPEC: ModelSpec = next(m for m in DEFAULT_MODELS if m.name == "ctr_ranker").with_load_seconds(0.0)
MODEL = MODEL_SPEC.name
NAMESPACE, POD = "bench", "triton-overhead-0"
TOKEN = "bench-overhead-token"
DEFAULT_MODES = ("none", "summaries", "otlp-1", "otlp-10", "otlp-100", "tracefile-1", "tracefile-10")
DEFAULT_REQUESTS = 50_000
QUICK_REQUESTS = 3_000
ROUNDS = 2  # each mode twice, in ABBA order, half the requests each time
ATTEMPTS = 2  # a round whose replica crashed (2.51 does, tracing) is tried once more on a fresh one
WARMUP_REQUESTS = 500
SETTLE_S = OTLP_SCHEDULE_DELAY_S + 0.5  # after the last request: Triton's OTLP posts what it holds every 5 s
QUIET_S = 2.0  # ... and no new exporter sample for this long (the trace-file tailer reads every second)
# ... or, over OTLP, for longer than a whole schedule delay: a post of up to 2048 spans comes only every
# 5 s at these loads, so a count that stood still for 2 s may still have a post on its way.
OTLP_QUIET_S = OTLP_SCHEDULE_DELAY_S + 1.0
# How often `settle` reads the exporter's /metrics. Each read renders every latency series (about 1 ms of
# the exporter's CPU), which Prometheus does every 15-30 s: reading 4 times a second would bill the
# exporter for scrapes that no deployment makes.
SETTLE_POLL_S = 1.0
# After each round, the same exporter (its series, targets and poller) is left alone this long: its
# CPU per second then is its idle cost, taken off its CPU during the round.
IDLE_S = 15.0
# ... then reads its /metrics this many times in a row: their CPU (net of its idle rate) per read is what
# each of the bench's own reads during the round cost it, taken off to leave the live path alone.
READ_COST_READS = 8
SETTLE_TIMEOUT_S = 60.0
# The exporter's stats poll interval, set explicitly: its idle cost comes in one lump per poll, so a round
# holds one poll more or less than its idle rate times its length predicts. That lump, per traced request
# of the round, is how far the live figure can be off: a round at or under it is not judged.
EXPORTER_POLL_S = 5.0
TRACE_FILE_FREQUENCY = 100  # Triton writes the trace file every this many traces (0 would mean: at exit)
# The chart's exporter.traceFiles.keepRotations (a unit test holds the two equal).
TRACE_FILE_KEEP_ROTATIONS = 2
STAGE = "request"
GOAL_RATE = 10
GOALS = {"p99_error_max": 0.02, "min_requests": 50_000, "triton_added_cpu_us_max": 10.0,
         "exporter_cpu_us_per_traced_request_max": 40.0}

Tracing = Literal["none", "summaries", "otlp", "tracefile"]


# --- modes ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mode:
    """One configuration: `none`, `summaries`, `otlp-N` or `tracefile-N` (N: Triton's trace rate)."""

    name: str
    tracing: Tracing
    rate: int | None = None  # one request in `rate` traced; None when nothing is traced

    @property
    def traced(self) -> bool:
        return self.rate is not None

    @property
    def quiet_s(self) -> float:
        """How long the exporter's count must stand still before settle takes every span as in."""
        return OTLP_QUIET_S if self.tracing == "otlp" else QUIET_S

    def trace_settings(self, exporter_url: str, workdir: Path, pod: str = POD) -> TraceSettings | None:
        """The traced replica's flags; a trace file goes in *pod*'s subdirectory (made here, as the
        kubelet makes it before the container starts)."""
        if self.tracing == "otlp":
            assert self.rate is not None
            return TraceSettings(mode="opentelemetry", rate=self.rate, url=f"{exporter_url}/v1/traces")
        if self.tracing == "tracefile":
            assert self.rate is not None
            trace_file(workdir, pod).parent.mkdir(parents=True, exist_ok=True)
            return TraceSettings(mode="triton", rate=self.rate, file=trace_file(workdir, pod),
                                 log_frequency=TRACE_FILE_FREQUENCY)
        return None


def parse_mode(text: str) -> Mode:
    """`none`, `summaries`, `otlp-N`, `tracefile-N` (N >= 1); UsageError names anything else."""
    name = text.strip().lower()
    if name in ("none", "summaries"):
        return Mode(name, name)  # type: ignore[arg-type]
    kind, _, rate_text = name.partition("-")
    if kind not in ("otlp", "tracefile") or not rate_text:
        raise UsageError(f"unknown overhead mode {text!r}: use none, summaries, otlp-N or tracefile-N "
                         f"(N: Triton's trace rate, e.g. {', '.join(DEFAULT_MODES)})")
    try:
        rate = int(rate_text)
    except ValueError:
        raise UsageError(f"mode {text!r}: the trace rate {rate_text!r} is not a whole number") from None
    if rate < 1:
        raise UsageError(f"mode {text!r}: the trace rate must be >= 1 (one request in N traced), got {rate}")
    return Mode(f"{kind}-{rate}", kind, rate)  # type: ignore[arg-type]


def parse_modes(texts: Iterable[str]) -> list[Mode]:
    """Modes in the order given, each once; `a,b` lists are split."""
    out: dict[str, Mode] = {}
    for text in texts:
        for part in text.split(","):
            if part.strip():
                mode = parse_mode(part)
                out.setdefault(mode.name, mode)
    if not out:
        raise UsageError("no overhead mode given")
    return list(out.values())


def trace_dir(workdir: Path) -> Path:
    """The exporter's trace directory: the chart's hostPath, one subdirectory per pod."""
    return workdir / "traces"


def trace_file(workdir: Path, pod: str = POD) -> Path:
    """The replica's file, in its pod's subdirectory (the kubelet's `subPathExpr` makes it)."""
    return trace_dir(workdir) / f"{NAMESPACE}_{pod}" / "trace.json"


def kept_file(workdir: Path) -> Path:
    """Where the rotations are linked aside (the exporter deletes them once read)."""
    return workdir / "kept" / "trace.json"


class RotationKeeper:
    """Hard-links each rotation of *source* into *kept*'s directory as soon as it appears, so the
    round's trace survives the exporter's pruning (a link costs Triton and the exporter nothing:
    the exporter's unlink then only drops a name). `missed` counts rotations deleted first."""

    def __init__(self, source: Path, kept: Path, interval_s: float = 0.02) -> None:
        self.source, self.kept, self.interval_s = source, kept, interval_s
        kept.parent.mkdir(parents=True, exist_ok=True)
        self.missed = 0
        self._linked: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rotation-keeper", daemon=True)

    def start(self) -> RotationKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        """After the replica stopped: Triton writes its last traces on exit."""
        self._stop.set()
        self._thread.join()
        self.sweep()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sweep()

    def sweep(self) -> None:
        for path in trace_files(self.source):
            name = os.path.basename(path)
            if name in self._linked or name == self.source.name:  # rotations only
                continue
            try:
                os.link(path, self.kept.parent / name)
            except FileExistsError:
                pass
            except OSError:
                self.missed += 1
                continue
            self._linked.add(name)


# --- metrics -------------------------------------------------------------------------------------

Sample = tuple[str, dict[str, str], float]


def samples(text: str) -> list[Sample]:
    """Every sample of an exposition, named as written (`_bucket`, `_count`; no `_total` added)."""
    return [(s.name, s.label_dict, s.value) for fam in parse(text).values() for s in fam.samples]


def _sum(rows: Iterable[Sample], name: str, **labels: str) -> float | None:
    values = [v for n, lab, v in rows if n == name and all(lab.get(k) == want for k, want in labels.items())]
    return sum(values) if values else None


@dataclass(frozen=True)
class TritonView:
    requests: float  # nv_inference_request_success of the model
    summary_p99_s: float | None  # nv_inference_request_summary_us{quantile="0.99"}, when summaries are on


def triton_view(text: str, model: str = MODEL) -> TritonView:
    rows = samples(text)
    success = _sum(rows, catalog.get("nv_inference_request_success").name, model=model) or 0.0
    p99 = _sum(rows, catalog.get("nv_inference_request_summary_us").name, model=model, quantile="0.99")
    return TritonView(success, None if p99 is None or math.isnan(p99) else p99 / 1e6)


@dataclass(frozen=True)
class ExporterView:
    buckets: dict[float, float]  # le -> cumulative (weighted) count of the model's request stage
    count: float
    detected_rate: float | None
    confidence: float | None
    spans: float = 0.0  # OTLP spans accepted (a trace-file mode has none)
    ingest_cpu_s: float = 0.0  # the exporter's own count of its CPU turning traces into samples


def exporter_view(text: str, model: str = MODEL) -> ExporterView:
    rows = samples(text)
    hist = catalog.get("tidescale_request_duration_seconds").name
    buckets: dict[float, float] = {}
    for name, labels, value in rows:
        if name == f"{hist}_bucket" and labels.get("model") == model and labels.get("stage") == STAGE:
            le = float(labels["le"])
            buckets[le] = buckets.get(le, 0.0) + value
    who = {"model": model, "namespace": NAMESPACE, "pod": POD}
    return ExporterView(buckets, _sum(rows, f"{hist}_count", model=model, stage=STAGE) or 0.0,
                        _sum(rows, catalog.get("tidescale_trace_sample_rate_detected").name, **who),
                        _sum(rows, catalog.get("tidescale_trace_sample_rate_confidence").name, **who),
                        _sum(rows, catalog.get("tidescale_exporter_spans_accepted_total").name) or 0.0,
                        _sum(rows, catalog.get("tidescale_exporter_ingest_cpu_seconds_total").name) or 0.0)


def bucket_delta(after: Mapping[float, float], before: Mapping[float, float]) -> dict[float, float]:
    return {le: count - before.get(le, 0.0) for le, count in after.items()}


def bucketed(latencies: np.ndarray, bounds: Iterable[float]) -> dict[float, float]:
    """*latencies* counted into cumulative "le" buckets at the finite *bounds*, +Inf added: what the
    exporter would serve had it measured exactly the client's requests. Its `histogram_quantile`
    against the client's exact quantile is the bucket layout's own share of the P99 error."""
    finite = sorted(b for b in bounds if math.isfinite(b))
    cumulative = np.searchsorted(np.sort(latencies), finite, side="right")  # count of values <= bound
    return {**{b: float(c) for b, c in zip(finite, cumulative, strict=True)}, math.inf: float(latencies.size)}


@dataclass(frozen=True)
class Snapshot:
    """What the run is measured between: CPU, Triton's request counter, the exporter's histogram."""

    triton_cpu_s: float
    exporter_cpu_s: float
    triton: TritonView
    exporter: ExporterView
    t: float = field(default_factory=time.monotonic)


# --- one mode ------------------------------------------------------------------------------------

class BenchReplica(TritonReplica):
    """A replica with what the chart's serving pods add: OTLP resource attributes naming the pod."""

    def argv(self, install: tools.TritonInstall) -> list[str]:
        argv = super().argv(install)
        if self.trace is not None and self.trace.mode == "opentelemetry":
            argv += ["--trace-config", f"opentelemetry,resource=k8s.namespace.name={self.namespace}",
                     "--trace-config", f"opentelemetry,resource=k8s.pod.name={self.pod}"]
        return argv


def exporter_env(mode: Mode, targets: Path, workdir: Path) -> dict[str, str]:
    """Poll the replica as a known pod; take Triton's spans without a token (opentelemetry-cpp reads its
    header from the environment, and the bench posts from loopback); tell it N; tail the trace file."""
    env = {"TIDESCALE_EXPORTER_TARGETS_FILE": str(targets), "TIDESCALE_EXPORTER_TRACES_REQUIRE_TOKEN": "false",
           "TIDESCALE_EXPORTER_LOG_FORMAT": "text", "TIDESCALE_EXPORTER_POLL_INTERVAL_S": f"{EXPORTER_POLL_S:g}"}
    if mode.rate is not None:  # configured as the docs and the local stack do; detection is reported apart
        env["TIDESCALE_EXPORTER_TRACE_SAMPLE_RATE"] = str(mode.rate)
    if mode.tracing == "tracefile":
        env["TIDESCALE_EXPORTER_TRACE_DIR"] = str(trace_dir(workdir))
        env["TIDESCALE_EXPORTER_TRACE_FILE_KEEP_ROTATIONS"] = str(TRACE_FILE_KEEP_ROTATIONS)
    return env


def _get(client: httpx.Client, url: str) -> str:
    resp = client.get(url)
    resp.raise_for_status()
    return resp.text


def settle(http: httpx.Client, exporter_url: str, *, target: float | None = None, quiet_s: float | None = None,
           timeout: float = SETTLE_TIMEOUT_S, clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> int:
    """Wait until every span of the requests sent has arrived: the client finished (now), and the
    exporter's request-stage count reached *target* (the requests it should have counted by then), or,
    as the count may never reach it (a trace file holds its last traces until Triton exits; a detected
    rate weighs differently), until SETTLE_S has passed and the count stood still for *quiet_s*
    (QUIET_S by default), or *timeout*. The /metrics reads it made (each costs the exporter CPU that
    the live path does not spend)."""
    quiet = QUIET_S if quiet_s is None else quiet_s
    start = clock()
    last, since = -1.0, start
    reads = 0
    while clock() - start < timeout:
        count = exporter_view(_get(http, f"{exporter_url}/metrics")).count
        reads += 1
        now = clock()
        if count != last:
            last, since = count, now
        if target is not None and count >= target:
            break
        if now - start >= SETTLE_S and now - since >= quiet:
            break
        sleep(SETTLE_POLL_S)
    return reads


def snapshot(http: httpx.Client, replica: TritonReplica, exporter_pid: int, exporter_url: str) -> Snapshot:
    assert replica.process is not None
    [triton_cpu], exporter_cpu = tree_cpu_seconds([replica.process.pid]), process_cpu_seconds(exporter_pid)
    return Snapshot(triton_cpu, exporter_cpu, triton_view(_get(http, replica.metrics_url)),
                    exporter_view(_get(http, f"{exporter_url}/metrics")))


@dataclass(frozen=True)
class ModeRun:
    before: Snapshot
    after: Snapshot
    client: ClientRun
    at_end: tuple[TritonView, ExporterView]  # read as the client finished: Triton's summary, the detected N
    triton_version: str = ""
    idle: tuple[float, float] = (0.0, 0.0)  # (exporter CPU s, wall s) left alone after the round
    # The bench's own /metrics reads between the two snapshots' CPU readings (the first snapshot's, the
    # one as the client finished, settle's), and what one read costs the exporter (CPU s, net of idle).
    reads: int = 0
    read_cpu_s: float = 0.0
    # Trace-file modes: every traced request's request stage and frontend window, from the file Triton wrote.
    windows: ServerWindows | None = None


def idle_cost(exporter_pid: int, seconds: float = IDLE_S) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of the exporter over *seconds* with nothing sent to it and nothing
    read from it: its polling and housekeeping, in the same process that served the round."""
    start, cpu0 = time.monotonic(), process_cpu_seconds(exporter_pid)
    time.sleep(seconds)
    cpu1 = process_cpu_seconds(exporter_pid)
    return cpu1 - cpu0, time.monotonic() - start


def read_cost(http: httpx.Client, exporter_url: str, exporter_pid: int, idle: tuple[float, float],
              reads: int = READ_COST_READS) -> float:
    """The exporter's CPU seconds per /metrics read, net of its *idle* (CPU s, wall s) rate: after the
    round, so it renders the round's series. Prometheus reads it every 15-30 s; the bench reads it
    about once a second while it waits, which is no part of the live path's cost."""
    start, cpu0 = time.monotonic(), process_cpu_seconds(exporter_pid)
    for _ in range(reads):
        _get(http, f"{exporter_url}/metrics")
    cpu, wall = process_cpu_seconds(exporter_pid) - cpu0, time.monotonic() - start
    return max(0.0, (cpu - (idle_rate(idle) or 0.0) * wall) / reads)


def idle_rate(idle: tuple[float, float]) -> float | None:
    """The exporter's idle CPU seconds per second from an (CPU s, wall s) window; None when none was measured."""
    cpu, wall = idle
    return cpu / wall if wall > 0 else None


@dataclass(frozen=True)
class ModeFailure:
    """Triton died during the run (2.51 crashes under OTLP tracing at low rates): why, and how far it got."""

    error: str
    counted_before_failure: float  # the exporter's (weighted) request-stage count until then (warm-up or run)
    triton_version: str = ""


CRASH_NOTE = ("Triton 2.51 crashed here while tracing under this load (SIGSEGV, or SIGABRT on heap corruption), "
              "in both trace modes, nearly always at rate 1 and sometimes at rate 10; for OpenTelemetry at low "
              "rates this is a known Triton issue (triton-inference-server/server#7795). The trace-file mode crashes "
              "too, where the exporter only reads a file (and by hand with `log-frequency=0`, no file until exit), so "
              "the exporter does not trigger it; the docs advise rate=10.")
SIGNAL = re.compile(r"Signal \((\d+)\) received")
GLIBC_ABORT = re.compile(r"^(corrupted .*|double free.*|free\(\): .*|malloc\(\): .*|munmap_chunk\(\): .*)$")


def crash_reason(log_tail: str) -> str:
    """What a dead tritonserver's log says: the signal, and glibc's heap-corruption message if any."""
    lines = [line.strip() for line in log_tail.splitlines()]
    signal = next((m.group(1) for line in lines if (m := SIGNAL.search(line))), None)
    heap = next((line for line in lines if GLIBC_ABORT.match(line)), None)
    parts = ([f"signal {signal}"] if signal else []) + ([heap] if heap else [])
    return ", ".join(parts) or "no reason in its log"


class TritonDied(TidescaleError):
    """The replica exited, or stopped answering, while the client was sending (Triton 2.51 does both
    under some tracing loads)."""


def died_saying(died: TritonDied, version: str) -> str:
    """Why a round failed, naming the Triton version that died (the page reports the crashes by version)."""
    return str(died).replace("tritonserver", f"tritonserver {version}", 1)


def crashed(replica: TritonReplica) -> bool:
    """The replica exited, or its log says it caught a fatal signal (2.51 can hang in its handler)."""
    if replica.process is None:
        return False
    return not replica.alive() or SIGNAL.search(replica.process.log_tail(40)) is not None


class ServerStalled(ServerStoppedAnswering):
    """No request completed for a while although the client was sending: the server hangs."""


@dataclass
class StallWatch:
    """The clients' abort check: True when the replica crashed; ServerStalled when its completion count
    has not moved for *stall_s* (tritonserver 2.51 also hangs, alive, while tracing to a file at rate 1,
    and perf_analyzer then waits forever). The count is read every *every_s*, not every check: Triton
    renders its metrics on its own CPU, which the bench measures."""

    crashed: Callable[[], bool]
    completed: Callable[[], float]  # nv_inference_request_success of the model
    stall_s: float = 60.0
    every_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _count: float | None = None
    _moved_at: float | None = None
    _read_at: float | None = None

    def __call__(self) -> bool:
        if self.crashed():
            return True
        now = self.clock()
        if self._read_at is not None and now - self._read_at < self.every_s:
            return False
        self._read_at = now
        with contextlib.suppress(httpx.HTTPError, TidescaleError):  # unreadable: no progress seen
            count = self.completed()
            if count != self._count:
                self._count, self._moved_at = count, now
        if self._moved_at is None:
            self._moved_at = now
        if now - self._moved_at >= self.stall_s:
            raise ServerStalled(f"no request completed for {now - self._moved_at:.0f} s")
        return False


def completed_requests(replica: TritonReplica) -> float:
    resp = httpx.get(replica.metrics_url, timeout=5.0)
    resp.raise_for_status()
    return triton_view(resp.text).requests


def play(client: Client, replica: TritonReplica, requests: int, workdir: Path) -> ClientRun:
    """The client's run, stopped if the replica crashes or hangs; TritonDied, saying why from Triton's
    log, when the replica is what failed."""
    watch = StallWatch(lambda: crashed(replica), lambda: completed_requests(replica))
    try:
        return client.play(replica.http_url, requests, workdir, watch)
    except TidescaleError as exc:
        if replica.process is None or not crashed(replica):
            if isinstance(exc, ServerStoppedAnswering):  # a hang, or error answers, from a live server
                raise TritonDied(f"tritonserver stopped answering; {exc}") from exc
            raise
        said = " ".join(str(exc).split())
        raise TritonDied(f"tritonserver died ({crash_reason(replica.process.log_tail(120))}); {said[:160]}") from exc


def measure(mode: Mode, client: Client, requests: int, repo: Path, workdir: Path,
            progress: Progress, idle_s: float = IDLE_S) -> ModeRun | ModeFailure:
    """One mode on a fresh replica and a fresh exporter; a ModeFailure when Triton dies during it."""
    workdir.mkdir(parents=True, exist_ok=True)
    ports = ReplicaPorts.allocate()
    targets = workdir / "targets.json"
    targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{ports.http}"],
                                    "labels": {"namespace": NAMESPACE, "pod": POD}}]))
    keeper = None
    if mode.tracing == "tracefile":
        keeper = RotationKeeper(trace_file(workdir), kept_file(workdir)).start()
    exporter, exporter_url = spawn_exporter(workdir, token=TOKEN, env=exporter_env(mode, targets, workdir))
    replica: TritonReplica | None = None
    regions: list[str] = []
    before: Snapshot | None = None
    try:
        replica = BenchReplica(POD, NAMESPACE, repo, workdir / "triton", ports=ports, summary_latencies=mode.tracing
                               == "summaries", trace=mode.trace_settings(exporter_url, workdir)).start()
        replica.wait_ready()
        version = replica.server_version()
        assert replica.process is not None
        regions = stub_regions(replica.process.pid)
        with httpx.Client(timeout=10.0) as http:
            try:
                progress(f"{mode.name}: warm-up, {WARMUP_REQUESTS} requests")
                play(client, replica, WARMUP_REQUESTS, workdir)
                if mode.traced:  # a fresh exporter: the warm-up's requests are all it will have counted
                    settle(http, exporter_url, target=WARMUP_REQUESTS, quiet_s=mode.quiet_s)
                before = snapshot(http, replica, exporter.pid, exporter_url)  # reads /metrics after its CPU
                progress(f"{mode.name}: {requests} requests from {client.name}")
                played = play(client, replica, requests, workdir)
            except TritonDied as died:
                counted = exporter_view(_get(http, f"{exporter_url}/metrics")).count
                when = "the warm-up" if before is None else "the run"
                progress(f"{mode.name}: {died} during {when}")
                return ModeFailure(f"{died_saying(died, version)} during {when}.",
                                   counted - (0.0 if before is None else before.exporter.count), version)
            at_end = (triton_view(_get(http, replica.metrics_url)),
                      exporter_view(_get(http, f"{exporter_url}/metrics")))
            # with the first snapshot's and at_end's reads
            reads = 2 + settle(http, exporter_url, target=before.exporter.count + requests, quiet_s=mode.quiet_s)
            after = snapshot(http, replica, exporter.pid, exporter_url)
            idle = idle_cost(exporter.pid, idle_s)
            read_cpu_s = read_cost(http, exporter_url, exporter.pid, idle)
    finally:
        exporter.stop()  # first: Triton waits for open HTTP connections (the poller's) before it exits
        if replica is not None:
            stop_replica(replica, regions)
        if keeper is not None:
            keeper.stop()
    if keeper is not None and keeper.missed:
        progress(f"{mode.name}: {keeper.missed} rotation(s) deleted before they were linked aside: the "
                 "server's windows miss them")
    windows = (read_windows(kept_file(workdir), math.ceil(WARMUP_REQUESTS / mode.rate))
               if mode.tracing == "tracefile" and mode.rate else None)
    return ModeRun(before, after, played, at_end, version, idle, reads, read_cpu_s, windows)


def read_windows(path: Path, skip: int) -> ServerWindows:
    """The round's windows from the trace file and its rotations (read after the replica stopped, as
    Triton writes its last traces on exit), without the warm-up's *skip* traced requests."""
    return server_windows((read_text(f) for f in trace_files(path)), skip)


SHM_REGION = re.compile(rb"^triton_python_backend_shm_region_[0-9a-f-]+$")


def _regions_of(pid: int, proc: Path) -> list[str]:
    try:
        args = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return []
    return [a.decode() for a in args if SHM_REGION.match(a)]


def stub_regions(root: int, proc: Path = Path("/proc")) -> list[str]:
    """The shared-memory regions the Python backend stubs under *root* were given (their arguments)."""
    return [name for pid in process_tree(root, read_proc_stats(proc)) for name in _regions_of(pid, proc)]


def holders(regions: Sequence[str], proc: Path = Path("/proc")) -> list[int]:
    """The processes (stubs) whose arguments name one of *regions*, whoever their parent is now."""
    wanted = set(regions)
    return [pid for pid in read_proc_stats(proc) if wanted & set(_regions_of(pid, proc))]


def stop_replica(replica: TritonReplica, regions: Sequence[str] = (), shm: Path = Path("/dev/shm")) -> None:
    """Stop it, at once if it crashed. A crashed server leaves its Python backend stubs behind (adopted
    by init once it exits) and their shared memory: *regions*, read while it ran, find both."""
    if replica.process is None:
        return
    died = crashed(replica)
    if died:
        replica.kill()
    replica.stop()
    if not died:
        return
    for pid in holders(regions):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for name in regions:
        (shm / name).unlink(missing_ok=True)


# --- arithmetic ----------------------------------------------------------------------------------

def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def _rel(value: float | None, truth: float | None) -> float | None:
    if value is None or truth is None or truth <= 0:
        return None
    return (value - truth) / truth


def _p99(latencies: np.ndarray) -> float | None:
    return sample_quantile(latencies, 0.99)


def _per_request(cpu_s: float, requests: float) -> float | None:
    return _round(cpu_s * 1e6 / requests) if requests > 0 else None


def live_cpu_s(run: ModeRun) -> float | None:
    """The exporter's CPU seconds in a round on the live path: net of its idle rate (measured after the
    round) and of the bench's own /metrics reads; None when its idle was not measured."""
    rate = idle_rate(run.idle)
    if rate is None:
        return None
    measured_s = run.after.t - run.before.t
    return run.after.exporter_cpu_s - run.before.exporter_cpu_s - rate * measured_s - run.reads * run.read_cpu_s


def live_noise_s(run: ModeRun) -> float | None:
    """How far a round's live CPU can be off: one stats poll's worth of the idle cost (EXPORTER_POLL_S at
    its idle rate); None when its idle was not measured."""
    rate = idle_rate(run.idle)
    return None if rate is None else rate * EXPORTER_POLL_S


def mode_result(mode: Mode, runs: Sequence[ModeRun]) -> dict[str, Any]:
    """The per-mode figures over its rounds (sums of the deltas, the client's latencies together): CPU per
    request, throughput, the trace rate found, P99 against the client's; each round's Triton CPU per
    request apart, whose spread is the noise of the machine."""
    def total(delta: Callable[[ModeRun], float]) -> float:
        return sum(delta(r) for r in runs)

    requests = total(lambda r: r.after.triton.requests - r.before.triton.requests)
    triton_cpu = total(lambda r: r.after.triton_cpu_s - r.before.triton_cpu_s)
    exporter_cpu = total(lambda r: r.after.exporter_cpu_s - r.before.exporter_cpu_s)
    idle = idle_rate((total(lambda r: r.idle[0]), total(lambda r: r.idle[1])))  # over every round's idle window
    measured_s = total(lambda r: r.after.t - r.before.t)
    reads, reads_cpu = total(lambda r: r.reads), total(lambda r: r.reads * r.read_cpu_s)
    net_cpu = None if idle is None else exporter_cpu - idle * measured_s
    wall = total(lambda r: r.client.wall_s)
    buckets: dict[float, float] = {}
    for r in runs:
        for le, n in bucket_delta(r.after.exporter.buckets, r.before.exporter.buckets).items():
            buckets[le] = buckets.get(le, 0.0) + n
    latencies = np.concatenate([r.client.latencies_s for r in runs]) if runs else np.empty(0)
    rounds = [_per_request(r.after.triton_cpu_s - r.before.triton_cpu_s, r.after.triton.requests
                           - r.before.triton.requests) for r in runs]
    summary, end = runs[-1].at_end if runs else (TritonView(0.0, None), ExporterView({}, 0.0, None, None))
    traced = requests / mode.rate if mode.rate else None
    client_p99 = _p99(latencies)
    last_p99 = _p99(runs[-1].client.latencies_s) if runs else None
    exporter_p99 = histogram_quantile(0.99, buckets)
    client_bucketed_p99 = histogram_quantile(0.99, bucketed(latencies, buckets)) if buckets and latencies.size else None
    measured = [r for r in rounds if r is not None]
    split = p99_split(client_p99, exporter_p99, [r.windows for r in runs if r.windows is not None])

    def traced_per_round(seconds: Callable[[ModeRun], float | None]) -> list[float | None]:
        return [None if mode.rate is None or (cpu := seconds(r)) is None
                else _per_request(cpu, (r.after.triton.requests - r.before.triton.requests) / mode.rate)
                for r in runs]

    live_rounds, noise_rounds = traced_per_round(live_cpu_s), traced_per_round(live_noise_s)
    return {
        "mode": mode.name, "tracing": mode.tracing, "trace_rate": mode.rate, "error": None,
        "crashes": 0, "crash_errors": [], "exporter_counted_before_crashes": [],
        "triton_version": runs[-1].triton_version if runs else "", "rounds": len(runs),
        "requests": int(requests), "client_requests": int(latencies.size),
        "client_errors": sum(r.client.errors for r in runs), "client_wall_s": _round(wall, 3),
        "throughput_rps": _round(requests / wall if wall > 0 else None, 1),
        "measured_s": _round(measured_s, 2),
        "triton_cpu_s": _round(triton_cpu, 3), "triton_cpu_us_per_request": _per_request(triton_cpu, requests),
        "triton_cpu_us_per_request_by_round": rounds,
        "triton_cpu_spread_us": _round(max(measured) - min(measured)) if len(measured) > 1 else None,
        "exporter_cpu_s": _round(exporter_cpu, 3), "exporter_cpu_us_per_request": _per_request(exporter_cpu, requests),
        "exporter_role": "ingest" if mode.traced else "polling only (idle cost)",
        "traced_requests": _round(traced, 1),
        "exporter_cpu_us_per_traced_request": _per_request(exporter_cpu, traced) if traced else None,
        "exporter_idle_cpu_ms_per_s": _round(None if idle is None else idle * 1e3, 2),
        # net of this exporter's own idle cost, measured right after each round in the same process
        "exporter_net_cpu_us_per_traced_request": (
            _per_request(net_cpu, traced) if traced and net_cpu is not None else None),
        "exporter_bench_reads": int(reads),
        "exporter_ms_per_read": _round(reads_cpu * 1e3 / reads if reads else None, 3),
        # ... and of the bench's own /metrics reads during the round: the live path alone (the goal's)
        "exporter_live_cpu_us_per_traced_request": (
            _per_request(net_cpu - reads_cpu, traced) if traced and net_cpu is not None else None),
        # Per round, with how far it can be off (one stats poll's idle cost per traced request): a round at
        # or under that bound spent no more than the noise of what was taken off (idle, reads), so the goal
        # is not judged on it.
        "exporter_live_cpu_us_per_traced_request_by_round": live_rounds if traced else [],
        "exporter_live_noise_us_by_round": noise_rounds if traced else [],
        "exporter_counted_requests": _round(total(lambda r: r.after.exporter.count - r.before.exporter.count), 1),
        "exporter_spans_accepted": int(total(lambda r: r.after.exporter.spans - r.before.exporter.spans)),
        # The exporter's own count of the CPU its ingest threads spent (decode, join, histograms), which
        # the host's idle noise does not swamp. Over OTLP a floor under the live path (which also holds
        # the HTTP server's work per post); from a trace file it includes the tailer's idle polls.
        "exporter_ingest_cpu_us_per_traced_request": (
            _per_request(total(ingest_cpu_s), traced) if traced else None),
        "exporter_ingest_cpu_us_per_traced_request_by_round": traced_per_round(ingest_cpu_s) if traced else [],
        "detected_rate": end.detected_rate, "detected_confidence": end.confidence,
        "client_p99_s": _round(client_p99, 6), "exporter_p99_s": _round(exporter_p99, 6),
        "p99_error": _round(_rel(exporter_p99, client_p99), 4) if mode.traced else None,
        # The error split in two: the client's own requests read through the exporter's buckets
        # (the layout's interpolation, which no trace rate removes), and the rest (sampling, and the
        # HTTP time the server does not see).
        "client_p99_through_buckets_s": _round(client_bucketed_p99, 6) if mode.traced else None,
        "p99_error_of_buckets": _round(_rel(client_bucketed_p99, client_p99), 4) if mode.traced else None,
        "p99_error_beyond_buckets": _round(_rel(exporter_p99, client_bucketed_p99), 4) if mode.traced else None,
        **split,
        # Triton's summary of the last round (a fresh replica's), against the client's P99 of that round
        "triton_summary_p99_s": _round(summary.summary_p99_s, 6),
        "triton_summary_p99_error": _round(_rel(summary.summary_p99_s, last_p99), 4),
    }


def ingest_cpu_s(run: ModeRun) -> float:
    """The exporter's ingest CPU seconds over *run* (by its own counter)."""
    return run.after.exporter.ingest_cpu_s - run.before.exporter.ingest_cpu_s


def p99_split(client_p99: float | None, exporter_p99: float | None,
              windows: Sequence[ServerWindows]) -> dict[str, float | None]:
    """Where the P99 error comes from, where Triton's trace file recorded every stamp: the exporter's
    histogram against the exact P99 of the same traced requests' request stage (its buckets), that
    against the frontend's whole window (what the request stage misses inside the server), and that
    against the client's P99 (what no server stamp covers). The three shares of the client's P99
    add up to the error."""
    keys = ("trace_request_p99_s", "trace_frontend_p99_s", "p99_error_histogram_vs_trace",
            "p99_error_frontend", "p99_error_client_side")
    request = _p99(np.concatenate([w.request for w in windows])) if windows else None
    frontend = _p99(np.concatenate([w.frontend for w in windows])) if windows else None
    if request is None or frontend is None or exporter_p99 is None or not client_p99:
        return dict.fromkeys(keys)
    shares = ((exporter_p99 - request) / client_p99, (request - frontend) / client_p99,
              (frontend - client_p99) / client_p99)
    return dict(zip(keys, (_round(request, 6), _round(frontend, 6), *(_round(v, 4) for v in shares)), strict=True))


def with_crashes(result: dict[str, Any], failures: Sequence[ModeFailure]) -> dict[str, Any]:
    """*result* (the rounds that completed) with the attempts whose replica died: how many, why, and about
    how many requests the exporter had counted by then. With no round completed the figures are None and
    `error` says why."""
    out = {**result, "crashes": len(failures), "crash_errors": sorted({f.error for f in failures}),
           "exporter_counted_before_crashes": [_round(f.counted_before_failure, 1) for f in failures]}
    if failures and not result["rounds"]:
        out.update({"requests": None, "client_requests": None, "client_errors": None, "traced_requests": None,
                    "exporter_counted_requests": None, "exporter_spans_accepted": None,
                    "error": failures[0].error, "triton_version": failures[0].triton_version})
    return out


def against_none(results: list[dict[str, Any]]) -> None:
    """Add Triton's CPU per request above the `none` mode's, and the exporter's CPU per traced request
    net of the `none` mode's exporter CPU per second over this mode's run: the estimate of earlier pages,
    kept beside the one net of the exporter's own idle cost (another process, minutes apart, makes it
    the noisier of the two)."""
    base = next((r for r in results if r["mode"] == "none" and not r["error"]), None)
    for r in results:
        added = idle = None
        if base is not None and r["triton_cpu_us_per_request"] is not None:
            added = r["triton_cpu_us_per_request"] - base["triton_cpu_us_per_request"]
        if base is not None and r["traced_requests"] and base["measured_s"]:
            idle_cpu_s = base["exporter_cpu_s"] / base["measured_s"] * r["measured_s"]
            idle = (r["exporter_cpu_s"] - idle_cpu_s) * 1e6 / r["traced_requests"]
        r["triton_added_cpu_us_vs_none"] = _round(added)
        r["exporter_net_cpu_us_per_traced_request_vs_none"] = _round(idle)


def triton_noise_us(results: Sequence[dict[str, Any]]) -> float | None:
    """Half the widest move of Triton's CPU per request between two rounds of one mode in this run:
    the bound on "added vs none" (two modes' means differ by that much with nothing between them;
    one run read summaries 48 µs under none, both rounds alike). None with one round per mode."""
    spreads = [r["triton_cpu_spread_us"] for r in results if r.get("triton_cpu_spread_us") is not None]
    return _round(max(spreads) / 2) if spreads else None


def judged_under(value: float | None, noise: float | None, limit: float) -> bool | None:
    """True when value ± noise is all at or under *limit*, False when all over, None (not judged)
    when the noise straddles it, or nothing was measured."""
    if value is None:
        return None
    margin = noise or 0.0
    if value + margin <= limit:
        return True
    return False if value - margin > limit else None


def goals(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's goals, reported (never asserted): at rate 10, P99 error and Triton's added CPU over
    enough requests; the exporter's CPU per traced request in every traced mode."""
    at = next((r for r in results if r["tracing"] == "otlp" and r["trace_rate"] == GOAL_RATE), None)
    out: dict[str, Any] = {}
    if at is not None and at["error"]:
        out[f"otlp-{GOAL_RATE}"] = {"error": at["error"]}
    elif at is not None:
        err, added = at["p99_error"], at["triton_added_cpu_us_vs_none"]
        noise = triton_noise_us(results)
        out[f"otlp-{GOAL_RATE}"] = {
            "requests": at["requests"], "enough_requests": at["requests"] >= GOALS["min_requests"],
            "p99_error": err, "p99_error_met": None if err is None else abs(err) <= GOALS["p99_error_max"],
            "p99_error_of_buckets": at.get("p99_error_of_buckets"),
            "p99_error_beyond_buckets": at.get("p99_error_beyond_buckets"),
            "triton_added_cpu_us": added, "triton_added_cpu_noise_us": noise,
            "triton_added_cpu_met": judged_under(added, noise, GOALS["triton_added_cpu_us_max"]),
        }
    limit = GOALS["exporter_cpu_us_per_traced_request_max"]
    out["exporter_cpu_per_traced_request"] = {}
    for r in results:
        if r["traced_requests"]:
            # Judged on the live path: net of the idle polling (which costs per poll interval, not per
            # request) and of the bench's own /metrics reads (which no deployment makes once a second).
            judged = r.get("exporter_live_cpu_us_per_traced_request")
            by_round = r.get("exporter_live_cpu_us_per_traced_request_by_round") or []
            bounds = r.get("exporter_live_noise_us_by_round") or [0.0] * len(by_round)
            noise = judged is not None and (judged <= 0 or any(
                v is None or v <= (bound or 0.0) for v, bound in zip(by_round, bounds, strict=True)))
            out["exporter_cpu_per_traced_request"][r["mode"]] = {
                "us": r["exporter_cpu_us_per_traced_request"], "net_us": r["exporter_net_cpu_us_per_traced_request"],
                "live_us": judged, "live_us_by_round": by_round, "noise_us_by_round": bounds, "within_noise": noise,
                "ingest_us": r.get("exporter_ingest_cpu_us_per_traced_request"),
                "met": None if judged is None or noise else judged <= limit}
    return out


# --- the run -------------------------------------------------------------------------------------

def check_requests(requests: int) -> int:
    if requests < 1:
        raise UsageError(f"--requests must be >= 1, got {requests}")
    return requests


def check_rounds(rounds: int) -> int:
    if rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {rounds}")
    return rounds


def round_order(modes: Sequence[Mode], rounds: int) -> list[tuple[int, Mode]]:
    """(round, mode) in ABBA order: every other round runs the modes backwards, so a machine that drifts
    steadily during the run (a neighbour's load, clock speed) weighs on every mode alike."""
    return [(r, m) for r in range(rounds) for m in (modes if r % 2 == 0 else list(reversed(modes)))]


def run(modes: Sequence[str] = DEFAULT_MODES, requests: int | None = None, quick: bool = False,
        client: str = "auto", concurrency: int = CONCURRENCY, progress: Progress = lambda _: None,
        workdir: Path | None = None, rounds: int = ROUNDS, idle_s: float = IDLE_S) -> dict[str, Any]:
    """Every mode in *rounds* rounds (ABBA order) of requests / rounds each; the JSON result. A mode
    whose Triton crashes is reported failed and not run again. *idle_s*: how long the exporter is left
    alone after each round to measure its idle cost."""
    parsed = parse_modes(modes)
    n = check_requests(requests if requests is not None else QUICK_REQUESTS if quick else DEFAULT_REQUESTS)
    check_rounds(rounds)
    chosen, fallback = choose_client(client, MODEL_SPEC, concurrency)
    if fallback and client == "auto":
        progress(f"perf_analyzer unavailable ({fallback}); using the load generator")
    started = time.monotonic()
    runs: dict[str, list[ModeRun]] = {m.name: [] for m in parsed}
    failures: dict[str, list[ModeFailure]] = {m.name: [] for m in parsed}
    with tempfile.TemporaryDirectory(prefix="tidescale-bench-overhead-") as tmp:
        root = workdir or Path(tmp)
        repo = write_model_repository(root / "repo", [MODEL_SPEC])
        for i, (r, mode) in enumerate(round_order(parsed, rounds)):
            share = n // rounds + (1 if r < n % rounds else 0)
            for attempt in range(ATTEMPTS):
                ran = measure(mode, chosen, share, repo, root / f"{i:02d}-{attempt}-{mode.name}", progress, idle_s)
                if isinstance(ran, ModeRun):
                    runs[mode.name].append(ran)
                    cpu = _per_request(ran.after.triton_cpu_s - ran.before.triton_cpu_s,
                                       ran.after.triton.requests - ran.before.triton.requests)
                    progress(f"{mode.name}, round {r + 1}/{rounds}: {cpu} µs Triton CPU per request")
                    break
                failures[mode.name].append(ran)
    results = [with_crashes(mode_result(m, runs[m.name]), failures[m.name]) for m in parsed]
    against_none(results)
    return {
        "benchmark": "overhead", "client": chosen.name, "client_settings": chosen.settings(),
        "triton_version": next((r["triton_version"] for r in results if r["triton_version"]), ""),
        "client_fallback_reason": fallback, "requests_per_mode": n, "rounds": rounds,
        "warmup_requests": WARMUP_REQUESTS,
        "model": {"name": MODEL, "backend": "python", "max_batch_size": MODEL_SPEC.max_batch_size,
                  "preferred_batch_sizes": list(MODEL_SPEC.preferred_batch_sizes),
                  "max_queue_delay_us": MODEL_SPEC.max_queue_delay_us,
                  "exec_ms_batch_1": round(MODEL_SPEC.curve.exec_seconds(1) * 1e3, 3)},
        "trace_file_log_frequency": TRACE_FILE_FREQUENCY, "settle_s": SETTLE_S, "cpu_count": os.cpu_count(),
        "modes": results, "goals": goals(results), "goal_thresholds": GOALS,
        "wall_s": round(time.monotonic() - started, 1),
    }
