"""The recommender against a hostile Prometheus (tests/hostile.py): every answer is either samples or
PrometheusUnavailable (the fail-safe holds), and `autoscale recommend --once` reports it, never a traceback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import yaml

from tests.hostile import JSON_DOCUMENTS, NUMBERS, TIMESTAMPS, deep_json
from tidescale.cli import main
from tidescale.contracts.prometheus import PrometheusClient, PrometheusUnavailable
from tidescale.devstack.ports import free_port


def client_answering(content: bytes, status: int = 200) -> PrometheusClient:
    transport = httpx.MockTransport(lambda _r: httpx.Response(status, content=content))
    return PrometheusClient("http://prom", transport=transport)


def embedded(where: str, document: bytes) -> bytes:
    """*document* as the result, or the error text, of an otherwise well-formed answer."""
    if where == "result":
        return b'{"status":"success","data":{"resultType":"vector","result":' + document + b"}}"
    return b'{"status":"error","errorType":"bad_data","error":' + document + b"}"


def assert_samples_or_unavailable(client: PrometheusClient) -> None:
    try:
        rows = client.instant("up")
    except PrometheusUnavailable as exc:
        assert len(str(exc)) < 500
        return
    assert all(isinstance(t, float) and isinstance(v, float) for t, v in rows)


@pytest.mark.parametrize("where", ["whole", "result", "error"])
@pytest.mark.parametrize(("name", "document"), JSON_DOCUMENTS, ids=[n for n, _ in JSON_DOCUMENTS])
def test_hostile_json_answers_mean_prometheus_is_unavailable(name: str, document: bytes, where: str) -> None:
    body = document if where == "whole" else embedded(where, document)
    assert_samples_or_unavailable(client_answering(body, 200 if where != "error" else 400))


@pytest.mark.parametrize(("name", "number"), NUMBERS + TIMESTAMPS, ids=[n for n, _ in NUMBERS + TIMESTAMPS])
def test_hostile_numbers_in_samples(name: str, number: object) -> None:
    for sample in ([number, "1"], [1.0, number], [1.0, json.dumps(number)]):
        result = [{"metric": {}, "value": sample}]
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
        assert_samples_or_unavailable(client_answering(body))


def test_a_deeply_nested_answer_is_named() -> None:
    with pytest.raises(PrometheusUnavailable, match="nested too deeply"):
        client_answering(deep_json()).instant("up")


class DeepJsonProm(BaseHTTPRequestHandler):
    """A Prometheus that answers every query with a deeply nested JSON document."""

    def do_GET(self) -> None:
        body = deep_json()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture()
def deep_prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), DeepJsonProm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_recommend_once_against_a_deep_json_prometheus_reports_the_failsafe(
    tmp_path: Path, deep_prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"recommender": {"targets": [
        {"deployment": "triton", "namespace": "ml", "model": "resnet", "capacity_rps": 100.0}]}}))
    try:
        main(["autoscale", "recommend", "--once", "--config", str(cfg), "--prometheus-url", deep_prometheus])
    except SystemExit as exc:
        assert exc.code in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["ml/triton"]["failsafe"] == "prometheus_down"
    assert "nested too deeply" in out["ml/triton"]["detail"]


def test_a_password_in_the_prometheus_url_reaches_no_log_line_and_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 43 #7: the recommender's warnings, `--once` and `--print-config` named the URL as given."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"recommender": {"targets": [
        {"deployment": "triton", "namespace": "ml", "model": "resnet", "capacity_rps": 100.0}]}}))
    url = f"http://tidescale:s3cret@127.0.0.1:{free_port()}/prometheus"
    for extra in (["--once"], ["--print-config"]):
        try:
            main(["autoscale", "recommend", *extra, "--config", str(cfg), "--prometheus-url", url])
        except SystemExit as exc:
            assert exc.code in (0, None)
        out = capsys.readouterr().out
        assert "***@127.0.0.1" in out and "s3cret" not in out
    assert "holds" in caplog.text and "s3cret" not in caplog.text
