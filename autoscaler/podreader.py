"""The fast path's I/O: which Triton pods serve a target's model, and one round of reading them.

The pods are found where the recommender already looks: the series of Triton's pending gauge that
Prometheus scrapes carry each pod's `pod` and `instance` (host:port) labels. So the fast path needs
no Kubernetes permission, only network access to Triton's metrics port, and it reads exactly the
pods Prometheus does. A pod Prometheus has not scraped yet (started in the last scrape interval)
joins at the next discovery; until then it adds capacity the recommender does not count, never load.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Protocol

import httpx

from tidescale.autoscaler.fastpath import MAX_BODY_BYTES, ExpositionError, PodCounters, pod_counters, valid_address
from tidescale.contracts import outbound
from tidescale.contracts.prometheus import InstantQueries

log = logging.getLogger(__name__)


def discover_pods(client: InstantQueries, pending_selector: str, max_pods: int) -> dict[str, str]:
    """pod -> host:port of every pod with a scraped pending gauge for the model (at most *max_pods*,
    by name; an address that is not a plain host:port is skipped). Raises PrometheusUnavailable."""
    rows = client.query(f"group by (pod, instance) ({pending_selector})")
    found: dict[str, str] = {}
    for row in rows:
        labels = row.get("metric") if isinstance(row, dict) else None
        if not isinstance(labels, dict):
            continue
        pod, address = labels.get("pod"), labels.get("instance")
        if isinstance(pod, str) and pod and isinstance(address, str) and valid_address(address):
            found[pod] = address
    return dict(sorted(found.items())[:max_pods])


class PodCounterReader(Protocol):
    """One round of reading the pods' counters: `PodReader`, or the simulator's pods."""

    def read(self, pods: Mapping[str, str], model: str) -> dict[str, PodCounters | None]: ...

    def close(self) -> None: ...


class PodReader:
    """Reads `/metrics` of many pods at once. A round ends `timeout_s` after it starts: a pod that
    has not answered by then counts as missing (its last good values stand in, and the slow path
    does not scale down), so one slow pod never delays the panic checks of any target, and every
    request of the round ends by then too (outbound.get's deadline), leaving no work to the next."""

    def __init__(self, timeout_s: float, scheme: str = "http", path: str = "/metrics", workers: int = 8,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.timeout_s, self.scheme, self.path = timeout_s, scheme, path
        self.http = outbound.client(timeout_s, transport=transport)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fastpath")

    def read_one(self, address: str, model: str, deadline: float) -> PodCounters | None:
        """The pod's counters for *model*, or None (logged at debug) when it cannot say by *deadline*
        (a time.monotonic() value)."""
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise outbound.DeadlineExceeded("the round's deadline passed before this pod's turn")
            answer = outbound.get(self.http, f"{self.scheme}://{address}{self.path}", deadline_s=left,
                                  max_bytes=MAX_BODY_BYTES)
            if answer.status != 200:
                raise ExpositionError(f"HTTP {answer.status}")
            return pod_counters(answer.content.decode("utf-8", errors="replace"), model)
        except (httpx.HTTPError, ExpositionError) as exc:
            log.debug("fast path: %s did not answer for %s: %s", address, model, exc)
            return None

    def read(self, pods: Mapping[str, str], model: str) -> dict[str, PodCounters | None]:
        """One round: pod -> counters (None for a pod that did not answer within the round)."""
        deadline = time.monotonic() + self.timeout_s
        futures = {pod: self.pool.submit(self.read_one, address, model, deadline) for pod, address in pods.items()}
        done, _ = wait(futures.values(), timeout=self.timeout_s)
        reads: dict[str, PodCounters | None] = {}
        for pod, future in futures.items():
            if future not in done:
                future.cancel()  # not started yet: never will be; running: ends at the deadline
                log.debug("fast path: %s did not answer for %s within %g s", pod, model, self.timeout_s)
            reads[pod] = future.result() if future in done else None
        return reads

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.http.close()
