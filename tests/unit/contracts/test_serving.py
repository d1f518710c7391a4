"""`CalmServer`: uvicorn with a one-second tick, still stopped at once by its exit signals."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from tidescale.contracts.serving import TICKS_PER_DATE, CalmServer
from tidescale.devstack.ports import free_port


async def ok_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def start(server: CalmServer) -> threading.Thread:
    thread = threading.Thread(target=server.run, daemon=True)  # not the main thread: no signal handlers
    thread.start()
    for _ in range(1000):
        if server.started:
            return thread
        threading.Event().wait(0.01)
    pytest.fail("the server did not start")


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
