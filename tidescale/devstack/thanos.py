"""A real Thanos query layer for the many-clusters tests: a sidecar beside each Prometheus and one
Thanos Query over them, built from the pinned Go module (`scripts/build-cluster.sh thanos`).

Each Prometheus stands for one cluster's (its `cluster` external label) or one replica of an HA pair
(its `replica` external label, which Thanos Query deduplicates), as users lay out a global view.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from tidescale.contracts.errors import MissingToolError, TidescaleError
from tidescale.devstack import tools
from tidescale.devstack.ports import LOOPBACK, free_port
from tidescale.devstack.procs import ManagedProcess
from tidescale.devstack.promstack import PrometheusServer

THANOS_HINT = "run `bash scripts/build-cluster.sh thanos` from the repository root (the test command does)"


def thanos_binary() -> Path:
    try:
        return tools.find_binary("thanos")
    except MissingToolError as exc:
        raise MissingToolError(f"thanos is not built: {THANOS_HINT}") from exc


@contextlib.contextmanager
def stopped_on_error(proc: ManagedProcess) -> Iterator[None]:
    """A process that never got ready is stopped before the error goes up: its caller holds no
    handle to it yet, so nothing else would."""
    try:
        yield
    except BaseException:
        proc.stop()
        raise


class _ThanosProcess:
    """One `thanos <component>` on loopback ports: started with its own flags, ready at `/-/ready`."""

    component = ""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.grpc_port, self.http_port = free_port(), free_port()
        self.proc: ManagedProcess | None = None

    @property
    def grpc_address(self) -> str:
        return f"{LOOPBACK}:{self.grpc_port}"

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    def _launch(self, flags: Sequence[str], timeout: float) -> ManagedProcess:
        """Start it and wait until it is ready; a process that never gets ready is stopped."""
        argv = [str(thanos_binary()), self.component, f"--http-address={LOOPBACK}:{self.http_port}",
                f"--grpc-address={self.grpc_address}", "--log.level=warn", *flags]
        name = f"thanos-{self.component}"
        self.proc = ManagedProcess(name, argv, self.workdir / f"{name}.log").start()
        with stopped_on_error(self.proc):
            self.proc.wait_http(f"{self.url}/-/ready", timeout=timeout)
        return self.proc

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


class ThanosSidecar(_ThanosProcess):
    """`thanos sidecar` beside one Prometheus: serves its series (and its external labels) over the
    Store API, as prometheus-operator's `Prometheus.spec.thanos` runs it."""

    component = "sidecar"

    def __init__(self, prometheus: PrometheusServer, workdir: Path) -> None:
        if not prometheus.external_labels:
            raise TidescaleError("a Thanos sidecar needs a Prometheus with external labels")
        super().__init__(workdir)
        self.prometheus = prometheus

    def start(self, timeout: float = 30.0) -> ThanosSidecar:
        self._launch([f"--prometheus.url={self.prometheus.url}", f"--tsdb.path={self.prometheus.workdir / 'data'}"],
                     timeout)
        return self


class ThanosQuery(_ThanosProcess):
    """`thanos query` over the sidecars' Store APIs, deduplicating on *replica_labels*; it answers the
    Prometheus HTTP API, so every client of tidescale's points at it as at a Prometheus."""

    component = "query"

    def __init__(self, endpoints: Sequence[str], workdir: Path, replica_labels: Sequence[str] = ("replica",)) -> None:
        super().__init__(workdir)
        self.endpoints, self.replica_labels = list(endpoints), list(replica_labels)

    def start(self, timeout: float = 60.0) -> ThanosQuery:
        proc = self._launch([*(f"--endpoint={e}" for e in self.endpoints),
                             *(f"--query.replica-label={label}" for label in self.replica_labels)], timeout)
        with stopped_on_error(proc):
            self._wait_for_endpoints(timeout)
        return self

    def _wait_for_endpoints(self, timeout: float) -> None:
        """Until every endpoint is connected: Query answers before it has found its stores."""
        deadline, seen = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            seen = len(self.stores())
            if seen >= len(self.endpoints):
                return
            time.sleep(0.5)
        raise TidescaleError(f"thanos query found {seen} of {len(self.endpoints)} stores after {timeout:.0f}s")

    def stores(self) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/api/v1/stores", timeout=10)
        r.raise_for_status()
        return [s for group in (r.json().get("data") or {}).values() for s in group or []
                if not s.get("lastError")]

    def query(self, expr: str, at: float | None = None, dedup: bool = True) -> list[dict[str, Any]]:
        """An instant query; *dedup* False shows every replica of an HA pair."""
        params: dict[str, Any] = {"query": expr, "dedup": str(dedup).lower()}
        if at is not None:
            params["time"] = at
        r = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=30)
        r.raise_for_status()
        return list(r.json()["data"]["result"])
