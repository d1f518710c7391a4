"""The error boundary every service installs: unexpected exceptions are a counted 500 and one line."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest

from tidescale.contracts.http import install_error_boundary
from tidescale.contracts.loglimit import BURST


def make_app() -> tuple[FastAPI, CollectorRegistry]:
    app = FastAPI()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(install_error_boundary(app, "test", logging.getLogger("tidescale.test")))

    @app.get("/boom/{item}")
    def boom(item: str) -> None:
        raise RecursionError("maximum recursion depth exceeded " + item)

    @app.get("/ok")
    def ok() -> dict[str, str]:
        return {"status": "ok"}

    return app, registry


def test_unexpected_exception_is_a_counted_500_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    app, registry = make_app()
    client = TestClient(app, raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR, "tidescale.test"):
        response = client.get("/boom/secret-path-value")
    assert response.status_code == 500
    assert "internal error" in response.json()["detail"]
    assert [r.getMessage().count("\n") for r in caplog.records] == [0]
    assert "RecursionError" in caplog.records[0].getMessage()
    assert caplog.records[0].exc_info is None
    text = generate_latest(registry).decode()
    assert 'tidescale_http_unhandled_errors_total{route="/boom/{item}",service="test"} 1.0' in text
    assert client.get("/ok").status_code == 200


def test_a_route_that_fails_on_every_request_writes_a_few_lines_and_counts_them_all(
        caplog: pytest.LogCaptureFixture) -> None:
    app, registry = make_app()
    client = TestClient(app, raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR, "tidescale.test"):
        for i in range(50):
            assert client.get(f"/boom/{i}").status_code == 500
    assert 1 <= len(caplog.records) <= BURST
    text = generate_latest(registry).decode()
    assert 'tidescale_http_unhandled_errors_total{route="/boom/{item}",service="test"} 50.0' in text
