"""The soak's watcher, a process of its own: it probes `/healthz` as the kubelet does and reads the
service process' RSS, open files and CPU from /proc, until its stdin closes; then it prints what it saw
as JSON (times in seconds since *t0*, a time.monotonic() value of the parent: the same clock).

Its own process, so that the load generator's event loop (which opens a thousand connections at a
time) never delays a probe, or the reading of its clock: the latency is the service's, as a kubelet
on the node would see it. Like the kubelet, each probe is a new connection, closed after the answer.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def read_process(pid: int, proc: Path = Path("/proc")) -> tuple[int, int, float]:
    """(RSS bytes, open file descriptors, CPU seconds: user + system) of *pid*."""
    rss = 0
    for line in (proc / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
            break
    fds = len(os.listdir(proc / str(pid) / "fd"))
    fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return rss, fds, cpu


def probe(host: str, port: int, timeout_s: float) -> tuple[float, bool, str]:
    """One `GET /healthz` on a new connection: (seconds, answered 200, "200" or what went wrong)."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", "/healthz", headers={"User-Agent": "kube-probe/1.34", "Connection": "close"})
        response = conn.getresponse()
        response.read()
        detail = str(response.status)
        ok = response.status == 200
    except TimeoutError:
        return timeout_s, False, "timeout"
    except (OSError, http.client.HTTPException) as exc:
        detail, ok = type(exc).__name__, False
    finally:
        conn.close()
    return time.perf_counter() - start, ok, detail


def watch(pid: int, host: str, port: int, t0: float, probe_every_s: float, sample_every_s: float,
          probe_timeout_s: float, stop: threading.Event) -> dict[str, Any]:
    probes: list[list[Any]] = []
    samples: list[list[Any]] = []

    def probing() -> None:
        tick = time.monotonic()
        while not stop.is_set():
            at = time.monotonic() - t0
            latency, ok, detail = probe(host, port, probe_timeout_s)
            probes.append([round(at, 3), round(latency, 6), ok, detail])
            tick += probe_every_s
            stop.wait(max(0.0, tick - time.monotonic()))

    def sampling() -> None:
        tick = time.monotonic()
        while not stop.is_set():
            try:
                rss, fds, cpu = read_process(pid)
            except (OSError, ValueError, IndexError):
                return  # the process is gone
            samples.append([round(time.monotonic() - t0, 3), rss, fds, cpu])
            tick += sample_every_s
            stop.wait(max(0.0, tick - time.monotonic()))

    threads = [threading.Thread(target=f, daemon=True) for f in (probing, sampling)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"probes": probes, "samples": samples}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--t0", type=float, required=True)
    parser.add_argument("--probe-every", type=float, default=0.5)
    parser.add_argument("--sample-every", type=float, default=2.0)
    parser.add_argument("--probe-timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    stop = threading.Event()

    def until_stdin_closes() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    result = watch(args.pid, args.host, args.port, args.t0, args.probe_every, args.sample_every,
                   args.probe_timeout, stop)
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":  # pragma: no cover
    main()
