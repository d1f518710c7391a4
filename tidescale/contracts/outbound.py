"""Outbound HTTP GETs with an overall deadline, a cap on the answer and no redirect followed.

httpx's timeouts are per socket operation: a server that trickles one byte every 2 s never trips
a 5 s read timeout, and holds the caller for as long as it likes (issue 43, defect 3). Its
decompression is unbounded: a 1 MB gzip answer inflated to about a gigabyte before anyone looked
at its size (defect 13). Every outbound call of the product (Prometheus, the Triton pods of the
fast path, the exporter's profiles for reviews) goes through `get`, which

- bounds the whole call, connect, headers and body, by one deadline: each socket read and write
  waits at most what is left of it (`bind_deadlines` puts that limit under the client's pools);
- asks for gzip or nothing, and inflates it itself, never past `max_bytes` of *decompressed*
  answer (a Content-Length over the cap is refused before the body is read);
- follows no redirect: a 3xx is an answer like any other, which the caller refuses.
"""

from __future__ import annotations

import time
import zlib
from contextvars import ContextVar
from dataclasses import dataclass

import httpcore
import httpx

# The time.monotonic() by which the current call must end, for the socket operations beneath it.
_DEADLINE: ContextVar[float | None] = ContextVar("_DEADLINE", default=None)


class DeadlineExceeded(httpx.TimeoutException):
    """No complete answer within the call's deadline (a transport failure: retrying later may help)."""


class AnswerTooLarge(httpx.DecodingError):
    """The answer, once decompressed, is larger than the caller's cap (or it said so up front)."""


class UnexpectedEncoding(httpx.DecodingError):
    """A Content-Encoding other than the gzip or identity that was asked for."""


def _left(timeout: float | None) -> float | None:
    """*timeout* shortened to what is left of the current call's deadline; ReadTimeout once it is gone."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the call's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket whose every read and write waits at most what is left of the call's deadline."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: object, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, _left(timeout)))  # type: ignore[arg-type]

    def get_extra_info(self, info: str) -> object:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, its connections bounded by the call's deadline."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: object = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_tcp(host, port, _left(timeout), local_address,
                                                         socket_options))  # type: ignore[arg-type]

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: object = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_unix_socket(path, _left(timeout),
                                                                 socket_options))  # type: ignore[arg-type]

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


_BACKEND = _DeadlineBackend()


def bind_deadlines(client: httpx.Client) -> httpx.Client:
    """Put the deadline-bounded backend under every connection pool of *client* (its default
    transport and any proxy mounts from the environment); a test transport has none and is left as
    it is. httpx has no public hook for a network backend, hence the pools' attribute."""
    for transport in (client._transport, *client._mounts.values()):
        pool = getattr(transport, "_pool", None)
        if isinstance(pool, httpcore.ConnectionPool):
            pool._network_backend = _BACKEND
    return client


def client(timeout_s: float, **kwargs: object) -> httpx.Client:
    """An httpx client for `get`: redirects off, every connection bounded by the call's deadline."""
    return bind_deadlines(httpx.Client(timeout=timeout_s, follow_redirects=False, **kwargs))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Answer:
    status: int
    headers: httpx.Headers
    content: bytes  # decompressed, at most the cap


def _inflater(response: httpx.Response) -> zlib._Decompress | None:
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    raise UnexpectedEncoding(f"the answer's Content-Encoding {encoding[:40]!r} was not asked for")


def _read_capped(response: httpx.Response, max_bytes: int, deadline: float) -> bytes:
    if response.is_stream_consumed:  # built in memory (a test transport): nothing left to stream
        if len(response.content) > max_bytes:
            raise AnswerTooLarge(f"the answer is larger than {max_bytes} bytes")
        return response.content
    inflate = _inflater(response)
    declared = response.headers.get("content-length", "")
    if inflate is None and declared.isdigit() and int(declared) > max_bytes:
        raise AnswerTooLarge(f"the answer is larger than {max_bytes} bytes ({declared} declared)")
    body = bytearray()
    for chunk in response.iter_raw():
        if time.monotonic() > deadline:
            raise DeadlineExceeded("the call's deadline passed")
        # At most one byte past the cap is ever inflated: zlib keeps the rest of the input unread.
        body += chunk if inflate is None else inflate.decompress(chunk, max_bytes + 1 - len(body))
        if len(body) > max_bytes:
            raise AnswerTooLarge(f"the answer is larger than {max_bytes} bytes"
                                 + (" once decompressed" if inflate is not None else ""))
    if inflate is not None:
        body += inflate.flush()
        if len(body) > max_bytes:
            raise AnswerTooLarge(f"the answer is larger than {max_bytes} bytes once decompressed")
    return bytes(body)


def get(http: httpx.Client, url: str, *, deadline_s: float, max_bytes: int,
        params: dict[str, object] | None = None, headers: dict[str, str] | None = None) -> Answer:
    """GET *url*: the whole answer within *deadline_s*, at most *max_bytes* once decompressed, no
    redirect followed. Raises DeadlineExceeded, AnswerTooLarge, UnexpectedEncoding or another
    httpx.HTTPError; the status is the caller's to judge."""
    deadline = time.monotonic() + deadline_s
    token = _DEADLINE.set(deadline)
    try:
        with http.stream("GET", url, params=params,  # type: ignore[arg-type]
                         headers={**(headers or {}), "Accept-Encoding": "gzip"}, follow_redirects=False) as r:
            return Answer(r.status_code, r.headers, _read_capped(r, max_bytes, deadline))
    except httpx.TimeoutException as exc:
        if isinstance(exc, DeadlineExceeded) or time.monotonic() >= deadline:
            raise DeadlineExceeded(f"no complete answer within {deadline_s:g} s") from None
        raise
    except zlib.error:
        raise httpx.DecodingError("the answer's gzip stream is corrupt") from None
    finally:
        _DEADLINE.reset(token)
