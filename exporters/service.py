"""The exporter service: one FastAPI app with its own prometheus-client registry.

Routes: `/metrics`, `/healthz`, `/readyz`, `POST /v1/traces` (OTLP/HTTP protobuf or JSON),
`POST /v1/profiles?model=M&version=V`, `GET /v1/profiles/{model}/{version}`. Write endpoints
need `Authorization: Bearer <TIDESCALE_EXPORTER_TOKEN>`; with no token configured they refuse
everything (secure by default). Background work (trace-file tailing, join-buffer expiry, target
discovery, stats polling) runs as asyncio tasks owned by the app's lifespan, each under a
`TaskSupervisor` (restarted with back-off; /healthz fails when one cannot recover, or when the
stats poll or the trace-file loop has not finished a round for `stall_after_s`: a heartbeat).
`/metrics` is rendered in a worker thread (concurrent scrapes share one render), and each OTLP body
is decompressed, decoded and joined in the ingest thread (one at a time: the join buffer is not
shared between threads), so the event loop keeps answering /healthz during a scrape and during an
8 MiB body (which held it 1.3 s when decoded on it, 7.1 s for 8 at once, past the probe's 3 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from tidescale.contracts.heartbeat import Heartbeat, stall_after, stalled
from tidescale.contracts.http import bearer_matches, configured_token, install_error_boundary, read_capped
from tidescale.exporters.buckets import log_buckets
from tidescale.exporters.errors import BadInput
from tidescale.exporters.latency import LatencyAggregator
from tidescale.exporters.otlp import (
    PROTOBUF_TYPES,
    Span,
    SpanJoiner,
    attribute_to,
    decode_traces,
    decompress,
    gc_paused,
)
from tidescale.exporters.profiles.store import MAX_NAME_CHARS, ProfileStore
from tidescale.exporters.sample_rate import SampleRateDetector
from tidescale.exporters.selfmetrics import SelfMetrics, configure_logging, self_tracer
from tidescale.exporters.settings import ExporterSettings
from tidescale.exporters.stages import Sender, StageSample
from tidescale.exporters.stats_poller import StatsPoller
from tidescale.exporters.supervisor import TaskSupervisor, job_name
from tidescale.exporters.targets import TargetSet
from tidescale.exporters.tracedir import PodTraceDirectory
from tidescale.exporters.tracefile import TraceFileTailer

log = logging.getLogger("tidescale.exporter")
TAIL_INTERVAL_S = 1.0
PROFILE_RETRY_AFTER_S = 10  # what a refused profile upload is told to wait (an upload takes seconds)


class SampleSource(Protocol):
    """What the tail loop polls every second for the samples read since: a trace file, or the
    directory of every pod's trace files."""

    def poll(self) -> list[StageSample]: ...


@dataclass
class ExporterState:
    """What the routes and background tasks share; built once per app.

    `registry` holds every collector except the latency families, which `LatencyAggregator.exposition`
    writes as text directly (`render_metrics` joins the two): register new collectors on `registry`.
    """

    settings: ExporterSettings
    registry: CollectorRegistry
    selfmetrics: SelfMetrics
    latency: LatencyAggregator
    joiner: SpanJoiner
    tailers: list[SampleSource]
    profiles: ProfileStore
    supervisor: TaskSupervisor
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    stoppers: list[Callable[[], None]] = field(default_factory=list)  # for work running in threads
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    started: bool = False
    targets: TargetSet | None = None  # the discovered Triton pods, also used to attribute spans
    profile_uploads: int = 0  # in progress: each holds up to max_profile_bytes of the tmp volume
    # Whoever changes the join buffer (OTLP ingest, expiry) does it in a worker thread holding this.
    ingest_limiter: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(1))
    heartbeats: list[Heartbeat] = field(default_factory=list)  # the loops /healthz watches


def build_state(settings: ExporterSettings) -> ExporterState:
    registry = CollectorRegistry(auto_describe=False)
    selfmetrics = SelfMetrics()
    bounds = log_buckets(settings.bucket_min_s, settings.bucket_max_s, settings.boundary_thresholds_s(),
                         settings.max_buckets)
    rates = SampleRateDetector(configured=settings.trace_sample_rate)
    latency = LatencyAggregator(bounds, max_series=settings.max_series, sample_rate=settings.trace_sample_rate,
                                selfmetrics=selfmetrics, rates=rates)
    joiner = SpanJoiner(settings.join_max_pending, settings.join_ttl_s, on_drop=selfmetrics.drop_spans,
                        max_bytes=settings.join_max_bytes)
    tailers: list[SampleSource] = [
        TraceFileTailer(p, settings.join_max_pending, on_drop=selfmetrics.drop_spans,
                        keep_rotations=settings.trace_file_keep_rotations)
        for p in settings.trace_files]
    supervisor = TaskSupervisor(backoff_s=settings.task_backoff_s, restart_limit=settings.task_restart_limit)
    state = ExporterState(settings, registry, selfmetrics, latency, joiner, tailers,
                          ProfileStore(max_bytes=settings.max_profile_bytes, self_metrics=selfmetrics,
                                       namespace=settings.kube_namespace), supervisor)
    for collector in (selfmetrics, joiner, supervisor, state.profiles, rates):
        registry.register(collector)

    tail_heartbeat = Heartbeat("trace-file loop", stall_after(settings.stall_after_s, TAIL_INTERVAL_S))
    state.heartbeats.append(tail_heartbeat)

    async def tail_and_expire() -> None:
        await _tail_and_expire(state, tail_heartbeat)

    state.background.append(tail_and_expire)
    _add_discovery_and_polling(state)
    if settings.trace_dir is not None and state.targets is not None:
        directory = PodTraceDirectory(
            settings.trace_dir, state.targets.pod_sender, file_name=settings.trace_file_name,
            max_pending=settings.join_max_pending, on_drop=selfmetrics.drop_spans,
            keep_rotations=settings.trace_file_keep_rotations, idle_s=settings.trace_dir_idle_s,
            gone=state.targets.pod_gone)
        state.tailers.append(directory)
        state.stoppers.append(directory.close)
        registry.register(directory)
    return state


def render_metrics(state: ExporterState) -> bytes:
    """The whole exposition as one bytes object (benchmarks and tools; the route sends chunks)."""
    return b"".join(render_chunks(state))


def render_chunks(state: ExporterState) -> list[bytes]:
    """The exposition in chunks of a few MB (blocking: the route runs it in a worker thread)."""
    return [generate_latest(state.registry), *state.latency.exposition_chunks()]


class SharedRender:
    """Scrapes that arrive while a render is running wait for that render instead of starting another
    (ten concurrent scrapes cost one render, and never more than one worker thread)."""

    def __init__(self, render: Callable[[], list[bytes]]) -> None:
        self._render = render
        self._inflight: asyncio.Future[list[bytes]] | None = None

    async def __call__(self) -> list[bytes]:
        if self._inflight is None:
            future = asyncio.ensure_future(asyncio.to_thread(self._render))
            future.add_done_callback(self._finished)
            self._inflight = future
        return await asyncio.shield(self._inflight)

    def _finished(self, future: asyncio.Future[list[bytes]]) -> None:
        if self._inflight is future:
            self._inflight = None


def _chunked_response(chunks: list[bytes]) -> StreamingResponse:
    """*chunks* sent one by one (the loop turns between writes) with their total length declared."""
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return StreamingResponse(body(), media_type=CONTENT_TYPE_LATEST,
                             headers={"content-length": str(sum(len(c) for c in chunks))})


def _add_discovery_and_polling(state: ExporterState) -> None:
    """Target discovery (a kube watch) and the stats poller, when there is anything to poll."""
    settings = state.settings
    if not settings.triton_urls and settings.kube_selector is None and settings.targets_file is None:
        return
    targets = TargetSet(settings.triton_urls, settings.kube_namespace, settings.kube_selector,
                        port=settings.kube_http_port, targets_file=settings.targets_file,
                        kube_node=settings.kube_node_name)
    state.targets = targets
    rates = state.latency.rates
    heartbeat = Heartbeat("stats poll", stall_after(settings.stall_after_s, settings.poll_interval_s))
    state.heartbeats.append(heartbeat)
    poller = StatsPoller(targets, interval_s=settings.poll_interval_s, self_metrics=state.selfmetrics,
                         on_requests=rates.requests if rates is not None else None, heartbeat=heartbeat)
    state.registry.register(poller)
    state.background += [targets.run, poller.run]
    state.stoppers += [targets.stop, poller.stop]


@contextlib.contextmanager
def ingest_cpu(selfmetrics: SelfMetrics, source: str) -> Iterator[None]:
    """Count this thread's CPU time in the block as ingest work from *source* (the block must not
    await: another task's CPU would be counted too)."""
    start = time.thread_time()
    try:
        yield
    finally:
        selfmetrics.add_ingest_cpu(source, time.thread_time() - start)


def _poll_tailer(tailer: SampleSource, selfmetrics: SelfMetrics) -> list[StageSample]:
    with ingest_cpu(selfmetrics, "trace_file"):
        return tailer.poll()


async def _tail_and_expire(state: ExporterState, heartbeat: Heartbeat) -> None:
    while True:
        for tailer in state.tailers:
            samples = await asyncio.to_thread(_poll_tailer, tailer, state.selfmetrics)
            with ingest_cpu(state.selfmetrics, "trace_file"):
                state.latency.observe_all(samples)
        await anyio.to_thread.run_sync(state.joiner.flush_expired, limiter=state.ingest_limiter)
        heartbeat.beat()
        await asyncio.sleep(TAIL_INTERVAL_S)


# --- request helpers -------------------------------------------------------------------------------

def _authorised(request: Request, token: bytes | None) -> bool:
    return bearer_matches(request.headers.get("authorization", ""), token)


def _unauthorised(settings: ExporterSettings) -> JSONResponse:
    detail = ("write endpoints are disabled: set TIDESCALE_EXPORTER_TOKEN" if settings.token is None
              else "missing or wrong bearer token (Authorization: Bearer <token>)")
    return JSONResponse({"detail": detail}, status_code=401, headers={"WWW-Authenticate": "Bearer"})


def ingest_body(state: ExporterState, raw: bytes, content_type: str | None, encoding: str | None,
                sender: Sender | None) -> tuple[int, int, str]:
    """Decompress, decode, join and measure one OTLP body: (spans, spans rejected, the partial-success
    message). Blocking, seconds for the largest bodies: the route runs it in the ingest thread."""
    # No cyclic GC from decode to histograms: otherwise each young collection walks the body's
    # thousands of live spans again, ~10 % of the live path.
    with gc_paused(), ingest_cpu(state.selfmetrics, "otlp"):
        try:
            body = decompress(raw, encoding, state.settings.max_body_bytes)
            spans = decode_traces(body, content_type)
        except BadInput as exc:
            state.selfmetrics.drop_spans("malformed_body")
            log.warning("rejected OTLP body", extra={"fields": {"status": exc.status_code,
                                                                 "reason": exc.message[:200]}})
            raise
        if sender is not None:
            attribute_to(spans, *sender)
        rejected, message = ingest(state, spans)
    return len(spans), rejected, message


def ingest(state: ExporterState, spans: list[Span]) -> tuple[int, str]:
    """Join, measure and count *spans*: (spans rejected, the partial-success message).

    A span is rejected when it is unusable (reasons counted in spans_dropped_total) or when a
    sample it completed was refused by the series cap (counted in series_dropped_total).
    """
    reasons: Counter[str] = Counter()
    origins: list[int] = []
    samples, accepted = state.joiner.add(spans, reasons, origins)
    refused_spans = _refused_spans(state.latency, samples, origins)
    state.selfmetrics.accept_spans(accepted)
    parts = []
    if reasons:
        detail = ", ".join(f"{n} {reason}" for reason, n in reasons.most_common())
        parts.append(f"{sum(reasons.values())} span(s) were not usable Triton spans ({detail})")
    if refused_spans:
        parts.append(f"{refused_spans} span(s) over the series cap (max_series={state.latency.cap.max_series})")
    return sum(reasons.values()) + refused_spans, "; ".join(parts)


def _refused_spans(latency: LatencyAggregator, samples: list[StageSample], origins: list[int]) -> int:
    """Observe every sample; how many distinct spans had a sample refused by the series cap."""
    refused = {origins[i] for i, ok in enumerate(latency.observe_batch(samples)) if not ok}
    return len(refused)


def _otlp_response(content_type: str | None, rejected: int, message: str) -> Response:
    body = ExportTraceServiceResponse()
    if rejected:
        body.partial_success.rejected_spans = rejected
        body.partial_success.error_message = message
    if (content_type or "").split(";")[0].strip().lower() in PROTOBUF_TYPES:
        return Response(body.SerializeToString(), media_type="application/x-protobuf")
    payload: dict[str, Any] = {}
    if rejected:
        payload = {"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}}
    return JSONResponse(payload)


def _sender(state: ExporterState, request: Request) -> Sender | None:
    """(namespace, pod, deployment) of a Triton pod that sent traces straight to us, by its address."""
    if state.targets is None or request.client is None:
        return None
    return state.targets.sender(request.client.host)


def _name_param(value: str | None, what: str) -> str:
    """A required query parameter (the profile store validates its content)."""
    if not value:
        raise BadInput(400, f"query parameter {what!r} is required")
    return value


# --- the app -----------------------------------------------------------------------------------

def create_app(settings: ExporterSettings) -> FastAPI:
    """The exporter app; background tasks start with the app's lifespan."""
    configure_logging(settings.log_format)
    state = build_state(settings)
    token = configured_token(settings.token)
    tracer = self_tracer()
    scrape = SharedRender(lambda: render_chunks(state))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.tasks = [asyncio.create_task(state.supervisor.supervise(job_name(job), job), name=job_name(job))
                       for job in state.background]
        state.started = True
        log.info("exporter started", extra={"fields": {"trace_files": len(state.tailers),
                                                        "tasks": len(state.tasks)}})
        try:
            yield
        finally:
            for stop in state.stoppers:
                stop()
            for task in state.tasks:
                task.cancel()
            await asyncio.gather(*state.tasks, return_exceptions=True)

    app = FastAPI(title="tidescale exporter", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.exporter = state
    state.registry.register(install_error_boundary(app, "exporter", log))

    @app.exception_handler(BadInput)
    async def bad_input(_: Request, exc: BadInput) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status_code)

    @app.get("/metrics")
    async def metrics() -> StreamingResponse:
        return _chunked_response(await scrape())

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        lost = state.supervisor.given_up()
        if lost:
            return JSONResponse({"status": "failing", "detail": f"background task(s) {', '.join(lost)} failed "
                                 f"{settings.task_restart_limit + 1} times in a row"}, status_code=503)
        stuck = stalled(state.heartbeats) if state.started else []
        if stuck:
            return JSONResponse({"status": "failing", "detail": f"stalled: {', '.join(stuck)}"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        down = state.supervisor.down()
        if not state.started or down:
            reason = ("starting" if not state.started
                      else f"{len(down)} background task(s) stopped, restarting: {', '.join(down)}")
            return JSONResponse({"status": "not ready", "detail": reason}, status_code=503)
        return JSONResponse({"status": "ready"})

    async def traces(request: Request) -> Response:
        # A Triton pod of the watched fleet, recognised by its address, needs no token: Triton's
        # OTLP exporter cannot send one, and copying a Secret into every serving namespace is worse.
        sender = _sender(state, request)
        if settings.traces_require_token and sender is None and not _authorised(request, token):
            return _unauthorised(settings)
        content_type = request.headers.get("content-type")
        with tracer.start_as_current_span("ingest_traces") as span:
            raw = await read_capped(request, settings.max_body_bytes)
            count, rejected, message = await anyio.to_thread.run_sync(
                ingest_body, state, raw, content_type, request.headers.get("content-encoding"), sender,
                limiter=state.ingest_limiter)
            span.set_attribute("spans", count)
            span.set_attribute("rejected", rejected)
        return _otlp_response(content_type, rejected, message)

    # A plain Starlette route, not a FastAPI one: it takes only the Request, so FastAPI's parameter
    # and dependency machinery would do nothing but cost about 0.1 ms a post (0.6 µs per traced request).
    app.add_route("/v1/traces", traces, methods=["POST"])

    @app.post("/v1/profiles")
    async def upload_profile(request: Request, model: str | None = None, version: str | None = None,
                             filename: str = "") -> JSONResponse:
        from tidescale.exporters.profiles.store import check_label
        from tidescale.exporters.profiles.upload import spooled_upload

        if not _authorised(request, token):
            return _unauthorised(settings)
        model_name = check_label("model", _name_param(model, "model"))
        model_version = check_label("version", _name_param(version, "version"))
        # Counted on the event loop (no await between the check and the increment): each upload in
        # progress may hold max_profile_bytes of the tmp volume, which is sized for this many.
        if state.profile_uploads >= settings.max_profile_uploads:
            return JSONResponse({"detail": f"{state.profile_uploads} profile upload(s) in progress, the most "
                                 "max_profile_uploads allows; retry later"}, status_code=429,
                                headers={"Retry-After": str(PROFILE_RETRY_AFTER_S)})
        state.profile_uploads += 1
        try:
            async with spooled_upload(request.stream(), settings.max_profile_bytes,
                                      request.headers.get("content-length")) as (body, size):
                with tracer.start_as_current_span("ingest_profile") as span:
                    span.set_attribute("bytes", size)
                    report = await asyncio.to_thread(
                        state.profiles.ingest, body, filename=filename[:MAX_NAME_CHARS], size=size,
                        content_type=request.headers.get("content-type", ""), model=model_name,
                        version=model_version)
        finally:
            state.profile_uploads -= 1
        log.info("profile ingested", extra={"fields": {"model": model_name, "version": model_version,
                                                        "bytes": size}})
        return JSONResponse(report.to_json())

    # The version is the last path segment, so model names may hold `/` (`org/team/model`).
    @app.get("/v1/profiles/{model:path}/{version}")
    async def get_profile(model: str, version: str) -> JSONResponse:
        report = state.profiles.report(model, version)
        if report is None:
            return JSONResponse({"detail": f"no profile for model {model!r} version {version!r}"}, 404)
        return JSONResponse(report.to_json())

    @app.delete("/v1/profiles/{model:path}/{version}")
    async def delete_profile(request: Request, model: str, version: str) -> Response:
        if not _authorised(request, token):
            return _unauthorised(settings)
        if not state.profiles.forget(model, version):
            return JSONResponse({"detail": f"no profile for model {model!r} version {version!r}"}, 404)
        log.info("profile deleted", extra={"fields": {"model": model, "version": version}})
        return Response(status_code=204)

    return app


def serve(settings: ExporterSettings) -> None:
    """Run the app with uvicorn until interrupted, within the bounds of the settings (contracts/serving.py)."""
    from tidescale.contracts.serving import serve as serve_app

    started = time.monotonic()
    serve_app(create_app(settings), settings)
    log.info("exporter stopped", extra={"fields": {"uptime_s": round(time.monotonic() - started, 1)}})
