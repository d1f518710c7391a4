"""The fast path's I/O: which Triton pods serve a target's model, and one round of reading them.

The pods are found where the recommender already looks: the series of Triton's pending gauge that
Prometheus scrapes carry each pod's `pod` and `instance` (host:port) labels. So the fast path needs
no Kubernetes permission, only network access to Triton's metrics port, and it reads exactly the
pods Prometheus does. A pod Prometheus has not scraped yet (started in the last scrape interval)
joins at the next discovery; until then it adds capacity the recommender does not count, never load.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import httpx

from tidescale.autoscaler.fastpath import MAX_BODY_BYTES, ExpositionError, PodCounters, pod_counters, valid_address
from tidescale.contracts.prometheus import PrometheusClient

log = logging.getLogger(__name__)


def discover_pods(client: PrometheusClient, pending_selector: str, max_pods: int) -> dict[str, str]:
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


class PodReader:
    """Reads `/metrics` of many pods at once, each within the timeout and the body limit."""

    def __init__(self, timeout_s: float, scheme: str = "http", path: str = "/metrics", workers: int = 8,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.scheme, self.path = scheme, path
        self.http = httpx.Client(timeout=timeout_s, transport=transport, follow_redirects=False)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fastpath")

    def read_one(self, address: str, model: str) -> PodCounters | None:
        """The pod's counters for *model*, or None (logged at debug) when it cannot say."""
        try:
            with self.http.stream("GET", f"{self.scheme}://{address}{self.path}") as r:
                if r.status_code != 200:
                    raise ExpositionError(f"HTTP {r.status_code}")
                body = bytearray()
                for chunk in r.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise ExpositionError(f"answer larger than {MAX_BODY_BYTES} bytes")
            return pod_counters(body.decode("utf-8", errors="replace"), model)
        except (httpx.HTTPError, ExpositionError) as exc:
            log.debug("fast path: %s did not answer for %s: %s", address, model, exc)
            return None

    def read(self, pods: Mapping[str, str], model: str) -> dict[str, PodCounters | None]:
        """One round: pod -> counters (None for a pod that did not answer)."""
        futures = {pod: self.pool.submit(self.read_one, address, model) for pod, address in pods.items()}
        return {pod: f.result() for pod, f in futures.items()}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.http.close()
