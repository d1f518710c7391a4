"""Resident memory and CPU time of every process the cluster runs, read from /proc.

A component's figure covers its process and all descendants (tritonserver's Python backend stubs,
the launcher's exec'd container), so that the table in docs/benchmarks/cluster.md adds up to what
the machine carries.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from pathlib import Path

from tidescale.devstack.cluster import controlplane as cp
from tidescale.devstack.cluster.config import ClusterConfig

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                tree[ppid].append(int(entry.name))
    return tree


def _own(pid: int) -> tuple[float, float]:
    """(RSS MiB, CPU seconds) of one process."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICKS
        rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20
        return rss, cpu
    return 0.0, 0.0


def tree_usage(pid: int, tree: dict[int, list[int]]) -> tuple[float, float]:
    rss, cpu = _own(pid)
    for child in tree.get(pid, []):
        r, c = tree_usage(child, tree)
        rss, cpu = rss + r, cpu + c
    return rss, cpu


def usage(config: ClusterConfig) -> dict[str, dict[str, float]]:
    """Per daemon and per pod container (``<namespace>/<pod>/<container>``): rss_mib, cpu_s."""
    tree = _children()
    out: dict[str, dict[str, float]] = {}
    for name, pid in sorted(cp.recorded_pids(config).items()):
        # An agent's children are its pods' containers, counted below on their own.
        rss, cpu = tree_usage(pid, {} if name.startswith("node-agent") else tree)
        out[name] = {"rss_mib": round(rss, 1), "cpu_s": round(cpu, 1)}
    for pidfile in sorted(config.state_dir.glob("nodes/*/pods/*/pids/*")):
        meta = pidfile.parent.parent / "pod"
        label = meta.read_text().strip() if meta.exists() else pidfile.parent.parent.name[:8]
        with contextlib.suppress(ValueError, OSError):
            pid = int(pidfile.read_text())
            if cp.alive(pid):
                rss, cpu = tree_usage(pid, tree)
                out[f"{label}/{pidfile.name}"] = {"rss_mib": round(rss, 1), "cpu_s": round(cpu, 1)}
    return out
