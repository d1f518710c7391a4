"""The simulated exporters' HTTP server holds the port it was given from the moment it exists."""

from __future__ import annotations

import errno
import socket

import httpx
import pytest

from tidescale.devstack.fleet.httpserve import LoopbackHttpServer, text_response
from tidescale.devstack.ports import LOOPBACK


def bind_other(port: int) -> None:
    """Bind *port* as another server would (SO_REUSEADDR, as http.server sets it: a port left in
    TIME_WAIT by a closed connection is free, a listening one is not)."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind((LOOPBACK, port))


def test_a_port_the_os_picked_is_held_from_construction_until_stop() -> None:
    """Between construction and start() a stack starts Triton replicas, whose outgoing connections
    once took such a port: nothing else may bind it in between."""
    server = LoopbackHttpServer("held")
    server.get_routes["/metrics"] = lambda: text_response("up 1\n")
    with pytest.raises(OSError) as taken:
        bind_other(server.port)
    assert taken.value.errno == errno.EADDRINUSE
    server.start()
    try:
        assert httpx.get(f"{server.url}/metrics").text == "up 1\n"  # routes added after construction
    finally:
        server.stop()
    bind_other(server.port)  # released


def test_a_server_never_started_stops_without_waiting() -> None:
    server = LoopbackHttpServer("never-started")
    server.stop()  # shutdown() would wait forever for a serve_forever that never ran
    bind_other(server.port)
