"""A clock for code that takes one: it moves only when a test (or the code, through `sleep`) moves it."""

from __future__ import annotations


class ManualClock:
    """Called, it returns `now`; `sleep` advances it instead of waiting."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
