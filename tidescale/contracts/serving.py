"""How every tidescale HTTP service runs: uvicorn, bounded against slow, idle and numerous clients,
with a calm housekeeping tick and the probes on a listener of their own.

**Calm tick.** uvicorn's server wakes its event loop ten times a second to refresh the `Date` header
and look for a shutdown request. On a small VM each wakeup of an otherwise idle asyncio loop cost
about 0.25 ms of CPU, so those ten were 2.5 of an idle exporter's 3.3 ms of CPU a second, paid by
every exporter, recommender and review service whether or not anything asked them anything.
`CalmServer` ticks once a second instead (the `Date` header still changes every second) and is woken
at once by the signals that stop it, so a shutdown is not one tick slower.

**Bounds** (`BoundedH11Protocol`, settings in `ServingSettings`). uvicorn bounds an idle keep-alive
connection (`timeout_keep_alive`) and the size of an incomplete request head
(`h11_max_incomplete_event_size`), but not the *time* a client may take to send its headers: 50
connections sending a byte now and then stayed open for as long as they liked. A request head must
be complete `header_timeout_s` after the connection opened, or after the first bytes of a later
request on it arrived. Between requests, an idle keep-alive connection is uvicorn's to close, after
`timeout_keep_alive`: a deadline counted from the previous response instead would close every
connection idle that long, and a client posting on a timer of about that period (Triton's OTLP
exporter posts every 5 s) would now and then send on a connection the server is closing, and lose
that post. A request answered before its body ended (a 401, a 413) gets `header_timeout_s` more for
the rest, which is thrown away, and its connection is then closed: a client trickling a body
without a token used to hold its connection for ever. uvicorn's `limit_concurrency` answers 503 to
requests over the limit but keeps every connection open: about 20,000 idle ones exhausted a
service's file descriptors. Here the connection after `max_connections` is answered 503 and closed
at once, and the process's open-file limit is raised to fit the cap (or the cap lowered to fit it).

**Probes.** On the one listener, the kubelet's probes waited behind client load: 1,100 idle
connections made `/healthz` answer 503, and the liveness probe restarted the pod. With a
`health_port`, a second listener serves `/healthz` and `/readyz` of the same app (and nothing else)
with a small cap of its own; the chart points the probes there and no Service exposes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import sys
from types import FrameType
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from tidescale.contracts.loglimit import limit_logger
from tidescale.contracts.settings import ServingSettings

log = logging.getLogger("tidescale.serving")

TICK_S = 1.0
# uvicorn refreshes the Date header when its tick counter is a multiple of 10 (once a second at
# its 0.1 s tick); counting in tens keeps that refresh on every one of our ticks.
TICKS_PER_DATE = 10
COUNTER_WRAP = 864_000  # uvicorn's own wrap of the counter
STARTUP_FAILURE = 3  # uvicorn's exit status when it cannot listen
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
# The kubelet opens one connection per probe and closes it: two probes every 10-20 s.
PROBE_MAX_CONNECTIONS = 32
# Open files besides client connections: listeners, the database, trace files, clients of other services.
FD_RESERVE = 256
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
           b"content-length: 19\r\nconnection: close\r\n\r\nService Unavailable")
# Loggers that write once per connection or request, whoever sends it (see loglimit.py).
PER_CONNECTION_LOGGERS = ("uvicorn.error", "asyncio", log.name)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a connection cap and deadlines for each request head and for the
    rest of a body answered early (the class attributes are set per listener by `bounded_protocol`)."""

    header_timeout_s = 10.0
    max_connections = 1000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._answered_early = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            log.warning("%d connections open, the most this listener takes: new ones are answered 503 and closed",
                        self.max_connections)
            transport.write(REFUSAL)
            transport.close()
            return
        self._arm_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # Bytes of a request whose head is not complete yet, on a connection that was idle (kept
        # alive): the head gets its deadline from now.
        if self.conn.their_state is h11.IDLE and self._deadline is None and not self.transport.is_closing():
            self._arm_deadline()

    def handle_events(self) -> None:
        super().handle_events()
        if self._answered_early:
            if self.conn.their_state is not h11.SEND_BODY and not self.transport.is_closing():
                self.transport.close()  # the rest of the body arrived: no keep-alive after an early answer
        elif self.conn.their_state is not h11.IDLE:  # the head arrived: the deadline is met
            self._cancel_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._answered_early = True
            self._arm_deadline()

    def _arm_deadline(self) -> None:
        self._cancel_deadline()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._deadline_passed)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _deadline_passed(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()


def bounded_protocol(header_timeout_s: float, max_connections: int) -> type[BoundedH11Protocol]:
    """The protocol class for uvicorn's `http=` option with these bounds."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,),
                {"header_timeout_s": header_timeout_s, "max_connections": max_connections})


def probes_only(app: Any) -> Any:
    """An ASGI app that passes `GET /healthz` and `/readyz` to *app* and answers 404 to the rest."""
    async def probes(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in PROBE_PATHS:
            await app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 404,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"9")]})
        await send({"type": "http.response.body", "body": b"Not Found"})

    return probes


class CalmServer(uvicorn.Server):
    """uvicorn's `Server` with `main_loop` ticking every `tick_s`, a wakeup on exit signals, and the
    probes' listener (*probes*, a `Config` of the same event loop and app state) when given."""

    tick_s = TICK_S

    def __init__(self, config: uvicorn.Config, probes: uvicorn.Config | None = None) -> None:
        super().__init__(config)
        self.probes = probes
        self._probe_state = ServerState()
        self._probe_server: asyncio.Server | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[Any] | None = None) -> None:
        if self.probes is not None:
            await self._listen_for_probes(self.probes)
        await super().startup(sockets)

    async def _listen_for_probes(self, config: uvicorn.Config) -> None:
        if not config.loaded:
            config.load()

        def protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self._probe_state, app_state=self.lifespan.state, _loop=_loop)

        try:
            self._probe_server = await asyncio.get_running_loop().create_server(
                protocol, host=config.host, port=config.port, backlog=config.backlog)
        except OSError as exc:
            log.error("cannot listen for probes on %s:%s: %s", config.host, config.port, exc)
            sys.exit(STARTUP_FAILURE)

    async def shutdown(self, sockets: list[Any] | None = None) -> None:
        if self._probe_server is not None:
            self._probe_server.close()
            for connection in list(self._probe_state.connections):
                connection.shutdown()
        await super().shutdown(sockets)

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + TICKS_PER_DATE) % COUNTER_WRAP
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.tick_s)
            should_exit = await self.on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        # Called from a signal handler: wake the loop through its self-pipe, never touch it directly.
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)


def connection_room(max_connections: int) -> int:
    """The connection cap the process's open-file limit allows. The soft limit is raised toward what
    *max_connections* needs (up to the hard limit); where it cannot be, the cap is lowered to fit, with
    a warning: past the limit, accept() fails and asyncio logs each failure with a traceback."""
    need = max_connections + PROBE_MAX_CONNECTIONS + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        wanted = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
    if soft == resource.RLIM_INFINITY or soft >= need:
        return max_connections
    room = max(1, soft - PROBE_MAX_CONNECTIONS - FD_RESERVE)
    log.warning("max_connections %d needs about %d open files and the limit is %d: serving at most %d connections",
                max_connections, need, soft, room)
    return room


def build_server(app: Any, settings: ServingSettings, **options: Any) -> CalmServer:
    """The server `serve` runs: *app* on `settings.host:settings.port` within the bounds of *settings*,
    its probes on `settings.health_port` when set. *options*: more `uvicorn.Config` options."""
    common: dict[str, Any] = {"host": settings.host, "log_level": "warning", "access_log": False, "ws": "none",
                              "timeout_keep_alive": settings.keep_alive_s,
                              "h11_max_incomplete_event_size": settings.max_header_bytes, **options}
    main = uvicorn.Config(app, port=settings.port, **common,
                          http=bounded_protocol(settings.header_timeout_s, connection_room(settings.max_connections)))
    probes = None
    if settings.health_port is not None:
        probes = uvicorn.Config(probes_only(app), port=settings.health_port, **{**common, "lifespan": "off"},
                                http=bounded_protocol(settings.header_timeout_s, PROBE_MAX_CONNECTIONS))
    for name in PER_CONNECTION_LOGGERS:  # after the Configs, which (re)configure uvicorn's loggers
        limit_logger(name)
    return CalmServer(main, probes)


def serve(app: Any, settings: ServingSettings, **options: Any) -> None:
    """Run *app* (see `build_server`) in this process until a signal stops it."""
    build_server(app, settings, **options).run()
