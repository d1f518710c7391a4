"""uvicorn with bounds on slow and idle clients.

uvicorn bounds an idle keep-alive connection (`timeout_keep_alive`) and the size of an
incomplete request head (`h11_max_incomplete_event_size`), but not the *time* a client may take
to send its headers: 50 connections sending a byte now and then stayed open for as long as they
liked. `HeaderTimeoutH11Protocol` closes a connection whose request head is not complete
`header_timeout_s` after the connection opened, or after the first bytes of a later request on it
arrived; the body is not covered (the OTLP route reads it with a size cap; a slow body holds one
task, not the loop). Between requests, an idle keep-alive connection is uvicorn's to close, after
`timeout_keep_alive`: a deadline counted from the previous response instead would close every
connection idle that long, and a client posting on a timer of about that period (Triton's OTLP
exporter posts every 5 s) would now and then send on a connection the server is closing, and lose
that post.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a deadline for each request head."""

    header_timeout_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # Bytes of a request whose head is not complete yet, on a connection that was idle (kept
        # alive): the head gets its deadline from now.
        if self.conn.their_state is h11.IDLE and self._head_deadline is None and not self.transport.is_closing():
            self._arm_head_deadline()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # the head arrived: the deadline is met
            self._cancel_head_deadline()

    def _arm_head_deadline(self) -> None:
        self._cancel_head_deadline()
        self._head_deadline = self.loop.call_later(self.header_timeout_s, self._head_too_slow)

    def _cancel_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def protocol_with_header_timeout(seconds: float) -> type[HeaderTimeoutH11Protocol]:
    """The protocol class for uvicorn's `http=` option with a header deadline of *seconds*."""
    return type("HeaderTimeoutH11Protocol", (HeaderTimeoutH11Protocol,), {"header_timeout_s": seconds})
