"""The one polling helper the tests share: wait for a condition, fail with what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float, what: str | Callable[[], str] = "the condition",
             interval: float = 0.5) -> T:
    """Call *check* every *interval* seconds until it returns something truthy, and return that.

    *what* may be a function, called on a timeout, so that the failure shows what was seen last."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)
