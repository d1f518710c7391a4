"""Serving under load and misuse: scrapes and OTLP bodies off the event loop, quiet disconnects, heartbeats
(the server's own bounds: tests/unit/contracts/test_serving.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from tests.unit.exporters.test_service_api import (
    AUTH,
    BODIES,
    JSON,
    make_client,
    make_settings,
    model_span,
    samples,
    span_body,
)
from tidescale.exporters import service
from tidescale.exporters.otlp import Span
from tidescale.exporters.service import SharedRender, create_app
from tidescale.exporters.stats_poller import StatsPoller


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


def test_the_token_is_still_required_on_ingest() -> None:
    with make_client() as c:
        assert c.post("/v1/traces", content=b"{}", headers={"content-type": "application/json"}).status_code == 401
        authorised = {**AUTH, "content-type": "application/json"}
        assert c.post("/v1/traces", content=b"{}", headers=authorised).status_code == 200


def test_healthz_is_served_while_an_otlp_body_is_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoded on the event loop, one 8 MiB body held /healthz for 1.3 s, and 8 at once for 7.1 s, past
    the probe's 3 s timeout; the decode now runs in the ingest thread."""
    entered, release = threading.Event(), threading.Event()
    released_in_time: list[bool] = []
    decode = service.decode_traces

    def slow_decode(body: bytes, content_type: str | None) -> list[Span]:
        entered.set()
        released_in_time.append(release.wait(timeout=10))
        return decode(body, content_type)

    monkeypatch.setattr(service, "decode_traces", slow_decode)
    with make_client() as c:
        posted: dict[str, Any] = {}
        poster = threading.Thread(target=lambda: posted.update(
            r=c.post("/v1/traces", content=BODIES[1].read_bytes(), headers=JSON)))
        poster.start()
        assert entered.wait(timeout=10)
        assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200
        release.set()
        poster.join()
        assert posted["r"].status_code == 200
        [(_, cpu)] = [(labels, v) for labels, v in samples(c, "tidescale_exporter_ingest_cpu_seconds_total")
                      if labels["source"] == "otlp"]
    assert released_in_time == [True]  # False: /healthz waited for the decode
    assert cpu > 0  # the ingest thread's CPU is still counted as OTLP ingest


def test_a_stats_poll_that_never_finishes_fails_liveness(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop stuck in a call that never returns is alive to the supervisor: /healthz said ok."""
    async def stuck(_self: StatsPoller) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(StatsPoller, "poll_once", stuck)
    with make_client(triton_urls=["http://127.0.0.1:1"], poll_interval_s=0.01, stall_after_s=0.05) as c:
        for _ in range(500):
            r = c.get("/healthz")
            if r.status_code != 200:
                break
            time.sleep(0.02)
    assert r.status_code == 503 and "stats poll" in r.json()["detail"]


def test_a_stats_poll_that_finishes_its_rounds_stays_live() -> None:
    with make_client(triton_urls=["http://127.0.0.1:1"], poll_interval_s=0.01, stall_after_s=5) as c:
        (poll,) = [h for h in c.app.state.exporter.heartbeats if h.name == "stats poll"]  # type: ignore[attr-defined]
        for _ in range(500):
            if poll.beats >= 3:
                break
            time.sleep(0.02)
        assert poll.beats >= 3 and c.get("/healthz").status_code == 200
