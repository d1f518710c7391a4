"""A log that hostile traffic cannot grow without bound: at most a few lines per message a minute.

Some lines are written once per connection or per request, whoever sends it: uvicorn's "Invalid HTTP
request received." and "Exceeded concurrency limit.", asyncio's "socket.accept() out of system
resource" (written up to the listen backlog's 2,048 times per loop turn, each with a traceback,
once the process runs out of file descriptors), a refused connection, an unhandled 500. About
20,000 idle connections grew a review service's log by 49 MB in 15 s. Each such line is still
worth seeing once, with the count of those left out, so `RateLimit` lets `burst` of each key through
per `window_s` and tells the next one let through how many were dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

WINDOW_S = 60.0
BURST = 5
MAX_KEYS = 256  # message templates, not values: bounded by the code, capped anyway


@dataclass
class _Window:
    started: float
    passed: int = 1
    dropped: int = 0


class RateLimit:
    """At most `burst` events of each key per `window_s` (a fixed window per key)."""

    def __init__(self, window_s: float = WINDOW_S, burst: int = BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.burst = burst
        self.clock = clock
        self._lock = threading.Lock()
        self._windows: dict[Hashable, _Window] = {}

    def allow(self, key: Hashable) -> int | None:
        """None: drop this event. Else it may pass; the number dropped since the last one that passed."""
        now = self.clock()
        with self._lock:
            window = self._windows.get(key)
            if window is None or now - window.started >= self.window_s:
                if window is None and len(self._windows) >= MAX_KEYS:
                    self._windows.clear()
                self._windows[key] = _Window(now)
                return 0 if window is None else window.dropped
            if window.passed < self.burst:
                window.passed += 1
                return 0
            window.dropped += 1
            return None


def dropped_note(dropped: int) -> str:
    """What a line that passed says about those left out before it."""
    return f" ({dropped} more like this not logged since the last one)" if dropped else ""


class RateLimitedLog(logging.Filter):
    """A logging filter that applies a `RateLimit` to each message template of the logger it is on."""

    def __init__(self, limit: RateLimit | None = None) -> None:
        super().__init__()
        self.limit = limit or RateLimit()

    def filter(self, record: logging.LogRecord) -> bool:
        dropped = self.limit.allow((record.name, str(record.msg)[:200]))
        if dropped is None:
            return False
        if dropped:
            record.msg = f"{record.msg}{dropped_note(dropped)}"
        return True


def limit_logger(name: str) -> None:
    """Put a `RateLimitedLog` on the logger *name*, once (filters see only that logger's own records)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, RateLimitedLog) for f in logger.filters):
        logger.addFilter(RateLimitedLog())
