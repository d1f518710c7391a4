"""What every tidescale HTTP service does with requests: who may write, how much a body may
hold, and the unexpected (a counted 500 and one log line).

A write needs the service's bearer token, compared in constant time with the token as configured
less surrounding whitespace (a Secret made from a file ends in a newline: the exporter used to
refuse every token so made, where the review service took it). A body is read only after the token
was checked, and never past its cap: a route that declares a body parameter has FastAPI read and
parse the whole body before any dependency runs, so write routes take the `Request` and call
`read_capped` after `bearer_matches` (a 200 MiB PATCH without a token used to be read whole before
its 401).

A 5xx is a defect, so it must be seen (a counter Prometheus alerts on) without flooding the logs
(one line, no traceback, no request body, a few a minute per route) and without leaking anything to
the client. A client that disconnects mid-request is not an error at all: it is dropped silently.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from threading import Lock
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from pydantic import SecretStr
from starlette.exceptions import HTTPException
from starlette.requests import Request

from tidescale.contracts import catalog
from tidescale.contracts.loglimit import RateLimit, dropped_note

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_ROUTES = 64  # route templates, not raw paths: bounded by the app itself, capped anyway


def configured_token(secret: SecretStr | None) -> bytes | None:
    """The bearer token as configured, surrounding whitespace dropped (as Alertmanager drops it from a
    credentials file); None when unset or blank."""
    token = secret.get_secret_value().strip() if secret is not None else ""
    return token.encode() if token else None


def bearer_matches(authorization: str, token: bytes | None) -> bool:
    """Whether an `Authorization` header value is `Bearer <token>` (constant time); never without a token."""
    scheme, _, presented = authorization.partition(" ")
    if token is None or scheme.lower() != "bearer" or not presented.strip():
        return False
    return hmac.compare_digest(presented.strip().encode(), token)


async def read_capped(request: Request, max_bytes: int) -> bytes:
    """The request body, or a 413 as soon as it exceeds *max_bytes* (declared or sent): never buffered past it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise HTTPException(413, detail=f"request body larger than {max_bytes} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > max_bytes:
            raise HTTPException(413, detail=f"request body larger than {max_bytes} bytes")
    return bytes(body)


class UnhandledErrors(Collector):
    """`tidescale_http_unhandled_errors_total{service, route}` for one service."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._counts: Counter[str] = Counter()
        self._lock = Lock()

    def count(self, route: str) -> None:
        with self._lock:
            if route not in self._counts and len(self._counts) >= MAX_ROUTES:
                route = "other"
            self._counts[route] += 1

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def collect(self) -> list[CounterMetricFamily]:
        fam = catalog.get("tidescale_http_unhandled_errors_total")
        out = CounterMetricFamily(fam.name.removesuffix("_total"), fam.help, labels=list(fam.labels))
        with self._lock:
            for route, n in sorted(self._counts.items()):
                out.add_metric([self.service, route], n)
        return [out]


def _route_of(scope: Scope) -> str:
    """The route template (`/api/v1/reviews/{review_id}`), never the raw path a client chose."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class ErrorBoundary:
    """ASGI middleware: an exception that escapes a handler becomes a counted 500 and one log line.

    It sits inside Starlette's ServerErrorMiddleware, which would otherwise log a full traceback
    and re-raise into the server. A `ClientDisconnect` ends the request quietly.
    """

    def __init__(self, app: ASGIApp, errors: UnhandledErrors, logger: logging.Logger) -> None:
        self.app = app
        self.errors = errors
        self.log = logger
        self.log_limit = RateLimit()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if type(exc).__name__ == "ClientDisconnect":
                return
            route = _route_of(scope)
            self.errors.count(route)
            dropped = self.log_limit.allow(route)
            if dropped is not None:
                self.log.error("unhandled %s on %s %s: %s%s", type(exc).__name__, scope.get("method", "?"), route,
                               str(exc)[:200].replace("\n", " "), dropped_note(dropped))
            if started:
                return
            body = json.dumps({"detail": "internal error (counted in tidescale_http_unhandled_errors_total)"}).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})


def install_error_boundary(app: Any, service: str, logger: logging.Logger) -> UnhandledErrors:
    """Add the boundary to a FastAPI/Starlette *app*; register the returned collector on its registry."""
    errors = UnhandledErrors(service)
    app.add_middleware(ErrorBoundary, errors=errors, logger=logger)
    return errors
