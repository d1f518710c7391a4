"""Background tasks that outlive their bugs: restart with back-off, count, give up only past a limit.

One uncaught exception in a background loop (a RecursionError from a hostile Triton response was
the case that motivated this) used to stop that loop for the life of the process. Every job now
runs under `TaskSupervisor.supervise`: an exception is logged as one line, counted in
`tidescale_exporter_task_restarts_total{task}`, and the job starts again after an exponential
back-off (`backoff_s` doubling up to `max_backoff_s`). A run that lasted `stable_after_s` resets
the failure streak; `restart_limit` consecutive failures mean the job cannot recover, and the
supervisor reports itself unhealthy so liveness (/healthz) fails and Kubernetes restarts the pod.
A job that returns normally has nothing more to do and is not restarted.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from tidescale.exporters.selfmetrics import labelled_counter

log = logging.getLogger("tidescale.exporter")

Job = Callable[[], Awaitable[None]]
MAX_BACKOFF_S = 60.0
STABLE_AFTER_S = 300.0


def job_name(job: Job) -> str:
    """A short, stable task label: `StatsPoller.run`, `tail_and_expire` (never an address)."""
    qualname = getattr(job, "__qualname__", None) or getattr(job, "__name__", None) or type(job).__name__
    return str(qualname).rsplit("<locals>.", 1)[-1][:64]


def backoff(failures: int, base_s: float, max_s: float = MAX_BACKOFF_S) -> float:
    """Seconds before restart number *failures* (1, 2, …): base, 2×base, 4×base, … capped at *max_s*."""
    return float(min(max_s, base_s * 2.0 ** min(failures - 1, 32)))


class TaskSupervisor(Collector):
    """Supervises the exporter's background jobs; a collector of the restart counter."""

    def __init__(self, *, backoff_s: float = 1.0, max_backoff_s: float = MAX_BACKOFF_S, restart_limit: int = 10,
                 stable_after_s: float = STABLE_AFTER_S, clock: Callable[[], float] = time.monotonic) -> None:
        if backoff_s <= 0 or restart_limit < 1:
            raise ValueError("backoff_s must be positive and restart_limit at least 1")
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.restart_limit = restart_limit
        self.stable_after_s = stable_after_s
        self.clock = clock
        self._lock = threading.Lock()
        self.restarts: Counter[str] = Counter()
        self._down: set[str] = set()
        self._given_up: set[str] = set()

    async def supervise(self, name: str, job: Job) -> None:
        """Run *job* until it returns; restart it when it raises (cancellation is passed on)."""
        failures = 0
        while True:
            started = self.clock()
            try:
                await job()
                return
            except Exception as exc:  # the point: no exception ends a background loop
                if self.clock() - started >= self.stable_after_s:
                    failures = 0
                failures += 1
                if failures > self.restart_limit:
                    self._give_up(name, exc)
                    return
                delay = backoff(failures, self.backoff_s, self.max_backoff_s)
                log.error("background task %s failed (%s: %s); restart %d in %.1f s", name, type(exc).__name__,
                          str(exc)[:200].replace("\n", " "), failures, delay,
                          extra={"fields": {"task": name, "restarts": failures}})
                with self._lock:
                    self.restarts[name] += 1
                    self._down.add(name)
            await asyncio.sleep(delay)
            with self._lock:
                self._down.discard(name)

    def _give_up(self, name: str, exc: Exception) -> None:
        log.error("background task %s failed %d times in a row (%s: %s); giving up, liveness fails",
                  name, self.restart_limit + 1, type(exc).__name__, str(exc)[:200].replace("\n", " "),
                  extra={"fields": {"task": name}})
        with self._lock:
            self._given_up.add(name)
            self._down.add(name)

    def down(self) -> list[str]:
        """Jobs not running now: waiting to restart, or given up."""
        with self._lock:
            return sorted(self._down)

    def given_up(self) -> list[str]:
        """Jobs that cannot recover (the process should be restarted)."""
        with self._lock:
            return sorted(self._given_up)

    def collect(self) -> Iterator[CounterMetricFamily]:
        with self._lock:
            restarts: dict[tuple[str, ...], int] = {(task,): n for task, n in self.restarts.items()}
        yield labelled_counter("tidescale_exporter_task_restarts_total", ["task"], restarts)
