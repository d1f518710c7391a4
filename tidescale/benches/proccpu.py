"""CPU time of processes and their trees, from /proc and the CPU-time clocks: what the overhead
benches charge each component, never wall-clock time."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def parse_stat(text: str) -> tuple[int, int]:
    """(ppid, CPU ticks) of one /proc/<pid>/stat: utime + stime + cutime + cstime, so a child that
    exited and was reaped still counts, in its parent."""
    fields = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), sum(int(f) for f in fields[11:15])


def process_tree(root: int, stats: Mapping[int, str]) -> dict[int, int]:
    """pid -> CPU ticks of *root* and every descendant among *stats* (pid -> stat text); empty if root is gone."""
    parsed: dict[int, tuple[int, int]] = {}
    for pid, text in stats.items():
        try:
            parsed[pid] = parse_stat(text)
        except (IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in parsed.items():
        children.setdefault(ppid, []).append(pid)
    tree: dict[int, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in tree or pid not in parsed:
            continue
        tree[pid] = parsed[pid][1]
        todo.extend(children.get(pid, ()))
    return tree


def tree_ticks(root: int, stats: Mapping[int, str]) -> int:
    """CPU ticks of *root* and every descendant; 0 if root is gone."""
    return sum(process_tree(root, stats).values())


def read_proc_stats(proc: Path = Path("/proc")) -> dict[int, str]:
    """pid -> /proc/<pid>/stat text for every process readable now."""
    out: dict[int, str] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = (entry / "stat").read_text()
            except OSError:  # exited meanwhile
                continue
    return out


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # per second, usually 100


def tree_cpu_seconds(roots: Sequence[int]) -> list[float]:
    """CPU seconds of each root's process tree, from one pass over /proc."""
    stats = read_proc_stats()
    return [tree_ticks(root, stats) / CLOCK_TICKS for root in roots]


_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds of one process (all its threads, exited ones included) from its CPU-time clock
    (`clock_getcpuclockid`, nanoseconds), where /proc counts in 10 ms ticks: a round of the exporter's
    ingest is a few dozen ticks, so ticks alone would move its figure by several µs per traced request.
    Falls back to /proc's ticks where the clock cannot be had."""
    clock = ctypes.c_int()
    if _LIBC.clock_getcpuclockid(pid, ctypes.byref(clock)) == 0:
        with contextlib.suppress(OSError):
            return time.clock_gettime(clock.value)
    [ticks] = tree_cpu_seconds([pid])
    return ticks
