"""The HPA table (tests/hpa_table.py) against the real kube-controller-manager: the project's emulator,
which the autoscaling benchmark closes its loop through, must make the controller's decisions.

The test serves the external metrics API itself, for the duration of the module: an aggregated API
server on the host, behind a selector-less Service, that answers each case's k-th read with the
case's k-th value and notes the Deployment's replicas and the time at each read. The controller
reads each HPA's metric once per sync, so read k+1 sees the decision of sync k; the emulator then
replays the same values at the same times.
"""

from __future__ import annotations

import json
import socketserver
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.e2e.conftest import Cluster
from tests.hpa_table import CASES, SYNC_S, HpaCase, replay
from tests.waiting import wait_for
from tidescale.autoscaler.hpa import spec_to_dict
from tidescale.devstack.cluster.addons import EXTERNAL_METRICS
from tidescale.devstack.node.kubeapi import KubeApi

pytestmark = [pytest.mark.e2e, pytest.mark.builds()]  # needs no background build

NAMESPACE, SERVICE = "hpa-table", "table-metrics"
GROUP_VERSION = "external.metrics.k8s.io/v1beta1"
APISERVICE = f"/apis/apiregistration.k8s.io/v1/apiservices/{EXTERNAL_METRICS}"


@dataclass
class Reads:
    """Per case: (seconds since the module started, the Deployment's spec.replicas) at each read."""

    api: KubeApi
    started: float = field(default_factory=time.monotonic)
    seen: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_value(self, case: HpaCase) -> float:
        path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{case.name}"
        replicas = int(self.api.get(path)["spec"]["replicas"])
        with self.lock:
            reads = self.seen.setdefault(case.name, [])
            reads.append((time.monotonic() - self.started, replicas))
            k = len(reads) - 1
        return case.values[min(k, len(case.values) - 1)]


def metrics_server(reads: Reads, host: str, cert: Path, key: Path) -> socketserver.ThreadingTCPServer:
    cases = {c.name: c for c in CASES}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            if url.path.rstrip("/") == f"/apis/{GROUP_VERSION}":
                self._json(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
                                 "resources": [{"name": "externalmetrics", "singularName": "", "namespaced": True,
                                                "kind": "ExternalMetricValueList", "verbs": ["get"]}]})
                return
            selector = parse_qs(url.query).get("labelSelector", [""])[0]
            case = cases.get(selector.removeprefix("deployment="))
            if len(parts) != 6 or parts[4] != NAMESPACE or case is None:
                self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                                 "message": f"no such metric: {url.path}?{url.query}"})
                return
            value = reads.next_value(case)
            self._json(200, {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION, "metadata": {},
                             "items": [{"metricName": parts[5], "metricLabels": {"deployment": case.name},
                                        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                        "value": f"{round(value * 1000)}m"}]})

        def _json(self, status: int, doc: dict[str, Any]) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    # ThreadingTCPServer, not HTTPServer: that one looks up its own name, and this host may have no DNS.
    server = socketserver.ThreadingTCPServer((host, 0), Handler)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


def deployment(case: HpaCase) -> dict[str, Any]:
    labels = {"app": case.name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": case.name, "namespace": NAMESPACE},
            "spec": {"replicas": case.initial, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                                           "containers": [{"name": "main", "image": "busybox:1.36",
                                                           "command": ["sleep", "3600"]}]}}}}


def hpa(case: HpaCase) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": case.name, "namespace": NAMESPACE},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": case.name},
                     **spec_to_dict(case.spec)}}


@pytest.fixture(scope="module")
def table_api(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reads]:
    tmp = tmp_path_factory.mktemp("table-metrics")
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", f"/CN={SERVICE}.{NAMESPACE}.svc", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    reads = Reads(KubeApi(cluster.config.admin_kubeconfig))
    server = metrics_server(reads, str(cluster.config.host_ip), cert, key)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    cluster.apply(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
         "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}},
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
         "subsets": [{"addresses": [{"ip": str(cluster.config.host_ip)}], "ports": [{"name": "https", "port": port}]}]})
    before = cluster.get(APISERVICE)["spec"] if exists(cluster, APISERVICE) else None
    serve_from(cluster, {"service": {"name": SERVICE, "namespace": NAMESPACE, "port": 443},
                         "group": "external.metrics.k8s.io", "version": "v1beta1", "insecureSkipTLSVerify": True,
                         "caBundle": None, "groupPriorityMinimum": 100, "versionPriority": 100})
    try:
        yield reads
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        if before is None:
            cluster.api.delete(APISERVICE)
        else:
            cluster.api.patch_merge(APISERVICE, {"spec": {"insecureSkipTLSVerify": None, "caBundle": None, **before}})
        server.shutdown()
        server.server_close()
        reads.api.close()


def exists(cluster: Cluster, path: str) -> bool:
    return cluster.kubectl("get", "--raw", path, check=False) != ""


def serve_from(cluster: Cluster, spec: dict[str, Any]) -> None:
    if exists(cluster, APISERVICE):
        cluster.api.patch_merge(APISERVICE, {"spec": spec})
    else:
        cluster.api.create("/apis/apiregistration.k8s.io/v1/apiservices", {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": EXTERNAL_METRICS},
            "spec": {k: v for k, v in spec.items() if v is not None}})

    def available() -> bool:
        status = cluster.get(APISERVICE).get("status", {})
        return any(c["type"] == "Available" and c["status"] == "True" for c in status.get("conditions", []))

    wait_for(available, 60, "the table's external metrics API to be Available")


# Where a behavior's period is a multiple of the sync period (the shipped scale-down: half per 30 s, synced
# every 15 s), a scale at sync k sits exactly one period before sync k+2: whether the controller counts it
# in that window depends on milliseconds between its own timestamps (taken after each read) and the next
# sync. The emulator is replayed on the reads' times, and on the reads' times with one sync a little
# earlier or later (one tie falling the other way); the controller must make one of those decisions.
TIE_SHIFT_S = 0.1


def tie_readings(times: list[float]) -> list[list[float]]:
    return [[t + shift if k == j else t for k, t in enumerate(times)]
            for j in range(len(times)) for shift in (-TIE_SHIFT_S, TIE_SHIFT_S)]


def test_the_real_hpa_makes_the_emulators_decisions(cluster: Cluster, table_api: Reads,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    cluster.apply(*[deployment(c) for c in CASES])

    def pods_up() -> bool:
        for case in CASES:
            status = cluster.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{case.name}").get("status", {})
            if status.get("replicas") != case.initial:
                return False
        return True

    wait_for(pods_up, 120, "the cases' Deployments at their initial replicas")
    cluster.apply(*[hpa(c) for c in CASES])
    longest = max(len(c.values) for c in CASES)

    def all_read() -> bool:
        with table_api.lock:
            return all(len(table_api.seen.get(c.name, [])) > len(c.values) for c in CASES)

    wait_for(all_read, (longest + 3) * SYNC_S + 60, "every case's values read by the HPA controller", interval=2)

    rows, mismatches = [], []
    for case in CASES:
        reads = table_api.seen[case.name][: len(case.values) + 1]
        times = [t - reads[0][0] for t, _ in reads[:-1]]
        real = [replicas for _, replicas in reads[1:]]
        emulated = replay(case, times)
        ties = [r for r in (replay(case, tie) for tie in tie_readings(times)) if r != emulated]
        rows.append(f"{case.name:>8}  syncs at {[round(t, 1) for t in times]}\n"
                    f"{'':>8}  values     {list(case.values)}\n"
                    f"{'':>8}  controller {real}\n{'':>8}  emulator   {emulated}\n"
                    f"{'':>8}  at ties   {ties}\n"
                    f"{'':>8}  table      {list(case.expected)}")
        if real != emulated and real not in ties:
            mismatches.append(case.name)
    with capsys.disabled():
        print("\nHPA table, kube-controller-manager against HpaEmulator:\n" + "\n".join(rows))
    assert not mismatches, "\n".join(rows)
