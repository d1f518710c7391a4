"""How every tidescale HTTP service runs: uvicorn with a housekeeping tick of one second.

uvicorn's server wakes its event loop ten times a second to refresh the `Date` header and look for
a shutdown request. On a small VM each wakeup of an otherwise idle asyncio loop cost about 0.25 ms
of CPU, so those ten were 2.5 of an idle exporter's 3.3 ms of CPU a second, paid by every exporter,
recommender and review service whether or not anything asked them anything. `CalmServer` ticks
once a second instead (the `Date` header still changes every second) and is woken at once by the
signals that stop it, so a shutdown is not one tick slower.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import FrameType
from typing import Any

import uvicorn

TICK_S = 1.0
# uvicorn refreshes the Date header when its tick counter is a multiple of 10 (once a second at
# its 0.1 s tick); counting in tens keeps that refresh on every one of our ticks.
TICKS_PER_DATE = 10
COUNTER_WRAP = 864_000  # uvicorn's own wrap of the counter


class CalmServer(uvicorn.Server):
    """uvicorn's `Server` with `main_loop` ticking every `tick_s` and a wakeup on exit signals."""

    tick_s = TICK_S

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + TICKS_PER_DATE) % COUNTER_WRAP
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.tick_s)
            should_exit = await self.on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        # Called from a signal handler: wake the loop through its self-pipe, never touch it directly.
        if self._loop is not None and self._wake is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)


def serve(app: Any, **options: Any) -> None:
    """`uvicorn.run(app, **options)` for one process without reload or workers, on `CalmServer`."""
    CalmServer(uvicorn.Config(app, **options)).run()
