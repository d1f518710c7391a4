"""The exporter app in-process: auth, OTLP ingest to /metrics, limits, hostile names, caps."""

from __future__ import annotations

import gc
import gzip
import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.paths import FIXTURES
from tidescale.exporters import service
from tidescale.exporters.otlp import Span
from tidescale.exporters.service import create_app
from tidescale.exporters.settings import ExporterSettings

TOKEN = "s3cret-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
JSON = {"content-type": "application/json", **AUTH}
BODIES = sorted((FIXTURES / "triton" / "real-2.51" / "otlp").glob("*.json"))


def make_settings(**overrides: object) -> ExporterSettings:
    return ExporterSettings(**{"token": TOKEN, "max_body_bytes": 64 * 1024, **overrides})  # type: ignore[arg-type]


def make_client(**overrides: object) -> TestClient:
    return TestClient(create_app(make_settings(**overrides)))


@pytest.fixture
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


def samples(client: TestClient, name: str) -> list[tuple[dict[str, str], float]]:
    text = client.get("/metrics").text
    return [(s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == name]


def model_span(model: str, trace: int = 1) -> dict[str, object]:
    """A Triton-shaped model span (request stage only) for *model*."""
    return {
        "traceId": f"{trace:032x}", "spanId": f"{trace:016x}", "name": model,
        "attributes": [{"key": "triton.model_name", "value": {"stringValue": model}},
                       {"key": "triton.model_version", "value": {"intValue": "1"}}],
        "events": [{"name": "REQUEST_START", "timeUnixNano": "1000"},
                   {"name": "REQUEST_END", "timeUnixNano": "5001000"}]}


def span_body(spans: list[dict[str, object]]) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()


def test_real_triton_bodies_reach_the_histogram(client: TestClient) -> None:
    for body in BODIES:
        r = client.post("/v1/traces", content=body.read_bytes(), headers=JSON)
        assert r.status_code == 200, r.text
    counts = {labels["stage"]: v for labels, v in samples(client, "tidescale_request_duration_seconds_count")}
    assert counts == {s: 32 for s in ("request", "queue", "compute_input", "compute_infer", "compute_output")}
    buckets = samples(client, "tidescale_request_duration_seconds_bucket")
    assert {labels["le"] for labels, _ in buckets} >= {"0.1", "0.25", "0.5", "1.0", "+Inf"}  # the SLO bounds
    [(_, accepted)] = samples(client, "tidescale_exporter_spans_accepted_total")
    assert accepted == 96
    # what ingesting them cost, counted by the thread that did it (no trace file here)
    [(labels, cpu_s)] = samples(client, "tidescale_exporter_ingest_cpu_seconds_total")
    assert labels == {"source": "otlp"} and 0 < cpu_s < 10


def test_metrics_serve_no_quantile_gauges(client: TestClient) -> None:
    """Quantiles come from the recording rules over the histogram, which adds up across exporter replicas."""
    for body in BODIES:
        assert client.post("/v1/traces", content=body.read_bytes(), headers=JSON).status_code == 200
    families = {fam.name for fam in text_string_to_metric_families(client.get("/metrics").text)}
    assert "tidescale_request_duration_seconds" in families
    assert "tidescale_request_duration_quantile_seconds" not in families


def test_write_endpoints_need_the_token(client: TestClient) -> None:
    body = BODIES[1].read_bytes()
    assert client.post("/v1/traces", content=body, headers={"content-type": "application/json"}).status_code == 401
    wrong = {"content-type": "application/json", "authorization": "Bearer nope"}
    assert client.post("/v1/traces", content=body, headers=wrong).status_code == 401
    assert client.post("/v1/profiles?model=m&version=1", content=b"x").status_code == 401
    assert samples(client, "tidescale_request_duration_seconds_count") == []


def test_without_a_configured_token_writes_are_refused() -> None:
    with make_client(token=None) as c:
        r = c.post("/v1/traces", content=BODIES[1].read_bytes(), headers=JSON)
        assert r.status_code == 401 and "TIDESCALE_EXPORTER_TOKEN" in r.json()["detail"]


def test_token_can_be_waived_for_traces_only() -> None:
    with make_client(traces_require_token=False) as c:
        ok = c.post("/v1/traces", content=BODIES[1].read_bytes(), headers={"content-type": "application/json"})
        assert ok.status_code == 200
        assert c.post("/v1/profiles?model=m&version=1", content=b"x").status_code == 401


def test_bad_bodies_get_4xx_with_a_message(client: TestClient) -> None:
    r = client.post("/v1/traces", content=b"{nope", headers=JSON)
    assert r.status_code == 400 and "JSON" in r.json()["detail"]
    r = client.post("/v1/traces", content=b"{}", headers={**AUTH, "content-type": "text/csv"})
    assert r.status_code == 415
    r = client.post("/v1/traces", content=b"x" * (65 * 1024), headers=JSON)
    assert r.status_code == 413
    bomb = gzip.compress(b" " * (1 << 20))
    r = client.post("/v1/traces", content=bomb, headers={**JSON, "content-encoding": "gzip"})
    assert r.status_code == 413
    dropped = {labels["reason"]: v for labels, v in samples(client, "tidescale_exporter_spans_dropped_total")}
    assert dropped["malformed_body"] == 3  # 413 on the declared length never reaches the decoder
    assert client.get("/healthz").status_code == 200


def test_the_gc_pauses_from_decode_to_histograms_and_resumes_whatever_the_body(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def ingest_watching_gc(state: service.ExporterState, spans: list[Span]) -> tuple[int, str]:
        seen.append(gc.isenabled())
        return real_ingest(state, spans)

    real_ingest = service.ingest
    monkeypatch.setattr(service, "ingest", ingest_watching_gc)
    assert client.post("/v1/traces", content=BODIES[0].read_bytes(), headers=JSON).status_code == 200
    assert seen == [False] and gc.isenabled()
    for bad in (b"{nope", b'{"resourceSpans": 7}', gzip.compress(b" " * (1 << 20))):
        headers = {**JSON, "content-encoding": "gzip"} if bad.startswith(b"\x1f\x8b") else JSON
        assert client.post("/v1/traces", content=bad, headers=headers).status_code in (400, 413)
        assert gc.isenabled()
    assert seen == [False]


def test_gzip_bodies_are_accepted(client: TestClient) -> None:
    r = client.post("/v1/traces", content=gzip.compress(BODIES[1].read_bytes()),
                    headers={**JSON, "content-encoding": "gzip"})
    assert r.status_code == 200
    assert samples(client, "tidescale_request_duration_seconds_count")


def test_hostile_model_names_round_trip_through_the_exposition(client: TestClient) -> None:
    hostile = 'evil"} 1\nfake_metric{a="b'
    assert client.post("/v1/traces", content=span_body([model_span(hostile)]), headers=JSON).status_code == 200
    models = {labels["model"] for labels, _ in samples(client, "tidescale_request_duration_seconds_count")}
    assert models == {hostile.replace("\n", "?")}  # control characters replaced, quotes kept and escaped
    assert samples(client, "fake_metric") == []


def test_ten_thousand_model_names_stay_under_the_series_cap() -> None:
    with make_client(max_series=50, max_body_bytes=8 << 20) as c:
        for start in range(0, 10_000, 2_500):
            spans = [model_span(f"model-{i}", trace=i + 1) for i in range(start, start + 2_500)]
            r = c.post("/v1/traces", content=span_body(spans), headers=JSON)
            assert r.status_code == 200
        series = samples(c, "tidescale_request_duration_seconds_count")
        assert len(series) == 50
        [(labels, dropped)] = samples(c, "tidescale_exporter_series_dropped_total")
        assert labels == {"family": "tidescale_request_duration_seconds"} and dropped == 9_950


def test_protobuf_answer_is_protobuf(client: TestClient) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    from tidescale.benches.otlp_encode import encode_protobuf
    from tidescale.exporters.otlp import decode_json

    body = encode_protobuf(decode_json(BODIES[1].read_bytes()))
    r = client.post("/v1/traces", content=body, headers={**AUTH, "content-type": "application/x-protobuf"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-protobuf"
    assert ExportTraceServiceResponse.FromString(r.content).partial_success.rejected_spans == 0


def test_readyz_after_startup(client: TestClient) -> None:
    assert client.get("/readyz").json() == {"status": "ready"}


def test_profile_upload_then_report(client: TestClient) -> None:
    capture = FIXTURES / "profiles" / "pytorch" / "ranker_pystring.pt.trace.json.gz"
    r = client.post("/v1/profiles?model=ranker&version=2&filename=ranker.pt.trace.json.gz",
                    content=capture.read_bytes(), headers={**AUTH, "content-type": "application/gzip"})
    assert r.status_code == 200, r.text
    got = client.get("/v1/profiles/ranker/2")
    assert got.status_code == 200 and got.json() == r.json()
    [(_, ingested)] = samples(client, "tidescale_exporter_profile_bytes_total")
    assert ingested == capture.stat().st_size
    assert client.get("/v1/profiles/ranker/3").status_code == 404


def test_profile_upload_needs_model_and_a_known_format(client: TestClient) -> None:
    r = client.post("/v1/profiles?version=1", content=b"{}", headers=AUTH)
    assert r.status_code == 400 and "model" in r.json()["detail"]
    r = client.post("/v1/profiles?model=m&version=1&filename=notes.docx", content=b"\x00\x01garbage",
                    headers={**AUTH, "content-type": "application/msword"})
    assert 400 <= r.status_code < 500 and r.json()["detail"]


def test_readyz_fails_when_a_background_task_dies_but_not_when_one_finishes() -> None:
    app = create_app(make_settings())

    async def finishes() -> None:
        return None

    async def dies() -> None:
        raise RuntimeError("boom")

    app.state.exporter.background.append(finishes)
    with TestClient(app) as c:
        assert c.get("/readyz").status_code == 200
    app = create_app(make_settings())
    app.state.exporter.background.append(dies)
    with TestClient(app) as c:
        r = c.get("/readyz")
        assert r.status_code == 503 and "stopped" in r.json()["detail"]


def test_empty_token_means_no_token() -> None:
    with make_client(token="  ") as c:
        r = c.post("/v1/traces", content=b"{}", headers={"content-type": "application/json",
                                                          "authorization": "Bearer   "})
        assert r.status_code == 401 and "TIDESCALE_EXPORTER_TOKEN" in r.json()["detail"]


def test_spans_are_attributed_to_the_pod_that_sent_them() -> None:
    """As k8sattributes does: a Triton pod the watch knows is recognised by its address, and its
    namespace and pod outrank what the resource attributes claim; other senders keep theirs."""
    from types import SimpleNamespace as NS

    from tidescale.exporters.targets import TargetSet

    app = create_app(make_settings())
    targets = TargetSet(kube_namespace="serving", kube_selector="app=triton")
    targets.apply_pod_event("ADDED", NS(
        metadata=NS(name="triton-7d9f-abcde", namespace="serving", deletion_timestamp=None,
                    labels={"pod-template-hash": "7d9f"}, owner_references=[NS(kind="ReplicaSet", name="triton-7d9f")]),
        status=NS(phase="Running", pod_ip="10.244.1.7", conditions=[NS(type="Ready", status="True")])))
    app.state.exporter.targets = targets
    claimed = {"resource": {"attributes": [{"key": "k8s.namespace.name", "value": {"stringValue": "claimed"}},
                                           {"key": "k8s.pod.name", "value": {"stringValue": "claimed-pod"}}]}}
    body = json.dumps({"resourceSpans": [{**claimed, "scopeSpans": [{"spans": [model_span("m")]}]}]}).encode()
    for address in ("10.244.1.7", "10.244.9.9"):  # a known Triton pod, then a collector in between
        client = TestClient(app, client=(address, 40000))
        assert client.post("/v1/traces", content=body, headers=JSON).status_code == 200
    # Only the watched pod may send without the token (Triton's OTLP exporter cannot send one).
    anonymous = {"content-type": "application/json"}
    assert TestClient(app, client=("10.244.1.7", 40000)).post("/v1/traces", content=body,
                                                                headers=anonymous).status_code == 200
    assert TestClient(app, client=("10.244.9.9", 40000)).post("/v1/traces", content=body,
                                                                headers=anonymous).status_code == 401
    counts = {(labels["namespace"], labels["pod"], labels["deployment"]): v
              for labels, v in samples(TestClient(app), "tidescale_request_duration_seconds_count")}
    assert counts == {("serving", "triton-7d9f-abcde", "triton"): 2, ("claimed", "claimed-pod", ""): 1}
