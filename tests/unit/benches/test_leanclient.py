"""The fidelity bench's lean HTTP client: response parsing (fuzzed) and a run against a local server."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.benches.leanclient import LeanClient, build_request, content_length, status_code
from tidescale.contracts.errors import TidescaleError


def test_response_header_parsing() -> None:
    header = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-length: 42\r\n\r\n"
    assert content_length(header) == 42 and status_code(header) == 200
    with pytest.raises(TidescaleError, match="Content-Length"):
        content_length(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    with pytest.raises(TidescaleError, match="bad Content-Length"):
        content_length(b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n")
    assert status_code(b"garbage\r\n\r\n") == 0


def test_request_is_a_complete_http11_post() -> None:
    req = build_request("127.0.0.1:8000", "/v2/models/m/infer", b'{"a":1}')
    head, _, body = req.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v2/models/m/infer HTTP/1.1\r\n") and b"Content-Length: 7" in head
    assert body == b'{"a":1}'


@settings(max_examples=200, deadline=None)
@given(header=st.binary(max_size=200))
def test_header_parsing_fuzz(header: bytes) -> None:
    assert status_code(header) >= 0
    try:
        n = content_length(header)
    except TidescaleError:
        return
    assert n >= 0 and str(n).encode() in header


def _serve(port_box: list[int], ready: threading.Event, stop: threading.Event) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(content_length(head))
                await asyncio.sleep(0.005)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_box.append(server.sockets[0].getsockname()[1])
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        server.close()

    asyncio.run(main())


def test_lean_client_keeps_the_schedule_against_a_local_server() -> None:
    port_box: list[int] = []
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=_serve, args=(port_box, ready, stop), daemon=True)
    thread.start()
    assert ready.wait(5)
    try:
        arrivals = np.linspace(0.0, 0.5, 40)
        result = LeanClient(f"http://127.0.0.1:{port_box[0]}", "/x", b"{}").play(arrivals)
    finally:
        stop.set()
        thread.join(5)
    assert result.errors == 0 and len(result.ok_latencies()) == 40
    assert np.all(np.asarray(sorted(result.sent)) >= arrivals - 1e-3)  # never early
