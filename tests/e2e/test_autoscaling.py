"""The real HPA scales real Triton pods on tidescale's recommendation, through KEDA and through
prometheus-adapter: the chart's autoscaling objects, the recommender, Prometheus from
prometheus-operator, and the external metrics API, all as users run them."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.conftest import Cluster
from tests.waiting import wait_for
from tidescale.contracts.tools import REPO_ROOT, helm
from tidescale.devstack.cluster import addons
from tidescale.devstack.cluster.serving import triton_deployment
from tidescale.devstack.fleet.loadgen import infer_body

pytestmark = pytest.mark.e2e

RELEASE, NAMESPACE, SERVING = "scale", "autoscaling", "inference"
CHART = REPO_ROOT / "deploy" / "helm" / "tidescale"
MAX_REPLICAS = 3


def values(mode: str) -> dict[str, Any]:
    # Short windows so a test run sees a scale-up and a scale-down within minutes.
    return {
        "serving": {"namespace": SERVING},
        # Triton's OTLP exporter sends no bearer token; spans come in through the NetworkPolicy instead.
        "exporter": {"settings": {"traces_require_token": False}},
        "recommender": {"intervalSeconds": 5, "tuning": {"down_delay_s": 30, "rate_window_s": 30,
                                                          "fast_window_s": 15}},
        "autoscaling": {"mode": mode, "targets": [{"deployment": "triton", "model": "resnet50", "minReplicas": 1,
                                                   "maxReplicas": MAX_REPLICAS, "capacityRps": 40}]},
    }


def run_helm(cluster: Cluster, *args: str) -> None:
    proc = subprocess.run([str(helm()), f"--kubeconfig={cluster.config.admin_kubeconfig}", *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def install(cluster: Cluster, mode: str, tmp: Any) -> None:
    path = tmp / f"values-{mode}.yaml"
    path.write_text(yaml.safe_dump(values(mode)))
    run_helm(cluster, "upgrade", "--install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
             "-f", str(path),
             "--wait", "--timeout", "180s")


@dataclass
class Load:
    """Requests at a steady rate to the Triton Service's cluster address, from the host."""

    url: str
    rps: float
    stop: threading.Event = field(default_factory=threading.Event)
    ok: int = 0
    failed: int = 0

    def run(self) -> None:
        body, workers = infer_body((16,)), 8
        threads = [threading.Thread(target=self._worker, args=(self.rps / workers, body)) for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _worker(self, rate: float, body: bytes) -> None:
        with httpx.Client(timeout=10) as client:
            nxt = time.monotonic()
            while not self.stop.is_set():
                try:
                    ok = client.post(self.url, content=body).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.ok, self.failed = self.ok + ok, self.failed + (not ok)
                nxt += 1 / rate
                self.stop.wait(max(0.0, nxt - time.monotonic()))


@pytest.fixture(scope="module")
def serving(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster.kubectl("create", "namespace", SERVING, check=False)
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(triton_deployment(
        SERVING, otlp_url=f"http://{RELEASE}-tidescale-exporter.{NAMESPACE}.svc:9105/v1/traces")))
    addons.install_keda(cluster.config, cluster.api)
    yield str(cluster.get(f"/api/v1/namespaces/{SERVING}/services/triton")["spec"]["clusterIP"])
    run_helm(cluster, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
    cluster.kubectl("delete", "namespace", SERVING, "--wait=false", check=False)


def replicas(cluster: Cluster) -> int:
    return int(cluster.get(f"/apis/apps/v1/namespaces/{SERVING}/deployments/triton")["spec"]["replicas"])


def hpa_name(cluster: Cluster) -> str:
    hpas = cluster.get(f"/apis/autoscaling/v2/namespaces/{SERVING}/horizontalpodautoscalers")["items"]
    assert len(hpas) == 1, [h["metadata"]["name"] for h in hpas]
    return str(hpas[0]["metadata"]["name"])


def external_metric(cluster: Cluster, name: str, selector: str) -> list[dict[str, Any]]:
    """`kubectl get --raw` on the external metrics API, as the HPA controller reads it."""
    raw = cluster.kubectl("get", "--raw", f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{SERVING}/{name}"
                          f"?labelSelector={selector}")
    return list(yaml.safe_load(raw).get("items", []))


def scale_up_then_down(cluster: Cluster, service_ip: str) -> tuple[int, list[str]]:
    load = Load(f"http://{service_ip}:8000/v2/models/resnet50/infer", rps=100)
    thread = threading.Thread(target=load.run)
    thread.start()
    try:
        peak = wait_for(lambda: replicas(cluster) if replicas(cluster) > 1 else 0, 240, "the HPA to scale Triton up")
    finally:
        load.stop.set()
        thread.join()
    assert load.ok > 0 and load.failed == 0
    wait_for(lambda: replicas(cluster) == 1, 300, "the HPA to scale Triton back down after the load")
    events = cluster.get(f"/api/v1/namespaces/{SERVING}/events")["items"]
    reasons = [e["message"] for e in events if e.get("reason") == "SuccessfulRescale"]
    return peak, reasons


def test_keda_mode_scales_triton_up_under_load_and_back_down(cluster: Cluster, serving: str,
                                                            tmp_path: Any) -> None:
    install(cluster, "keda", tmp_path)
    peak, events = scale_up_then_down(cluster, serving)
    assert 1 < peak <= MAX_REPLICAS
    assert any("above target" in e for e in events) and any("below target" in e for e in events), events
    [item] = external_metric(cluster, "s0-prometheus", "scaledobject.keda.sh%2Fname%3Dtriton")
    assert item["metricName"] == "s0-prometheus" and float(item["value"]) == 1.0


def test_adapter_mode_scales_triton_up_under_load_and_back_down(cluster: Cluster, serving: str,
                                                               tmp_path: Any) -> None:
    install(cluster, "adapter", tmp_path)
    addons.install_prometheus_adapter(cluster.config, cluster.api, f"{RELEASE}-tidescale-prometheus-adapter")
    addons.use_external_metrics_from(cluster.config, cluster.api, "adapter")
    try:
        assert hpa_name(cluster) == "triton"  # the chart's own HPA, KEDA's is gone with the ScaledObject
        items = wait_for(lambda: external_metric(cluster, "tidescale_desired_replicas", "deployment%3Dtriton"), 90,
                         "the recommender's metric through prometheus-adapter")
        assert float(items[0]["value"]) >= 1
        peak, _ = scale_up_then_down(cluster, serving)
        assert 1 < peak <= MAX_REPLICAS
    finally:
        addons.use_external_metrics_from(cluster.config, cluster.api, "keda")
