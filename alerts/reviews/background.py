"""Work the webhook must not wait for (profile fetches, Kubernetes Events), done by a few threads.

Alertmanager waits for the webhook's answer; an exporter that cannot answer would otherwise hold
it for `profile_timeout_s` per opened review, one after another. The queue is bounded (a flood is
dropped and recorded, never buffered without limit) and so is the number of threads.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from tidescale.contracts.redact import redact_urls

log = logging.getLogger(__name__)
T = TypeVar("T")


class BackgroundWork(Generic[T]):
    """A bounded FIFO of items, each handed to *work* by one of at most *workers* daemon threads."""

    def __init__(self, work: Callable[[T], None], *, workers: int, capacity: int, name: str) -> None:
        self.work = work
        self.workers = workers
        self.capacity = capacity
        self.name = name
        self._items: deque[T] = deque()
        self._cond = threading.Condition()
        self._pending = 0  # queued or running
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, item: T) -> bool:
        """Queue *item*; False (nothing queued) when the queue is full or closed."""
        with self._cond:
            if self._closed or len(self._items) >= self.capacity:
                return False
            self._items.append(item)
            self._pending += 1
            if len(self._threads) < min(self.workers, self._pending):
                thread = threading.Thread(target=self._run, daemon=True, name=f"{self.name}-{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
            self._cond.notify()
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._items) or self._closed)
                if not self._items:
                    return
                item = self._items.popleft()
            try:
                self.work(item)
            except Exception as exc:  # one failed item must not stop the others; its text may quote a URL
                log.error("%s: %s: %s", self.name, type(exc).__name__, redact_urls(str(exc))[:200])
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return self._pending

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is done; False when *timeout* ran out first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float) -> bool:
        """Finish what is queued (up to *timeout*), then stop the threads; later submits are refused."""
        drained = self.drain(timeout)
        with self._cond:
            self._closed = True
            self._pending -= len(self._items)
            self._items.clear()
            self._cond.notify_all()
        return drained
