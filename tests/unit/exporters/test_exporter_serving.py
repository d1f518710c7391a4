"""Serving under load and misuse: scrapes off the event loop, quiet disconnects, slow headers."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from tests.unit.exporters.test_service_api import AUTH, BODIES, JSON, make_client, make_settings, model_span, span_body
from tidescale.devstack.ports import free_port
from tidescale.exporters.httpserver import protocol_with_header_timeout
from tidescale.exporters.service import SharedRender, create_app


class BlockingCollector(Collector):
    """Blocks the render until released: a scrape that takes as long as the test wants."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.released_in_time = False

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.entered.set()
        self.released_in_time = self.release.wait(timeout=10)
        yield GaugeMetricFamily("test_blocking", "blocks the scrape", value=1)


def test_healthz_and_ingest_are_served_while_a_scrape_renders() -> None:
    app = create_app(make_settings())
    blocker = BlockingCollector()
    app.state.exporter.registry.register(blocker)
    with TestClient(app) as c:
        scraped: dict[str, Any] = {}
        scraper = threading.Thread(target=lambda: scraped.update(r=c.get("/metrics")))
        scraper.start()
        assert blocker.entered.wait(timeout=10)
        # The render is stuck in its worker thread; the event loop must still answer.
        assert c.get("/healthz").status_code == 200
        assert c.post("/v1/traces", content=BODIES[1].read_bytes(), headers=JSON).status_code == 200
        blocker.release.set()
        scraper.join()
    assert blocker.released_in_time  # False if /healthz had waited for the render to time out
    assert "test_blocking 1.0" in scraped["r"].text


def test_concurrent_scrapes_share_one_render() -> None:
    calls = []
    gate = threading.Event()

    def render() -> list[bytes]:
        calls.append(1)
        gate.wait(timeout=10)
        return [b"x"]

    async def main() -> list[list[bytes]]:
        shared = SharedRender(render)
        waiting = [asyncio.create_task(shared()) for _ in range(5)]
        await asyncio.sleep(0.01)
        gate.set()
        return await asyncio.gather(*waiting)

    assert asyncio.run(main()) == [[b"x"]] * 5 and len(calls) == 1


def _families(text: str) -> dict[str, set[tuple[str, tuple[tuple[str, str], ...], float]]]:
    out: dict[str, set[tuple[str, tuple[tuple[str, str], ...], float]]] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = {(s.name, tuple(sorted(s.labels.items())), s.value) for s in fam.samples}
    return out


def test_the_fast_exposition_equals_prometheus_client_rendering() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    hostile = ['evil"} 1\nfake{a="b', "back\\slash", "модель-😀"]
    with make_client() as c:
        for body in BODIES:
            c.post("/v1/traces", content=body.read_bytes(), headers=JSON)
        c.post("/v1/traces", content=span_body([model_span(m, trace=i + 1) for i, m in enumerate(hostile)]),
               headers=JSON)
        latency = c.app.state.exporter.latency  # type: ignore[attr-defined]
        reference = CollectorRegistry()
        reference.register(latency)
        assert _families(latency.exposition()) == _families(generate_latest(reference).decode())
        assert len(_families(latency.exposition())["tidescale_request_duration_seconds"]) > 100
        assert b"".join(latency.exposition_chunks(series_per_chunk=1)).decode() == latency.exposition()


def test_client_disconnect_is_quiet() -> None:
    app = create_app(make_settings())
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("tidescale").addHandler(handler)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(k.encode(), v.encode()) for k, v in JSON.items()]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/traces", "raw_path": b"/v1/traces", "query_string": b"",
             "root_path": "", "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}
    try:
        asyncio.run(app(scope, receive, send))  # used to raise ClientDisconnect with a 40-line traceback
    finally:
        logging.getLogger("tidescale").removeHandler(handler)
    assert not [r for r in records if r.levelno >= logging.ERROR or r.exc_info]
    assert not [m for m in sent if m.get("status", 0) >= 500]


def test_unhandled_errors_are_counted_on_the_exporter_registry() -> None:
    with make_client() as c:
        assert "tidescale_http_unhandled_errors_total" in c.get("/metrics").text


@pytest.fixture
def slow_header_server() -> Iterator[int]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                            http=protocol_with_header_timeout(0.2), timeout_keep_alive=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    yield port
    server.should_exit = True
    thread.join(timeout=10)


def test_a_client_that_never_finishes_its_headers_is_disconnected(slow_header_server: int) -> None:
    with socket.create_connection(("127.0.0.1", slow_header_server), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        assert sock.recv(1024) == b""  # closed by the server (a timeout here raises instead)


def _get_ok(sock: socket.socket) -> None:
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = b""
    while not answer.endswith(b"ok"):
        chunk = sock.recv(1024)
        assert chunk, "closed before the answer"
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")


def test_a_prompt_client_is_served_and_kept_alive(slow_header_server: int) -> None:
    with socket.create_connection(("127.0.0.1", slow_header_server), timeout=10) as sock:
        for _ in range(2):
            _get_ok(sock)


def test_an_idle_keep_alive_connection_outlives_the_header_deadline(slow_header_server: int) -> None:
    """Idle between requests, a connection is kept for timeout_keep_alive (1 s here), not closed at the
    head deadline (0.2 s): a client posting on a timer (Triton's OTLP exporter, every 5 s) must not
    send on a connection the server closes at about that period."""
    with socket.create_connection(("127.0.0.1", slow_header_server), timeout=10) as sock:
        _get_ok(sock)
        time.sleep(0.5)
        _get_ok(sock)


def test_a_request_head_started_on_a_kept_alive_connection_still_has_a_deadline(slow_header_server: int) -> None:
    with socket.create_connection(("127.0.0.1", slow_header_server), timeout=10) as sock:
        _get_ok(sock)
        sock.sendall(b"GET / HTTP/1.1\r\n")  # then nothing: keep-alive no longer applies, the deadline does
        assert sock.recv(1024) == b""


def test_a_connection_that_never_sends_is_disconnected(slow_header_server: int) -> None:
    with socket.create_connection(("127.0.0.1", slow_header_server), timeout=10) as sock:
        assert sock.recv(1024) == b""


def test_the_token_is_still_required_on_ingest() -> None:
    with make_client() as c:
        assert c.post("/v1/traces", content=b"{}", headers={"content-type": "application/json"}).status_code == 401
        authorised = {**AUTH, "content-type": "application/json"}
        assert c.post("/v1/traces", content=b"{}", headers=authorised).status_code == 200
