"""Open-loop load generator: real inference requests at a scenario's arrival times.

Requests are batch-1 (`/v2/models/M/infer`, JSON tensors), spread round-robin over the Ready
replicas like a Kubernetes Service, sent from an asyncio loop in a background thread so the caller
(CLI table, demo, tests) stays free. Open loop: a request is never delayed by earlier ones; when
`max_in_flight` requests are outstanding, a new arrival is dropped and counted, which keeps
memory bounded under overload.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import httpx
import numpy as np

from tidescale.contracts.errors import UsageError
from tidescale.devstack.fleet.model_repo import INPUT_NAME
from tidescale.sim.fleet import KEEPALIVE_CONNECTIONS
from tidescale.sim.samples import sample_quantiles
from tidescale.sim.traffic import Scenario

STATUS_DROPPED = -1  # max_in_flight reached: not sent
STATUS_NO_ENDPOINT = -2  # no Ready replica (a Service without endpoints)
STATUS_CONNECT_ERROR = 0  # connection refused / reset / timeout


@dataclass(frozen=True)
class RequestRecord:
    t_send: float  # seconds since the run started
    t_done: float  # clock time when the outcome was known
    latency_s: float
    status: int  # HTTP status or one of the STATUS_* codes
    model: str
    endpoint: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class LoadStats:
    """Client-side view over the last `window_s` seconds, plus run totals."""

    window_s: float
    completed_rps: float
    ok: int
    errors: int
    dropped: int
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    in_flight: int
    total_sent: int
    total_errors: int


def summarize(records: Sequence[RequestRecord], now: float, window_s: float, in_flight: int,
              total_sent: int, total_errors: int) -> LoadStats:
    """Rates and latency percentiles of the records that finished within the window (pure)."""
    recent = [r for r in records if r.t_done >= now - window_s]
    ok = [r.latency_s for r in recent if r.ok]
    dropped = sum(1 for r in recent if r.status == STATUS_DROPPED)
    errors = len(recent) - len(ok) - dropped
    p50, p95, p99 = sample_quantiles(ok, (0.5, 0.95, 0.99))
    return LoadStats(window_s, len(ok) / window_s, len(ok), errors, dropped, p50, p95, p99, in_flight,
                     total_sent, total_errors)


def normalize_mix(models: Mapping[str, float] | Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Model names and probabilities from a list (uniform) or a name→weight mapping."""
    weights = dict(models) if isinstance(models, Mapping) else {m: 1.0 for m in models}
    if not weights:
        raise UsageError("the load generator needs at least one model")
    if any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
        raise UsageError(f"model weights must be >= 0 with a positive sum, got {weights}")
    names = list(weights)
    p = np.asarray([weights[n] for n in names], dtype=float)
    return names, p / p.sum()


def request_schedule(scenario: Scenario, models: Mapping[str, float] | Sequence[str], seed: int
                     ) -> tuple[np.ndarray, list[str]]:
    """The send time and model of every request a run with *seed* sends: a function of the seed alone,
    so that a replay in the simulator (`bench closed-loop`) offers the very requests the run sent."""
    names, p = normalize_mix(models)
    arrivals = scenario.arrivals(seed)
    choices = np.random.default_rng(seed + 1).choice(len(names), size=len(arrivals), p=p)
    return arrivals, [names[int(c)] for c in choices]


def infer_body(input_dims: Sequence[int]) -> bytes:
    """A batch-1 KServe v2 JSON request for the emulated models."""
    shape = [1, *input_dims]
    data = [0.5] * int(np.prod(input_dims))
    return json.dumps({"inputs": [{"name": INPUT_NAME, "shape": shape, "datatype": "FP32", "data": data}]}).encode()


class LoadGenerator:
    """Plays one scenario against whatever replicas `endpoints()` returns at each send."""

    def __init__(self, scenario: Scenario, endpoints: Callable[[], list[str]],
                 models: Mapping[str, float] | Sequence[str] = ("resnet50",), *, seed: int = 0,
                 max_in_flight: int = 256, input_dims: Sequence[int] = (16,), timeout_s: float = 30.0,
                 max_records: int = 200_000, clock: Callable[[], float] = time.monotonic) -> None:
        if max_in_flight < 1:
            raise UsageError("max_in_flight must be >= 1")
        self.scenario = scenario
        self.endpoints = endpoints
        normalize_mix(models)  # a bad mix fails here, not in the sending thread
        self.models = models
        self.seed = seed
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self.clock = clock
        self._body = infer_body(input_dims)
        self._records: deque[RequestRecord] = deque(maxlen=max_records)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rr = itertools.count()
        self.in_flight = 0
        self.total_sent = 0
        self.total_errors = 0
        self.started_at: float | None = None
        self.error: BaseException | None = None

    # --- control ---------------------------------------------------------------------------------
    def start(self) -> LoadGenerator:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="loadgen", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sending, cancel outstanding requests and join the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 5)
            self._thread = None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the scenario has been played (and answered); True if finished."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def elapsed(self) -> float:
        return 0.0 if self.started_at is None else self.clock() - self.started_at

    # --- results ---------------------------------------------------------------------------------
    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def stats(self, window_s: float = 10.0) -> LoadStats:
        if window_s <= 0:
            raise UsageError("window must be > 0 s")
        with self._lock:
            records = list(self._records)
            in_flight, sent, errors = self.in_flight, self.total_sent, self.total_errors
        return summarize(records, self.clock(), window_s, in_flight, sent, errors)

    def _record(self, t_send: float, latency: float, status: int, model: str, endpoint: str) -> None:
        with self._lock:
            self._records.append(RequestRecord(t_send, self.clock(), latency, status, model, endpoint))
            if not 200 <= status < 300 and status != STATUS_DROPPED:
                self.total_errors += 1

    # --- the loop --------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as exc:  # surfaced through .error; the thread must not die silently
            self.error = exc

    async def _main(self) -> None:
        arrivals, models = request_schedule(self.scenario, self.models, self.seed)
        limits = httpx.Limits(max_connections=self.max_in_flight, max_keepalive_connections=KEEPALIVE_CONNECTIONS)
        tasks: set[asyncio.Task[None]] = set()
        async with httpx.AsyncClient(timeout=self.timeout_s, limits=limits) as client:
            self.started_at = self.clock()
            for t_arrival, model in zip(arrivals, models, strict=True):
                if not await self._sleep_until(float(t_arrival)):
                    break
                task = self._dispatch(client, float(t_arrival), model)
                if task is not None:
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            while tasks and not self._stop.is_set():
                await asyncio.wait(set(tasks), timeout=0.2)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _sleep_until(self, t: float) -> bool:
        """Sleep until scenario time *t*, waking often enough to honour stop(); False if stopped."""
        assert self.started_at is not None
        while not self._stop.is_set():
            delay = self.started_at + t - self.clock()
            if delay <= 0:
                return True
            await asyncio.sleep(min(delay, 0.2))
        return False

    def _dispatch(self, client: httpx.AsyncClient, t: float, model: str) -> asyncio.Task[None] | None:
        endpoints = self.endpoints()
        if not endpoints:
            self._record(t, 0.0, STATUS_NO_ENDPOINT, model, "")
            return None
        endpoint = endpoints[next(self._rr) % len(endpoints)]
        if self.in_flight >= self.max_in_flight:
            self._record(t, 0.0, STATUS_DROPPED, model, endpoint)
            return None
        with self._lock:
            self.in_flight += 1
            self.total_sent += 1
        return asyncio.create_task(self._send(client, t, model, endpoint))

    async def _send(self, client: httpx.AsyncClient, t: float, model: str, endpoint: str) -> None:
        start = self.clock()
        status = STATUS_CONNECT_ERROR
        try:
            resp = await client.post(f"{endpoint}/v2/models/{model}/infer", content=self._body,
                                     headers={"Content-Type": "application/json"})
            status = resp.status_code
        except httpx.HTTPError:
            status = STATUS_CONNECT_ERROR
        finally:
            with self._lock:
                self.in_flight -= 1
            self._record(t, self.clock() - start, status, model, endpoint)
