"""Free loopback ports, and a clear error when a requested one is taken."""

from __future__ import annotations

import socket

from tidescale.contracts.errors import UsageError

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """n distinct free ports (held open together so the OS cannot hand out one twice)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def ensure_free(port: int, what: str) -> int:
    """Return *port* if it can be bound on loopback, else a UsageError naming who wanted it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError as exc:
            raise UsageError(f"port {port} for {what} is busy ({exc.strerror}); pick another or omit it") from None
    return port


def port_or_free(port: int | None, what: str) -> int:
    return free_port() if not port else ensure_free(port, what)
