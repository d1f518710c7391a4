"""Hostile HTTP clients for the soak, and the lists of hostile requests the tests share.

`BAD_AUTHORIZATIONS` and `OVERSIZED_BODIES` are the corpus every write route is tested with
(`tests/hostile.py` takes them from here); the soak sends them to the running services too. The
clients speak raw HTTP/1.1 over asyncio sockets, so that they can do what a library would not:
trickle a request head or a body, hold a connection open without a byte, lie about a body's length.

Each attack records its outcomes in a `Tally`: the status the server answered ("401", "413",
"503"), "closed" when the server closed the connection without an answer (its header deadline),
or the error a connection met ("connect:ConnectionRefusedError"), and for the attacks that hold
connections, how long the server let them stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tidescale.benches.soak.stats import HOLD_SLACK_S, percentile

# `Authorization` header values that must not authenticate a write (None: no header at all).
BAD_AUTHORIZATIONS: list[tuple[str, str | None]] = [
    ("none", None),
    ("empty", ""),
    ("basic", "Basic dXNlcjpwYXNz"),
    ("bearer-alone", "Bearer"),
    ("bearer-blank", "Bearer     "),
    ("wrong-token", "Bearer wrong"),
    ("latin-1", "Bearer s\xe9cret"),
]

# Bodies sent to a write route, far past any body cap: (name, Content-Length sent or None, bytes sent).
# A PATCH without a token used to be read whole before its 401: 200 MiB of RSS a request.
OVERSIZED_BODIES: list[tuple[str, str | None, int]] = [
    ("declared-200-MiB", str(200 << 20), 1 << 20),
    ("undeclared", None, 1 << 20),
    ("declared-small", "16", 1 << 20),  # a Content-Length that lies
]

CHUNK = 64 << 10
GIVE_UP_AFTER_S = 30.0  # past the header deadline: the attack stops waiting and counts "held_past_limit"


@dataclass(frozen=True)
class Target:
    """What the attacks need to know about one running service."""

    host: str
    port: int
    token: str | None  # the service's write token (None: it takes no writes)
    writes: tuple[tuple[str, str], ...]  # (method, path) of its write routes; empty: none
    read_path: str  # a GET route, for heads and bad tokens where there is no write route
    body_cap: int  # its body cap (bytes), 0 where it takes no bodies
    header_timeout_s: float
    max_connections: int
    small_body: bytes = b"{}"  # a body a write route would take, for requests refused on their token

    def request_lines(self) -> list[tuple[str, str]]:
        """Where a hostile body goes: every write route, else a POST to the read route (answered 405)."""
        return list(self.writes) or [("POST", self.read_path)]


@dataclass
class Kind:
    outcomes: Counter[str] = field(default_factory=Counter)
    held_s: list[float] = field(default_factory=list)  # how long the server let a connection stay


class Tally:
    """Outcomes per attack kind."""

    def __init__(self) -> None:
        self.kinds: dict[str, Kind] = {}

    def count(self, kind: str, outcome: str, held_s: float | None = None) -> None:
        k = self.kinds.setdefault(kind, Kind())
        k.outcomes[outcome] += 1
        if held_s is not None:
            k.held_s.append(held_s)

    def as_json(self) -> dict[str, Any]:
        return {name: {"sent": sum(k.outcomes.values()), "outcomes": dict(sorted(k.outcomes.items())),
                       "held_max_s": max(k.held_s, default=None), "held_p50_s": percentile(k.held_s, 50)}
                for name, k in sorted(self.kinds.items())}


def head(method: str, path: str, headers: dict[str, str | None]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: soak"]
    lines += [f"{k}: {v}" for k, v in headers.items() if v is not None]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def status_of(data: bytes) -> str | None:
    """The status code of an HTTP/1.1 answer's first bytes, or None."""
    parts = data.split(b" ", 2)
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return parts[1].decode()
    return None


@dataclass
class Exchange:
    """What one hostile connection saw (times from time.monotonic())."""

    opened: float
    status: str | None = None
    answered: float | None = None
    closed: float | None = None
    error: str | None = None

    def outcome(self) -> str:
        if self.error is not None:
            return self.error
        if self.status is not None:
            return self.status
        return "closed" if self.closed is not None else "held_past_limit"


async def _connect(target: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection(target.host, target.port), 10)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 2)


async def _connect_recorded(target: Target, ex: Exchange
                            ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """The connection for *ex*, or None with the failure to connect recorded as its outcome."""
    try:
        return await _connect(target)
    except (OSError, TimeoutError) as exc:
        ex.error = f"connect:{type(exc).__name__}"
        return None


async def hold(target: Target, first: bytes, drip: bytes, every_s: float, give_up_s: float,
               stop_dripping_on_answer: bool = False) -> Exchange:
    """Open a connection, send *first*, then *drip* every *every_s* seconds, reading whatever comes back,
    until the server closes the connection or *give_up_s* passes."""
    ex = Exchange(time.monotonic())
    if (streams := await _connect_recorded(target, ex)) is None:
        return ex
    reader, writer = streams
    try:
        writer.write(first)
        deadline = ex.opened + give_up_s
        while time.monotonic() < deadline:
            try:
                data = await asyncio.wait_for(reader.read(4096), every_s)
            except TimeoutError:
                if not (stop_dripping_on_answer and ex.status is not None):
                    writer.write(drip)
                    await writer.drain()
                continue
            if not data:
                ex.closed = time.monotonic()
                break
            if ex.status is None:
                ex.status, ex.answered = status_of(data) or "garbage", time.monotonic()
    except OSError:  # reset by the server while dripping: closed all the same
        ex.closed = time.monotonic()
    finally:
        await _close(writer)
    return ex


async def exchange(target: Target, request_head: bytes, body: Callable[[], Any] | None = None,
                   wait_s: float = 15.0) -> Exchange:
    """Send one request (a head, then the chunks *body()* yields, stopping once the server has answered
    or gone) and read its answer's status; the connection is closed as soon as the status is in."""
    ex = Exchange(time.monotonic())
    if (streams := await _connect_recorded(target, ex)) is None:
        return ex
    reader, writer = streams

    async def read_status() -> None:
        data = await reader.read(4096)
        if data:
            ex.status, ex.answered = status_of(data) or "garbage", time.monotonic()
        else:
            ex.closed = time.monotonic()

    answer = asyncio.ensure_future(read_status())
    try:
        writer.write(request_head)
        await writer.drain()
        for chunk in body() if body is not None else ():
            if answer.done():
                break
            writer.write(chunk)
            await writer.drain()
        await asyncio.wait_for(asyncio.shield(answer), wait_s)
    except TimeoutError:
        pass  # no answer in wait_s: "held_past_limit"
    except OSError:  # reset or broken pipe while sending: the server gave up on the body
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(answer), 2)
        if ex.status is None and ex.closed is None:
            ex.closed = time.monotonic()
    finally:
        answer.cancel()
        await _close(writer)
    return ex


def body_chunks(size: int, chunked: bool) -> Callable[[], Any]:
    """A body of *size* bytes in CHUNK pieces (framed as chunked transfer coding when *chunked*)."""
    def chunks() -> Any:
        left = size
        while left > 0:
            n = min(CHUNK, left)
            left -= n
            yield (f"{n:x}\r\n".encode() + b"x" * n + b"\r\n") if chunked else b"x" * n
        if chunked:
            yield b"0\r\n\r\n"
    return chunks


# --- the attacks: each loops until *stop* is set ------------------------------------------------

async def slowloris(target: Target, tally: Tally, stop: asyncio.Event, every_s: float = 1.0) -> None:
    """A request head trickled a byte at a time, never finished; reconnects when the server closes it."""
    first = f"GET {target.read_path} HTTP/1.1\r\nHost: soak\r\nX-Slow: ".encode()
    give_up = target.header_timeout_s + GIVE_UP_AFTER_S
    while not stop.is_set():
        ex = await hold(target, first, b"a", every_s, give_up)
        end = ex.closed if ex.closed is not None else time.monotonic()
        tally.count("slowloris", ex.outcome(), end - ex.opened if ex.error is None and ex.status is None else None)
        if ex.error is not None or ex.status is not None:  # refused (the cap is full): try again in a second
            await _pause(stop, 1.0)


async def trickled_body(target: Target, tally: Tally, stop: asyncio.Event, every_s: float = 1.0) -> None:
    """A write without a token whose body (1 MiB declared) comes 64 bytes a second; the server answers at
    once and, by its limits, closes the connection a header deadline after that."""
    give_up = target.header_timeout_s + GIVE_UP_AFTER_S
    for method, path in itertools.cycle(target.request_lines()):
        if stop.is_set():
            return
        first = head(method, path, {"Content-Type": "application/json", "Content-Length": str(1 << 20)})
        ex = await hold(target, first, b"x" * 64, every_s, give_up)
        held = None
        if ex.error is None:
            end = ex.closed if ex.closed is not None else time.monotonic()
            held = end - (ex.answered if ex.answered is not None else ex.opened)
        tally.count("trickled_body_no_token", ex.outcome(), held)
        if ex.error is not None or ex.status == "503":
            await _pause(stop, 1.0)


async def flood(target: Target, tally: Tally, connections: int, connect_concurrency: int = 64) -> tuple[float, float]:
    """*connections* idle connections opened as fast as the server accepts them, each held until the server
    closes it (its header deadline) or refuses it (503, past its cap). Returns (start, end) in
    time.monotonic(): from the first connect to the last connection gone."""
    start = time.monotonic()
    gate = asyncio.Semaphore(connect_concurrency)
    give_up = target.header_timeout_s + GIVE_UP_AFTER_S

    async def one() -> None:
        async with gate:
            try:
                reader, writer = await _connect(target)
            except (OSError, TimeoutError) as exc:
                tally.count("flood", f"connect:{type(exc).__name__}")
                return
        opened = time.monotonic()
        outcome = "held_past_limit"
        try:
            data = await asyncio.wait_for(reader.read(4096), give_up)
            outcome = (status_of(data) or "garbage") if data else "closed"
        except TimeoutError:
            pass
        except OSError:
            outcome = "closed"
        finally:
            await _close(writer)
        tally.count("flood", outcome, time.monotonic() - opened if outcome != "503" else None)

    await asyncio.gather(*(one() for _ in range(connections)))
    return start, time.monotonic()


async def oversized(target: Target, tally: Tally, stop: asyncio.Event, every_s: float = 3.0) -> None:
    """Every *every_s*, one body past the cap (OVERSIZED_BODIES, with the token and without), each on its
    own task: an undeclared body is sent to its cap and 64 KiB past it."""
    cases = [(case, auth, line) for case in OVERSIZED_BODIES for auth in (True, False)
             for line in target.request_lines()]
    tasks: set[asyncio.Task[None]] = set()

    async def send(case: tuple[str, str | None, int], with_token: bool, method: str, path: str) -> None:
        _, declared, size = case
        if declared is None:
            size = max(size, target.body_cap + CHUNK)
        headers = {"Content-Type": "application/json", "Content-Length": declared,
                   "Transfer-Encoding": "chunked" if declared is None else None,
                   "Authorization": f"Bearer {target.token}" if with_token and target.token else None}
        ex = await exchange(target, head(method, path, headers), body_chunks(size, declared is None),
                            wait_s=target.header_timeout_s + HOLD_SLACK_S)
        tally.count("oversized_body", ex.outcome())

    try:
        for case, with_token, (method, path) in itertools.cycle(cases):
            if stop.is_set():
                break
            task = asyncio.ensure_future(send(case, with_token, method, path))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await _pause(stop, every_s)
    finally:  # what is in flight when the run ends is not counted
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def bad_tokens(target: Target, tally: Tally, stop: asyncio.Event, every_s: float = 1.0) -> None:
    """Every *every_s*, a write with a small valid body and each of BAD_AUTHORIZATIONS in turn (the
    recommender, which takes no writes nor tokens: a GET of its answer with that header)."""
    lines = list(target.writes) or [("GET", target.read_path)]
    for (_, authorization), (method, path) in itertools.cycle(itertools.product(BAD_AUTHORIZATIONS, lines)):
        if stop.is_set():
            return
        body = target.small_body if method != "GET" else b""
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body)) if body else None,
                   "Authorization": authorization}
        ex = await exchange(target, head(method, path, headers) + body, wait_s=target.header_timeout_s)
        tally.count("bad_token", ex.outcome())
        await _pause(stop, every_s)


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


Attack = Callable[[Target, Tally, asyncio.Event], Awaitable[None]]
