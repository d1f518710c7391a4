"""The dev stack's port picks stay out of the range the kernel assigns to outgoing connections."""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator

import pytest

from tidescale.contracts.errors import UsageError
from tidescale.devstack import ports


@pytest.mark.parametrize(("ephemeral_low", "window"), [
    (32768, range(20000, 30000)),  # Linux's default: below the NodePort range too
    (49152, range(20000, 30000)),  # IANA's dynamic range
    (25000, range(15000, 25000)),
    (8000, range(1024, 8000)),
    (1500, None),  # too few ports below it: the OS picks
])
def test_the_window_sits_below_the_kernels_range_and_the_node_ports(ephemeral_low: int, window: range | None) -> None:
    assert ports.pick_window(ephemeral_low) == window


def test_picked_ports_are_outside_this_hosts_ephemeral_range_and_distinct() -> None:
    low = int(ports.EPHEMERAL_RANGE.read_text().split()[0])
    picked = ports.free_ports(50)
    assert len(set(picked)) == 50
    assert all(1024 <= port < min(low, ports.NODE_PORT_MIN) for port in picked)


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port of the window that another socket holds (listening) for the test's duration."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ports.LOOPBACK, ports.free_port()))
        s.listen()
        yield int(s.getsockname()[1])


def test_a_port_someone_holds_is_skipped(held_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    after = ports.free_port()  # free now; the next pick after the held one
    monkeypatch.setattr(ports, "_NEXT", itertools.cycle([held_port, after]))
    assert ports.free_port() == after


def test_with_no_window_the_os_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_NEXT", None)
    monkeypatch.setattr(ports, "_WINDOW", None)
    port = ports.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ports.LOOPBACK, port))  # it was free


def test_a_busy_requested_port_names_itself_and_its_user(held_port: int) -> None:
    with pytest.raises(UsageError, match=rf"port {held_port} for prometheus is busy"):
        ports.port_or_free(held_port, "prometheus")
    assert ports.port_or_free(None, "prometheus") != held_port
