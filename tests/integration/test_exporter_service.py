"""The exporter as a real process: OTLP from real Triton replicas (JSON) and opentelemetry-sdk
(protobuf), scraped by a real Prometheus; auth and bad input against the live server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.paths import FIXTURES
from tests.waiting import wait_for
from tidescale.contracts.promql import selector
from tidescale.devstack.exporter import spawn_exporter
from tidescale.devstack.fleet.fleet import TritonFleet
from tidescale.devstack.fleet.loadgen import LoadGenerator
from tidescale.devstack.fleet.running import running_fleet
from tidescale.devstack.fleet.triton import TraceSettings
from tidescale.devstack.promstack import PrometheusServer, ScrapeTarget
from tidescale.sim.traffic import scenario

pytestmark = pytest.mark.integration
TOKEN = "integration-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
STAGES = {"request", "queue", "compute_input", "compute_infer", "compute_output"}
HIST = "tidescale_request_duration_seconds"


@contextmanager
def running_exporter(workdir: Path, **env: str) -> Iterator[str]:
    proc, url = spawn_exporter(workdir, token=TOKEN, env={"TIDESCALE_EXPORTER_JOIN_TTL_S": "5", **env})
    try:
        yield url
    finally:
        proc.stop()


# Spans from a process the pod watch does not know, with no k8s resource attributes.
NO_SENDER = {"namespace": "", "pod": "", "deployment": ""}


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample *name* with exactly *labels* in an exposition (label order is free)."""
    return next((s.value for fam in text_string_to_metric_families(text) for s in fam.samples
                 if s.name == name and s.labels == labels), None)


@pytest.fixture(scope="module")
def exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_exporter(tmp_path_factory.mktemp("exporter")) as url:
        yield url


@pytest.fixture(scope="module")
def prometheus(exporter: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    target = ScrapeTarget("tidescale-exporter", exporter.removeprefix("http://"), {"namespace": "tidescale"})
    with PrometheusServer(tmp_path_factory.mktemp("prom"), [target]) as prom:
        prom.wait_for_targets_up(1)
        yield prom


@pytest.fixture(scope="module")
def fleet(exporter: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonFleet]:
    """Two real Triton 2.51 replicas posting OTLP/HTTP JSON to the exporter, with the bearer token in
    each replica's own environment, where opentelemetry-cpp reads it (OTEL_EXPORTER_OTLP_TRACES_HEADERS):
    the exporter refuses spans without it, so every counted span shows it arrived."""
    trace = TraceSettings(mode="opentelemetry", rate=1, url=f"{exporter}/v1/traces",
                          headers=f"Authorization=Bearer {TOKEN}")
    with running_fleet(tmp_path_factory.mktemp("fleet"), replicas=2, trace=trace) as running:
        yield running


def test_real_triton_spans_become_aggregatable_latency(fleet: TritonFleet, prometheus: PrometheusServer) -> None:
    load = LoadGenerator(scenario("steady", 40.0, 2.0), fleet.ready_urls, ["resnet50", "ctr_ranker"], seed=5)
    load.start()
    assert load.wait(60)
    ok = [r for r in load.records() if r.ok and r.model == "resnet50"]
    assert len(ok) >= 20
    count = selector(f"{HIST}_count", model="resnet50", stage="request")

    def all_counted() -> bool:
        got = prometheus.query_value(f"sum({count})")
        return got is not None and got >= len(ok)

    wait_for(all_counted, 45, f"every traced request counted in {count}")
    stages = {r["metric"]["stage"] for r in prometheus.query(
        f"sum by (stage) ({selector(HIST + '_count', model='resnet50')})")}
    assert stages == STAGES
    assert prometheus.query_value(f"sum({count})") == len(ok)  # rate=1: every request traced exactly once
    p50 = prometheus.query_value(
        f"histogram_quantile(0.5, sum by (le) ({selector(HIST + '_bucket', model='resnet50', stage='request')}))")
    client_p50 = float(np.median([r.latency_s for r in ok]))
    assert p50 is not None and 0 < p50 <= client_p50 * 1.25  # server time ≤ client time (+ bucket width)
    # The mean needs no bucket width: the server's time per request is at most the client's.
    total = selector(HIST + "_sum", model="resnet50", stage="request")
    mean = prometheus.query_value(f"sum({total}) / sum({count})")
    assert mean is not None and 0 < mean <= float(np.mean([r.latency_s for r in ok])) * 1.01


def test_opentelemetry_sdk_protobuf_spans_are_joined(exporter: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{exporter}/v1/traces",
                                                                     headers=AUTH)))
    tracer = provider.get_tracer("triton-server")
    t0 = time.time_ns()
    for i in range(5):
        start = t0 + i * 10_000_000
        with tracer.start_as_current_span("InferRequest", start_time=start):
            model = tracer.start_span("sdkmodel", start_time=start, attributes={
                "triton.model_name": "sdkmodel", "triton.model_version": 4})
            model.add_event("REQUEST_START", timestamp=start)
            model.add_event("QUEUE_START", timestamp=start + 100_000)
            # Ended at its own stamps: `start` runs ahead of the wall clock, and a span that ends
            # before it starts is rejected (end_before_start).
            c = tracer.start_span("compute", context=_ctx(model), start_time=start + 2_000_000)
            for name, offset in (("COMPUTE_START", 2_000_000), ("COMPUTE_INPUT_END", 2_100_000),
                                 ("COMPUTE_OUTPUT_START", 6_100_000), ("COMPUTE_END", 6_200_000)):
                c.add_event(name, timestamp=start + offset)
            c.end(end_time=start + 6_200_000)
            model.add_event("REQUEST_END", timestamp=start + 6_300_000)
            model.end(end_time=start + 6_300_000)
    provider.shutdown()
    text = httpx.get(f"{exporter}/metrics").text
    for stage in STAGES:
        found = sample(text, f"{HIST}_count", model="sdkmodel", **NO_SENDER, stage=stage, version="4")
        assert found == 5.0, stage
    assert sample(text, f"{HIST}_sum", model="sdkmodel", **NO_SENDER, stage="compute_infer",
                  version="4") == pytest.approx(0.02)


def _ctx(span):  # type: ignore[no-untyped-def]
    from opentelemetry import trace

    return trace.set_span_in_context(span)


def test_live_server_refuses_anonymous_and_bad_uploads(exporter: str) -> None:
    body = (FIXTURES / "triton" / "real-2.51" / "otlp" / "00001.json").read_bytes()
    json_type = {"content-type": "application/json"}
    assert httpx.post(f"{exporter}/v1/traces", content=body, headers=json_type).status_code == 401
    assert httpx.post(f"{exporter}/v1/profiles?model=m&version=1", content=b"x").status_code == 401
    bad = httpx.post(f"{exporter}/v1/traces", content=b'{"resourceSpans": {}}', headers={**json_type, **AUTH})
    assert bad.status_code == 400 and "resourceSpans" in bad.json()["detail"]
    huge = httpx.post(f"{exporter}/v1/traces", content=b"0" * (9 << 20), headers={**json_type, **AUTH})
    assert huge.status_code == 413
    assert httpx.get(f"{exporter}/healthz").status_code == 200


def test_fixture_bodies_over_http(exporter: str) -> None:
    for path in sorted((FIXTURES / "triton" / "real-2.51" / "otlp").glob("*.json")):
        r = httpx.post(f"{exporter}/v1/traces", content=path.read_bytes(),
                       headers={"content-type": "application/json", **AUTH})
        assert r.status_code == 200
    text = httpx.get(f"{exporter}/metrics").text
    assert sample(text, f"{HIST}_count", model="batcher", **NO_SENDER, stage="queue", version="1") == 32.0



def dropped(url: str, reason: str) -> float:
    prefix = f'tidescale_exporter_spans_dropped_total{{reason="{reason}"}} '
    return next((float(line.removeprefix(prefix)) for line in httpx.get(f"{url}/metrics").text.splitlines()
                 if line.startswith(prefix)), 0.0)


def test_exporter_traces_its_own_work_over_otlp(exporter: str, tmp_path: Path) -> None:
    """A second exporter with OTEL_EXPORTER_OTLP_ENDPOINT sends its own spans to the first one,
    which counts them as spans that are not Triton's."""
    before = dropped(exporter, "not_triton")
    with running_exporter(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=exporter, OTEL_BSP_SCHEDULE_DELAY="100",
                          OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer {TOKEN}") as second:
        body = (FIXTURES / "triton" / "real-2.51" / "otlp" / "00001.json").read_bytes()
        r = httpx.post(f"{second}/v1/traces", content=body, headers={"content-type": "application/json", **AUTH})
        assert r.status_code == 200
        wait_for(lambda: dropped(exporter, "not_triton") > before, 20, "the span dropped as not_triton")


def test_triton_trace_file_is_tailed(tmp_path: Path) -> None:
    """mode=triton: a real replica writes the file (completed when it stops), the exporter tails it."""
    trace_file = tmp_path / "triton-trace.json"
    with running_exporter(tmp_path, TIDESCALE_EXPORTER_TRACE_FILES=f'["{trace_file}"]') as url:
        trace = TraceSettings(mode="triton", rate=1, file=trace_file)
        with running_fleet(tmp_path / "fleet", replicas=1, trace=trace) as one:
            load = LoadGenerator(scenario("steady", 20.0, 1.0), one.ready_urls, ["ctr_ranker"], seed=2).start()
            assert load.wait(60)
            sent = sum(1 for r in load.records() if r.ok)
        assert sent >= 10
        labels = {"model": "ctr_ranker", **NO_SENDER, "stage": "compute_infer", "version": "1"}
        wait_for(lambda: sample(httpx.get(f"{url}/metrics").text, f"{HIST}_count", **labels) == sent, 20,
                 f"{HIST}_count{labels} == {sent}")
        ingest = sample(httpx.get(f"{url}/metrics").text, "tidescale_exporter_ingest_cpu_seconds_total",
                        source="trace_file")
        assert ingest is not None and ingest > 0  # the tailer's thread counted its own CPU


def test_triton_s_trace_rotations_are_read_then_pruned(tmp_path: Path) -> None:
    """log-frequency=N: a real replica writes `file.0`, `file.1`, … and never deletes one; with
    trace_file_keep_rotations the exporter reads each one whole, then keeps only the newest two."""
    trace_file = tmp_path / "triton-trace.json"
    with running_exporter(tmp_path, TIDESCALE_EXPORTER_TRACE_FILES=f'["{trace_file}"]',
                          TIDESCALE_EXPORTER_TRACE_FILE_KEEP_ROTATIONS="2") as url:
        trace = TraceSettings(mode="triton", rate=1, file=trace_file, log_frequency=4)
        with running_fleet(tmp_path / "fleet", replicas=1, trace=trace) as one:
            load = LoadGenerator(scenario("steady", 30.0, 1.0), one.ready_urls, ["ctr_ranker"], seed=3).start()
            assert load.wait(60)
            sent = sum(1 for r in load.records() if r.ok)
        assert sent >= 20  # five rotations or more
        labels = {"model": "ctr_ranker", **NO_SENDER, "stage": "compute_infer", "version": "1"}
        wait_for(lambda: sample(httpx.get(f"{url}/metrics").text, f"{HIST}_count", **labels) == sent, 20,
                 f"{HIST}_count{labels} == {sent}")
        rotations = lambda: sorted(p.name for p in tmp_path.glob("triton-trace.json.*"))  # noqa: E731
        wait_for(lambda: len(rotations()) == 2, 10, "the exporter to prune all but the newest two rotations")


def test_a_pods_trace_directory_is_attributed_to_that_pod_and_pruned(tmp_path: Path) -> None:
    """The chart's exporter.traceFiles: a real replica writes `<dir>/<namespace>_<pod>/trace.json.N`
    (the kubelet's subPathExpr directory); the exporter reads it as that pod's, once it knows the pod
    (here from a labelled targets file, in a cluster from its pod watch), and prunes read rotations."""
    traces, targets = tmp_path / "traces", tmp_path / "targets.json"
    pod_dir = traces / "serving_triton-0"
    pod_dir.mkdir(parents=True)
    targets.write_text("[]")
    with running_exporter(tmp_path, TIDESCALE_EXPORTER_TRACE_DIR=str(traces),
                          TIDESCALE_EXPORTER_TARGETS_FILE=str(targets),
                          TIDESCALE_EXPORTER_TRACE_FILE_KEEP_ROTATIONS="2") as url:
        trace = TraceSettings(mode="triton", rate=1, file=pod_dir / "trace.json", log_frequency=4)
        with running_fleet(tmp_path / "fleet", replicas=1, trace=trace) as one:
            [address] = [u.removeprefix("http://") for u in one.ready_urls()]
            targets.write_text(json.dumps([{"targets": [address], "labels": {"namespace": "serving",
                                                                             "pod": "triton-0"}}]))
            load = LoadGenerator(scenario("steady", 30.0, 1.0), one.ready_urls, ["ctr_ranker"], seed=3).start()
            assert load.wait(60)
            sent = sum(1 for r in load.records() if r.ok)
        assert sent >= 20  # five rotations or more
        labels = {"model": "ctr_ranker", "namespace": "serving", "pod": "triton-0", "deployment": "",
                  "stage": "compute_infer", "version": "1"}
        wait_for(lambda: sample(httpx.get(f"{url}/metrics").text, f"{HIST}_count", **labels) == sent, 20,
                 f"{HIST}_count{labels} == {sent}")
        wait_for(lambda: len(list(pod_dir.glob("trace.json.*"))) == 2, 10,
                 "the exporter to prune all but the newest two rotations")


def test_static_triton_targets_are_polled(fleet: TritonFleet, tmp_path: Path) -> None:
    urls = fleet.ready_urls()
    with running_exporter(tmp_path, TIDESCALE_EXPORTER_TRITON_URLS=json.dumps(urls),
                          TIDESCALE_EXPORTER_POLL_INTERVAL_S="0.5") as url:
        def polled_all() -> bool:
            text = httpx.get(f"{url}/metrics").text
            return "tidescale_exporter_targets 2.0" in text and all(
                f'tidescale_exporter_poll_duration_seconds_count{{target="{u}"}}' in text for u in urls)

        wait_for(polled_all, 30, "every target polled")
