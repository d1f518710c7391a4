"""A lean open-loop HTTP/1.1 load client for the fidelity benchmark.

The fleet's load generator (httpx) is general; on a loaded 2-core machine it cannot keep a Poisson
schedule at ~150 req/s, and the server then sees bursts. This client does the minimum per request:
one pre-encoded request written on a kept-alive asyncio stream, the response read by its
Content-Length. Connections are opened on demand and reused, so overload (many requests in flight)
costs connections, not CPU.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np

from tidescale.contracts.errors import TidescaleError

MAX_HEADER_BYTES = 64 * 1024


@dataclass
class LeanResult:
    """Per request: actual send time (s since start), latency (s), HTTP status (0 = transport error)."""

    sent: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    status: list[int] = field(default_factory=list)

    def ok_latencies(self) -> np.ndarray:
        return np.asarray([lat for lat, st in zip(self.latency, self.status, strict=True) if 200 <= st < 300])

    @property
    def errors(self) -> int:
        return sum(1 for st in self.status if not 200 <= st < 300)


def build_request(host: str, path: str, body: bytes) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


def content_length(header: bytes) -> int:
    """The Content-Length of a response header block (bytes up to the blank line)."""
    for line in header.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            value = value.strip()
            if not value.isdigit():
                raise TidescaleError(f"bad Content-Length {value[:20]!r}")
            return int(value)
    raise TidescaleError("response without Content-Length (chunked responses are not supported)")


def status_code(header: bytes) -> int:
    parts = header.split(b"\r\n", 1)[0].split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


class LeanClient:
    """Plays arrival times against one URL with a pool of kept-alive connections."""

    def __init__(self, url: str, path: str, body: bytes, timeout_s: float = 120.0) -> None:
        parts = urlsplit(url)
        if not parts.hostname or not parts.port:
            raise TidescaleError(f"lean client needs http://host:port, got {url!r}")
        self.host, self.port = parts.hostname, parts.port
        self.request = build_request(f"{self.host}:{self.port}", path, body)
        self.timeout_s = timeout_s
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    def play(self, arrivals: np.ndarray) -> LeanResult:
        return asyncio.run(self._play(arrivals))

    async def _play(self, arrivals: np.ndarray) -> LeanResult:
        result = LeanResult()
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        for t in arrivals.tolist():
            delay = start + t - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self._one(start, result)))
        await asyncio.gather(*tasks)
        for _, writer in self._idle:
            writer.close()
        return result

    async def _one(self, start: float, result: LeanResult) -> None:
        t0 = time.monotonic()
        sent = asyncio.get_running_loop().time() - start
        status = 0
        try:
            status = await asyncio.wait_for(self._exchange(), self.timeout_s)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TidescaleError):
            status = 0
        result.sent.append(sent)
        result.latency.append(time.monotonic() - t0)
        result.status.append(status)

    async def _exchange(self) -> int:
        if self._idle:
            reader, writer = self._idle.pop()
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        writer.write(self.request)
        header = await reader.readuntil(b"\r\n\r\n")
        if len(header) > MAX_HEADER_BYTES:
            raise TidescaleError("response header too large")
        await reader.readexactly(content_length(header))
        self._idle.append((reader, writer))
        return status_code(header)
