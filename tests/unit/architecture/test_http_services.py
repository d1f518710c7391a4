"""The rules every HTTP service holds (the exporter, the review service, the recommender), checked on
each one, and on every write route each one has, found from its routes rather than listed here:

- no body is read before the token is checked, and none past its cap;
- the token is compared as configured less surrounding whitespace, the same way everywhere;
- the probes answer while client requests hold every shared worker thread, and on a listener of
  their own while client connections fill the cap;
- `serve` runs each with its settings' bounds (header deadline, keep-alive, connection cap, probes);
- `/openapi.json` answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tests.hostile import BAD_AUTHORIZATIONS, OVERSIZED_BODIES, TOKEN_SPELLINGS
from tests.unit.autoscaler.test_autoscaler_service import make as make_recommender
from tidescale.alerts.reviews.service import create_app as reviews_app
from tidescale.alerts.reviews.settings import ReviewsSettings
from tidescale.autoscaler.app import make_app as recommender_app
from tidescale.contracts import serving
from tidescale.contracts.serving import build_server
from tidescale.contracts.settings import ServingSettings
from tidescale.devstack.ports import free_port
from tidescale.exporters.service import create_app as exporter_app
from tidescale.exporters.settings import ExporterSettings

TOKEN = "s3cret-token"
CAP = 4096  # every body cap of the apps below
CHUNK = 64 << 10
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


@dataclass
class Service:
    app: FastAPI
    settings: ServingSettings


def exporter(tmp_path: Path, token: str = TOKEN, **limits: Any) -> Service:
    settings = ExporterSettings(token=token, max_body_bytes=CAP, max_profile_bytes=CAP, **limits)
    return Service(exporter_app(settings), settings)


def reviews(tmp_path: Path, token: str = TOKEN, **limits: Any) -> Service:
    settings = ReviewsSettings(database=f"sqlite:///{tmp_path / 'reviews.db'}", token=token, max_body_bytes=CAP,
                               **limits)
    return Service(reviews_app(settings), settings)


def recommender(tmp_path: Path, token: str = TOKEN, **limits: Any) -> Service:
    service, _ = make_recommender(**limits)
    return Service(recommender_app(service), service.settings)


SERVICES: dict[str, Callable[..., Service]] = {"exporter": exporter, "reviews": reviews, "recommender": recommender}
WRITERS = ["exporter", "reviews"]  # the services with write routes (the recommender has none)


def write_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, a concrete path) of every route that takes a write, path parameters filled in."""
    routes = []
    for route in app.routes:
        for method in sorted((getattr(route, "methods", None) or set()) & WRITE_METHODS):
            routes.append((method, re.sub(r"\{[^}]+\}", "1", route.path)))  # type: ignore[attr-defined]
    return routes


@dataclass
class Answer:
    status: int
    read: int  # body bytes the app took from the client


def call(app: FastAPI, method: str, path: str, authorization: str | None, content_length: str | None,
         body_bytes: int) -> Answer:
    """One request straight through ASGI, the body offered in CHUNK pieces: what was answered and read."""
    chunks = [b"x" * CHUNK] * (body_bytes // CHUNK)
    headers = [(b"content-type", b"application/json")]
    if authorization is not None:
        headers.append((b"authorization", authorization.encode("latin-1")))
    if content_length is not None:
        headers.append((b"content-length", content_length.encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"model=m&version=1", "root_path": "",
             "headers": headers, "client": ("192.0.2.7", 40000), "server": ("127.0.0.1", 80)}
    answer = Answer(0, 0)

    async def run() -> None:
        answered, ended = asyncio.Event(), False

        async def receive() -> dict[str, Any]:
            nonlocal ended
            if not ended:
                chunk = chunks.pop() if chunks else b""
                answer.read += len(chunk)
                ended = not chunks
                return {"type": "http.request", "body": chunk, "more_body": not ended}
            await answered.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer.status = message["status"]
            elif not message.get("more_body"):
                answered.set()

        await app(scope, receive, send)

    asyncio.run(run())
    return answer


# --- bodies and tokens ------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "content_length", "size"), OVERSIZED_BODIES, ids=[b[0] for b in OVERSIZED_BODIES])
@pytest.mark.parametrize(("how", "authorization"), BAD_AUTHORIZATIONS, ids=[a[0] for a in BAD_AUTHORIZATIONS])
@pytest.mark.parametrize("name", WRITERS)
def test_no_write_route_reads_a_body_before_the_token(tmp_path: Path, name: str, how: str, authorization: str | None,
                                                      body: str, content_length: str | None, size: int) -> None:
    app = SERVICES[name](tmp_path).app
    assert write_routes(app)
    for method, path in write_routes(app):
        answer = call(app, method, path, authorization, content_length, size)
        assert (answer.status, answer.read) == (401, 0), (method, path)


@pytest.mark.parametrize(("body", "content_length", "size"), OVERSIZED_BODIES, ids=[b[0] for b in OVERSIZED_BODIES])
@pytest.mark.parametrize("name", WRITERS)
def test_no_write_route_reads_past_its_cap(tmp_path: Path, name: str, body: str, content_length: str | None,
                                           size: int) -> None:
    app = SERVICES[name](tmp_path).app
    for method, path in write_routes(app):
        answer = call(app, method, path, f"Bearer {TOKEN}", content_length, size)
        assert 400 <= answer.status < 500 and answer.read <= CAP + CHUNK, (method, path, answer)


def test_the_recommender_takes_no_writes(tmp_path: Path) -> None:
    assert write_routes(recommender(tmp_path).app) == []


@pytest.mark.parametrize(("spelling", "written"), TOKEN_SPELLINGS, ids=[t[0] for t in TOKEN_SPELLINGS])
@pytest.mark.parametrize("name", WRITERS)
def test_a_token_written_with_surrounding_whitespace_matches_everywhere(tmp_path: Path, name: str, spelling: str,
                                                                        written: str) -> None:
    """A Secret made from a file ends in a newline: the exporter refused every token so made."""
    app = SERVICES[name](tmp_path, token=written.format(TOKEN)).app
    for method, path in write_routes(app):
        assert call(app, method, path, f"Bearer {TOKEN}", None, 0).status != 401, (method, path)
        assert call(app, method, path, f"Bearer {written.format(TOKEN)}", None, 0).status != 401, (method, path)
        assert call(app, method, path, "Bearer wrong", None, 0).status == 401, (method, path)


# --- the probes --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SERVICES))
def test_probes_answer_while_requests_hold_every_worker_thread(tmp_path: Path, name: str) -> None:
    """Synchronous routes share one pool of worker threads (40): requests waiting on a slow store or
    on the evaluation's lock can hold all of them, and a probe queued behind them restarted the pod."""
    app = SERVICES[name](tmp_path).app
    entered, release = threading.Event(), threading.Event()
    released_in_time: list[bool] = []

    @app.get("/test/one-worker")
    async def one_worker() -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 1

    @app.get("/test/hold-the-worker")
    def hold() -> None:
        entered.set()
        released_in_time.append(release.wait(timeout=10))

    with TestClient(app) as client:
        client.get("/test/one-worker")
        holder = threading.Thread(target=client.get, args=("/test/hold-the-worker",))
        holder.start()
        assert entered.wait(timeout=10)
        statuses = [client.get(path).status_code for path in ("/healthz", "/readyz")]
        release.set()
        holder.join()
    assert released_in_time == [True]  # False: a probe waited for the worker thread
    assert statuses[0] == 200 and statuses[1] in (200, 503)


@contextlib.contextmanager
def served(service: Service) -> Iterator[None]:
    server = build_server(service.app, service.settings)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(1000):
        if server.started:
            break
        threading.Event().wait(0.01)
    try:
        yield
    finally:
        server.handle_exit(signal.SIGTERM, None)
        thread.join(timeout=15)


@pytest.mark.parametrize("name", list(SERVICES))
def test_probes_answer_on_their_port_while_client_connections_fill_the_cap(tmp_path: Path, name: str) -> None:
    service = SERVICES[name](tmp_path, host="127.0.0.1", port=free_port(), health_port=free_port(),
                             max_connections=3)
    settings = service.settings
    with served(service), contextlib.ExitStack() as stack:
        for _ in range(3):
            stack.enter_context(socket.create_connection(("127.0.0.1", settings.port), timeout=10))
        with socket.create_connection(("127.0.0.1", settings.port), timeout=10) as extra:
            assert extra.recv(1024).startswith(b"HTTP/1.1 503")
        assert httpx.get(f"http://127.0.0.1:{settings.health_port}/healthz", timeout=10).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{settings.health_port}/metrics", timeout=10).status_code == 404


# --- serve --------------------------------------------------------------------------------------------

def serve_commands(tmp_path: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each service's serve command line and environment, a health port and a connection cap given."""
    config = tmp_path / "tidescale.yaml"
    config.write_text("recommender:\n  prometheus_url: http://127.0.0.1:1\n  capacity_rps: 10\n"
                      "  fast_path: {enabled: false}\n"
                      "  targets: [{deployment: triton, namespace: ml, model: m}]\n")
    return {
        "exporter": (["exporter", "serve"], {"TIDESCALE_EXPORTER_MAX_CONNECTIONS": "7"}),
        "reviews": (["reviews", "serve", "--database", f"sqlite:///{tmp_path / 'r.db'}"],
                    {"TIDESCALE_REVIEWS_MAX_CONNECTIONS": "7", "TIDESCALE_REVIEWS_TOKEN": TOKEN}),
        "recommender": (["autoscale", "recommend", "--config", str(config)],
                        {"TIDESCALE_RECOMMENDER_MAX_CONNECTIONS": "7"}),
    }


@pytest.mark.parametrize("name", list(SERVICES))
def test_every_serve_command_runs_with_its_settings_bounds(tmp_path: Path, name: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The review service and the recommender used to be served without the exporter's bounds: no
    header deadline, no keep-alive limit, no connection cap (20,000 idle connections: out of files)."""
    from tidescale.cli import app

    served_with: list[tuple[Any, ServingSettings]] = []
    monkeypatch.setattr(serving, "serve", lambda app_, settings, **_: served_with.append((app_, settings)))
    args, env = serve_commands(tmp_path)[name]
    result = CliRunner().invoke(app, [*args, "--health-port", "10999"], env=env)
    assert result.exit_code == 0, result.output
    [(served_app, settings)] = served_with
    assert isinstance(served_app, FastAPI) and isinstance(settings, ServingSettings)
    assert (settings.max_connections, settings.health_port) == (7, 10999)


@pytest.mark.parametrize("name", list(SERVICES))
def test_openapi_answers(tmp_path: Path, name: str) -> None:
    response = TestClient(SERVICES[name](tmp_path).app).get("/openapi.json")
    assert response.status_code == 200 and response.json()["paths"]
