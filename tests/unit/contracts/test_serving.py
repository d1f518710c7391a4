"""The server every service runs on: a one-second tick still stopped at once by its exit signals, a
deadline for each request head and for a body answered early, a connection cap that closes what it
refuses, the probes on a listener of their own, and a log that hostile clients cannot flood."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from tidescale.contracts import serving
from tidescale.contracts.loglimit import BURST, RateLimitedLog
from tidescale.contracts.serving import (
    FD_RESERVE,
    PROBE_MAX_CONNECTIONS,
    TICKS_PER_DATE,
    CalmServer,
    build_server,
    connection_room,
)
from tidescale.contracts.settings import ServingSettings
from tidescale.devstack.ports import free_port


async def ok_app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    status = 401 if scope["path"] == "/write" else 200  # answers before reading any body
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def start(server: CalmServer) -> threading.Thread:
    thread = threading.Thread(target=server.run, daemon=True)  # not the main thread: no signal handlers
    thread.start()
    for _ in range(1000):
        if server.started:
            return thread
        threading.Event().wait(0.01)
    pytest.fail("the server did not start")


@contextlib.contextmanager
def running(app: Any = ok_app, **limits: Any) -> Iterator[ServingSettings]:
    """*app* served by `build_server` in a thread, with a probe port; its settings."""
    settings = ServingSettings(port=free_port(), health_port=free_port(), **limits)
    server = build_server(app, settings, lifespan="off")
    thread = start(server)
    try:
        yield settings
    finally:
        server.handle_exit(signal.SIGTERM, None)  # wakes the tick (a signal handler does no more)
        thread.join(timeout=10)


@pytest.fixture
def bounded() -> Iterator[int]:
    """A server with a 0.2 s head deadline and a 1 s keep-alive: its client port."""
    with running(header_timeout_s=0.2, keep_alive_s=1) as settings:
        yield settings.port


# --- the tick ----------------------------------------------------------------------------------------

@pytest.fixture
def sleepy_server() -> Iterator[tuple[CalmServer, int, threading.Thread]]:
    """A server whose tick is an hour: only the wakeup in `handle_exit` can stop it in time."""
    port = free_port()
    server = CalmServer(uvicorn.Config(ok_app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    server.tick_s = 3600.0
    thread = start(server)
    yield server, port, thread
    server.should_exit = True
    server.force_exit = True
    thread.join(timeout=1)


def test_it_serves_and_an_exit_signal_stops_it_without_waiting_for_the_tick(
        sleepy_server: tuple[CalmServer, int, threading.Thread]) -> None:
    server, port, thread = sleepy_server
    assert httpx.get(f"http://127.0.0.1:{port}/").text == "ok"
    server.handle_exit(signal.SIGTERM, None)
    thread.join(timeout=30)  # an hour's tick without the wakeup
    assert not thread.is_alive()


def test_every_tick_refreshes_the_date_header() -> None:
    """uvicorn refreshes `Date` on counters that are multiples of 10; every one of ours is."""
    server = CalmServer(uvicorn.Config(ok_app, port=free_port(), log_level="warning", lifespan="off"))
    server.tick_s = 0.01
    counters: list[int] = []

    async def on_tick(counter: int) -> bool:
        counters.append(counter)
        return len(counters) >= 4

    server.on_tick = on_tick  # type: ignore[method-assign]
    asyncio.run(server.main_loop())
    assert counters == [0, TICKS_PER_DATE, 2 * TICKS_PER_DATE, 3 * TICKS_PER_DATE]


# --- slow and idle clients -------------------------------------------------------------------------

def test_a_client_that_never_finishes_its_headers_is_disconnected(bounded: int) -> None:
    with socket.create_connection(("127.0.0.1", bounded), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        assert sock.recv(1024) == b""  # closed by the server (a timeout here raises instead)


def _answer(sock: socket.socket, request: bytes = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") -> bytes:
    sock.sendall(request)
    answer = b""
    while not answer.endswith(b"ok"):
        chunk = sock.recv(1024)
        assert chunk, "closed before the answer"
        answer += chunk
    return answer


def test_a_prompt_client_is_served_and_kept_alive(bounded: int) -> None:
    with socket.create_connection(("127.0.0.1", bounded), timeout=10) as sock:
        for _ in range(2):
            assert _answer(sock).startswith(b"HTTP/1.1 200")


def test_an_idle_keep_alive_connection_outlives_the_header_deadline(bounded: int) -> None:
    """Idle between requests, a connection is kept for timeout_keep_alive (1 s here), not closed at the
    head deadline (0.2 s): a client posting on a timer (Triton's OTLP exporter, every 5 s) must not
    send on a connection the server closes at about that period."""
    with socket.create_connection(("127.0.0.1", bounded), timeout=10) as sock:
        _answer(sock)
        time.sleep(0.5)
        assert _answer(sock).startswith(b"HTTP/1.1 200")


def test_a_request_head_started_on_a_kept_alive_connection_still_has_a_deadline(bounded: int) -> None:
    with socket.create_connection(("127.0.0.1", bounded), timeout=10) as sock:
        _answer(sock)
        sock.sendall(b"GET / HTTP/1.1\r\n")  # then nothing: keep-alive no longer applies, the deadline does
        assert sock.recv(1024) == b""


def test_a_connection_that_never_sends_is_disconnected(bounded: int) -> None:
    with socket.create_connection(("127.0.0.1", bounded), timeout=10) as sock:
        assert sock.recv(1024) == b""


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_body_answered_before_it_ended_does_not_hold_its_connection(bounded: int) -> None:
    """A 401 sent before the body arrived: a client trickling the rest (each byte restarted uvicorn's
    keep-alive timer) kept its connection, and its slot, for as long as it liked; now the rest has
    the head deadline (0.2 s here), long before this client stops trickling."""
    answer, closed = b"", False
    with socket.create_connection(("127.0.0.1", bounded), timeout=10) as sock:
        sock.sendall(b"POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 100)
        sock.settimeout(0.1)
        for _ in range(100):
            try:
                sock.sendall(b"x")
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # reset by the server
                closed = True
                break
            if not chunk:
                closed = True
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401") and closed


def test_a_body_answered_early_and_then_finished_closes_the_connection(bounded: int) -> None:
    with socket.create_connection(("127.0.0.1", bounded), timeout=10) as sock:
        answer = _answer(sock, b"POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 401")
        sock.sendall(b"body")
        assert _read_until_closed(sock) == b""


# --- the connection cap and the probes --------------------------------------------------------------

def test_the_connection_after_the_cap_is_answered_503_and_closed_while_probes_answer() -> None:
    """uvicorn's limit_concurrency kept every connection open (20,000 idle ones exhausted the file
    descriptors) and shared its slots with the probes (1,100 idle connections: /healthz 503)."""
    with running(max_connections=3) as settings, contextlib.ExitStack() as stack:
        held = [stack.enter_context(socket.create_connection(("127.0.0.1", settings.port), timeout=10))
                for _ in range(3)]
        assert _answer(held[0]).startswith(b"HTTP/1.1 200")  # the cap's connections are served
        with socket.create_connection(("127.0.0.1", settings.port), timeout=10) as extra:
            assert _read_until_closed(extra).startswith(b"HTTP/1.1 503")
        for path in ("/healthz", "/readyz"):
            assert httpx.get(f"http://127.0.0.1:{settings.health_port}{path}").text == "ok"


def test_the_probe_port_serves_the_probes_only() -> None:
    with running() as settings:
        assert httpx.get(f"http://127.0.0.1:{settings.health_port}/metrics").status_code == 404
        assert httpx.get(f"http://127.0.0.1:{settings.port}/metrics").status_code == 200


def test_the_open_file_limit_is_raised_to_fit_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = [(1024, 1 << 20)]
    monkeypatch.setattr(resource, "getrlimit", lambda _which: limits[-1])
    monkeypatch.setattr(resource, "setrlimit", lambda _which, value: limits.append(value))
    assert connection_room(5000) == 5000
    assert limits[-1] == (5000 + PROBE_MAX_CONNECTIONS + FD_RESERVE, 1 << 20)


def test_a_cap_beyond_the_hard_limit_is_lowered_to_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = [(1024, 2048)]
    monkeypatch.setattr(resource, "getrlimit", lambda _which: limits[-1])
    monkeypatch.setattr(resource, "setrlimit", lambda _which, value: limits.append(value))
    assert connection_room(5000) == 2048 - PROBE_MAX_CONNECTIONS - FD_RESERVE


# --- the log ---------------------------------------------------------------------------------------

def test_bad_requests_from_many_connections_write_a_few_lines() -> None:
    """uvicorn writes a warning per invalid request: 200 of them wrote 200 lines."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("uvicorn.error")
    with running() as settings:
        logger.addHandler(handler)
        try:
            for _ in range(200):
                with socket.create_connection(("127.0.0.1", settings.port), timeout=10) as sock:
                    sock.sendall(b"NOT HTTP\r\n\r\n")
                    _read_until_closed(sock)
        finally:
            logger.removeHandler(handler)
    invalid = [r for r in records if "Invalid HTTP request" in r.getMessage()]
    assert 1 <= len(invalid) <= BURST


def test_the_loggers_written_per_connection_are_rate_limited() -> None:
    build_server(ok_app, ServingSettings(port=free_port()), lifespan="off")
    for name in serving.PER_CONNECTION_LOGGERS:
        assert [f for f in logging.getLogger(name).filters if isinstance(f, RateLimitedLog)], name
