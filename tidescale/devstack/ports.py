"""Free loopback ports for the dev stack's servers, and a clear error when a requested one is taken.

Why not let the OS pick (`bind(("127.0.0.1", 0))`): the kernel hands those out of the same range
(`net.ipv4.ip_local_port_range`, 32768-60999 by default) as the source port of every outgoing
connection. A port picked there and bound by a child process a few seconds later (Triton loads its
models before it listens) can meanwhile become some connection's source port, and the child then
fails to bind: CI failed once that way. So ports are picked below that range, where the kernel never
assigns one by itself, and also below Kubernetes' NodePort range (30000-32767); only an explicit bind
can take one there, and each pick is checked by binding it.
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from tidescale.contracts.errors import UsageError

LOOPBACK = "127.0.0.1"
NODE_PORT_MIN = 30000  # Kubernetes' default --service-node-port-range is 30000-32767
PICK_SPAN = 10000  # ports in the picking window, at most
MIN_SPAN = 1000  # a narrower window (an unusual ephemeral range) falls back to the OS's pick
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def pick_window(ephemeral_low: int) -> range | None:
    """The ports to pick from when the kernel's own picks start at *ephemeral_low*: up to
    PICK_SPAN ports under it and under the NodePort range; None when fewer than MIN_SPAN fit."""
    high = min(ephemeral_low, NODE_PORT_MIN)
    low = max(high - PICK_SPAN, 1024)
    return range(low, high) if high - low >= MIN_SPAN else None


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _cursor(window: range) -> Iterator[int]:
    """The window's ports in turn, from an offset drawn from this process' id, so that two
    processes of one run (the tests and a bench they start) walk different stretches."""
    start = os.getpid() * 7919 % len(window)
    return itertools.cycle([*window[start:], *window[:start]])


_WINDOW = pick_window(_ephemeral_low())
_NEXT = _cursor(_WINDOW) if _WINDOW is not None else None


def _bind_error(port: int) -> OSError | None:
    """Why *port* cannot be bound on loopback now, or None when it can."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError as exc:
            return exc
    return None


def free_port() -> int:
    """A loopback port that was free a moment ago, outside the range the kernel picks from."""
    if _NEXT is not None and _WINDOW is not None:
        for port in itertools.islice(_NEXT, len(_WINDOW)):
            if _bind_error(port) is None:
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # no window, or all of it busy
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """n distinct free ports (the cursor never repeats a port within a window's length)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def ensure_free(port: int, what: str) -> int:
    """Return *port* if it can be bound on loopback, else a UsageError naming who wanted it."""
    exc = _bind_error(port)
    if exc is not None:
        raise UsageError(f"port {port} for {what} is busy ({exc.strerror}); pick another or omit it")
    return port


def port_or_free(port: int | None, what: str) -> int:
    return free_port() if not port else ensure_free(port, what)
