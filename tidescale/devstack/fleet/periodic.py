"""A function called every few seconds from a daemon thread until stopped (samplers, supervisors)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Periodic:
    """Calls *fn* every *interval* seconds; `stop()` wakes the thread at once and joins it."""

    def __init__(self, name: str, interval: float, fn: Callable[[], None]) -> None:
        self.name = name
        self.interval = interval
        self.fn = fn
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> Periodic:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.fn()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
