"""A tiny threaded HTTP server on loopback for the simulated exporters (dcgm, kube-state-metrics).

stdlib only: these endpoints serve one text page and a small JSON control API, so a web framework
would cost start-up time and memory for nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tidescale.devstack.ports import LOOPBACK, ensure_free, free_port

EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_BODY_BYTES = 64 * 1024

Response = tuple[int, str, bytes]  # status, content type, body
GetHandler = Callable[[], Response]
PostHandler = Callable[[dict[str, str], bytes], Response]


def text_response(text: str, content_type: str = EXPOSITION_CONTENT_TYPE) -> Response:
    return 200, content_type, text.encode()


def json_response(status: int, payload: Any) -> Response:
    return status, "application/json", json.dumps(payload).encode()


def _guarded(call: Callable[[], Response]) -> Response:
    """A handler's response, or a 500 with the error's type (never its text: it may hold request data)."""
    try:
        return call()
    except Exception as exc:
        return json_response(500, {"detail": f"internal error ({type(exc).__name__})"})


class LoopbackHttpServer:
    """Serves GET/POST routes on 127.0.0.1 from a daemon thread; `stop()` closes the socket.

    Without a *port*, on loopback, the socket is bound at once to a port the OS picks and held
    until `stop()`.
    Picking a free port now and binding it only at `start()` lost a race in CI: between the two, a
    Triton replica of the same stack took the port for one of its outgoing connections."""

    def __init__(self, name: str, port: int | None = None, host: str = LOOPBACK) -> None:
        # *host* other than loopback only inside a pod's own network namespace (the cluster's dcgm-exporter).
        self.name = name
        self.host = host
        self.get_routes: dict[str, GetHandler] = {}
        self.post_routes: dict[str, PostHandler] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        if port:
            self.port = ensure_free(port, name)
        elif host == LOOPBACK:
            self._server = self._bind(0)
            self.port = int(self._server.server_address[1])
        else:  # an address of a pod's namespace, which this process may enter only later: bound at start()
            self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> LoopbackHttpServer:
        if self._server is None:
            self._server = self._bind(self.port)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,), name=self.name, daemon=True)
        self._thread.start()
        return self

    def _bind(self, port: int) -> ThreadingHTTPServer:
        routes_get, routes_post = self.get_routes, self.post_routes

        class Handler(BaseHTTPRequestHandler):
            def _send(self, resp: Response) -> None:
                status, ctype, body = resp
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                handler = routes_get.get(self.path.split("?", 1)[0])
                if handler is None:
                    self._send(json_response(404, {"detail": f"no route {self.path}"}))
                else:
                    self._send(_guarded(handler))

            def do_POST(self) -> None:
                handler = routes_post.get(self.path.split("?", 1)[0])
                if handler is None:
                    self._send(json_response(404, {"detail": f"no route {self.path}"}))
                    return
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_BODY_BYTES:
                    self._send(json_response(413, {"detail": f"body must be 0..{MAX_BODY_BYTES} bytes"}))
                    return
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                self._send(_guarded(lambda: handler(headers, body)))

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: never log request lines (they may carry tokens in headers)

        return ThreadingHTTPServer((self.host, port), Handler)

    def stop(self) -> None:
        if self._server is not None:
            if self._thread is not None:  # shutdown() waits for serve_forever, which never ran otherwise
                self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None


class ServesHttp:
    """Address properties for an object that owns a LoopbackHttpServer as `_server`."""

    _server: LoopbackHttpServer

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def address(self) -> str:
        return self._server.address

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"
