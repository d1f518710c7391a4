"""Traffic for the e2e tests: requests at a steady rate to a Triton Service's cluster address."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx

from tidescale.devstack.fleet.loadgen import infer_body


@dataclass
class Load:
    """Requests at a steady rate to the Triton Service's cluster address, from the host."""

    url: str
    rps: float
    # False: a new connection per request (kube-proxy picks a live endpoint every time); True: each
    # worker keeps its connection, which stays with its pod until the pod closes it.
    keep_alive: bool = True
    stop: threading.Event = field(default_factory=threading.Event)
    ok: int = 0
    failed: int = 0
    # Requests whose answer was not an HTTP response (a malformed one, or a connection closed without
    # one), retried once as a proxy would: tritonserver 2.51 sent one malformed response ("illegal
    # header line") in about 19,000 requests while pods were exiting, in one run of three.
    retried: int = 0
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        body, workers = infer_body((16,)), 8
        threads = [threading.Thread(target=self._worker, args=(self.rps / workers, body)) for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _worker(self, rate: float, body: bytes) -> None:
        limits = httpx.Limits() if self.keep_alive else httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(timeout=10, limits=limits) as client:
            nxt = time.monotonic()
            while not self.stop.is_set():
                try:
                    try:
                        resp = client.post(self.url, content=body)
                    except httpx.RemoteProtocolError:
                        self.retried += 1
                        resp = client.post(self.url, content=body)
                    ok = resp.status_code == 200
                    error = "" if ok else f"{resp.status_code} {resp.text[:120]}"
                except httpx.HTTPError as exc:
                    ok, error = False, f"{type(exc).__name__}: {exc}"[:160]
                if error and len(self.errors) < 20:
                    self.errors.append(error)
                self.ok, self.failed = self.ok + ok, self.failed + (not ok)
                nxt += 1 / rate
                self.stop.wait(max(0.0, nxt - time.monotonic()))
