"""Many clusters behind a real Thanos Query, in the cluster (issue 46): the real HPA, through KEDA and
through prometheus-adapter, scales the local Triton Deployment on its own cluster's recommendation
while the query layer also holds another cluster's, for a Deployment of the same name and namespace.

kube-prometheus-stack's Prometheus gets prometheus-operator's Thanos sidecar (`Prometheus.spec.thanos`)
and `cluster=west` as its external label; `east` is a second Prometheus with its own sidecar, holding
a recommendation of EAST_DESIRED replicas for the same `<SERVING>/triton`. The recommender, KEDA's
prometheus trigger and prometheus-adapter all read Thanos Query, with `autoscaling.cluster: west`.
Were a matcher missing, the HPA would read east's higher figure (or both) and scale to it.

This module changes the cluster's Prometheus (its pod is rolled twice), so it runs last (file order)
and puts it back as it was.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.conftest import ADDONS_BUILD, KEDA_BUILD, KPS_VALUES, THANOS_BUILD, Cluster, chart
from tests.waiting import wait_for
from tidescale.contracts.errors import TidescaleError
from tidescale.devstack.cluster import addons, thanos
from tidescale.devstack.cluster.serving import triton_deployment
from tidescale.devstack.node.kubeapi import ApiError

# The first test's setup rolls kps's Prometheus, which may wait out the operator's 600 s grace for the
# old pod (thanos.ROLL_TIMEOUT_S): more than pytest-timeout's default for a whole test.
pytestmark = [pytest.mark.e2e, pytest.mark.builds(KEDA_BUILD, ADDONS_BUILD, THANOS_BUILD), pytest.mark.timeout(1200)]

RELEASE, NAMESPACE, SERVING = "west", "global-view", "fleet"
EAST_DESIRED = 3  # east's recommendation; the target's maxReplicas allows it
MAX_REPLICAS = 3
SELECTOR = f'namespace="{SERVING}",deployment="triton"'
EAST_PAGE = ("# TYPE tidescale_desired_replicas gauge\n"
             f"tidescale_desired_replicas{{{SELECTOR}}} {EAST_DESIRED}\n")
HOLD_S = 45  # three HPA syncs and KEDA polls: long enough for a wrong reading to move the Deployment


def values(mode: str, query_url: str) -> dict[str, Any]:
    return {
        "serving": {"namespace": SERVING},
        "recommender": {"prometheusUrl": query_url, "settings": {"interval_s": 5}},
        "autoscaling": {"mode": mode, "cluster": "west", "keda": {"source": "prometheus"},
                        "targets": [{"deployment": "triton", "model": "resnet50", "minReplicas": 1,
                                     "maxReplicas": MAX_REPLICAS, "capacityRps": 40}]},
        **KPS_VALUES,
    }


def install(cluster: Cluster, mode: str, query_url: str, tmp: Any) -> None:
    path = tmp / f"values-{mode}.yaml"
    path.write_text(yaml.safe_dump(values(mode, query_url)))
    # keda mode: --wait holds until KEDA's first query of the series through the layer works
    # (ignoreNullValues false); 180 s ran out once in a full suite (stop 86), the module alone takes 98 s.
    cluster.helm("upgrade", "--install", RELEASE, str(chart()), "--namespace", NAMESPACE, "-f", str(path),
                 "--wait", "--timeout", "300s")


class Layer:
    """Thanos Query as the test (on the host) asks it, at its pod's address."""

    def __init__(self, cluster: Cluster, url: str) -> None:
        self.cluster, self.url = cluster, url

    def query(self, expr: str) -> list[dict[str, Any]]:
        [pod] = self.cluster.pods(NAMESPACE, "app.kubernetes.io/name=thanos-query")
        r = httpx.get(f"http://{pod['status']['podIP']}:{thanos.QUERY_PORT}/api/v1/query",
                      params={"query": expr}, timeout=30)
        r.raise_for_status()
        return list(r.json()["data"]["result"])

    def desired_by_cluster(self) -> dict[str, float]:
        return {s["metric"].get("cluster", ""): float(s["value"][1])
                for s in self.query(f"tidescale_desired_replicas{{{SELECTOR}}}")}


@pytest.fixture(scope="module")
def layer(cluster: Cluster) -> Iterator[Layer]:
    addons.install_keda(cluster.config, cluster.api)
    for ns in (NAMESPACE, SERVING):
        cluster.kubectl("create", "namespace", ns, check=False)
    thanos.sidecar_on_kps_prometheus(cluster.api, "west")
    try:
        thanos.install(cluster.config, cluster.api, [
            *thanos.prometheus_with_sidecar(NAMESPACE, "east", "east", EAST_PAGE),
            *thanos.query_deployment(NAMESPACE, [thanos.KPS_STORE, f"east.{NAMESPACE}.svc:{thanos.GRPC_PORT}"])])
        cluster.apply(*triton_deployment(
            SERVING, otlp_url=f"http://{RELEASE}-tidescale-exporter.{NAMESPACE}.svc:9105/v1/traces"))
        yield Layer(cluster, thanos.query_url(NAMESPACE))
    finally:
        cluster.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
        for ns in (SERVING, NAMESPACE):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        thanos.sidecar_on_kps_prometheus(cluster.api, None)


def hpa(cluster: Cluster) -> dict[str, Any]:
    return cluster.get(f"/apis/autoscaling/v2/namespaces/{SERVING}/horizontalpodautoscalers/triton")


def quantity(value: str) -> float:
    """A Kubernetes quantity as the HPA writes a metric's value ("1", "1500m")."""
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def metric_read(cluster: Cluster) -> float | None:
    """The value the HPA last read for its one External metric (None before its first read)."""
    try:
        current = hpa(cluster).get("status", {}).get("currentMetrics") or []
    except ApiError:  # not created yet
        return None
    for m in current:
        got = (m.get("external") or {}).get("current") or {}
        raw = got.get("averageValue") or got.get("value")
        if raw is not None:
            return quantity(str(raw))
    return None


def both_clusters(layer: Layer) -> dict[str, float]:
    """Both clusters' recommendations through the layer, once each is there: west's recommender has
    read its Triton pod through Thanos Query and published, and east's Prometheus has scraped its page."""
    def seen() -> dict[str, float] | None:
        found = layer.desired_by_cluster()
        return found if set(found) >= {"west", "east"} else None

    found = wait_for(seen, 300, lambda: f"both clusters' recommendations through Thanos Query: {seen()}")
    assert found["east"] == EAST_DESIRED and found["west"] < EAST_DESIRED, found
    return found


def held_at(cluster: Cluster, want: float) -> list[tuple[int, int, float | None]]:
    """(the Deployment's replicas, the HPA's desired, the metric it read) every 3 s for HOLD_S."""
    samples, deadline = [], time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        dep = cluster.get(f"/apis/apps/v1/namespaces/{SERVING}/deployments/triton")
        samples.append((int(dep["spec"]["replicas"]), int(hpa(cluster).get("status", {}).get("desiredReplicas", 0)),
                        metric_read(cluster)))
        time.sleep(3)
    assert all(s == (want, want, want) for s in samples), f"wanted {want} throughout: {samples}"
    return samples


def test_keda_scales_on_its_own_clusters_recommendation_through_thanos_query(
        cluster: Cluster, layer: Layer, tmp_path: Any) -> None:
    install(cluster, "keda", layer.url, tmp_path)
    west = both_clusters(layer)["west"]
    # The recommender decided on what it read through the layer (not a hold for data it could not find).
    decided = wait_for(lambda: [s["metric"]["reason"] for s in layer.query(
        f'tidescale_recommender_decision{{cluster="west",{SELECTOR}}} == 1')
        if s["metric"]["reason"] != "hold_missing_data"], 180, "a decision of west's recommender on its data")
    assert decided
    wait_for(lambda: metric_read(cluster) is not None, 180, "the HPA's first read of KEDA's prometheus trigger")
    held_at(cluster, west)
    # What the rules recorded in west's Prometheus comes back through the layer as west's alone.
    recorded = layer.query(f'namespace_model_pod:nv_inference_request_duration_us:rate1m{{namespace="{SERVING}"}}')
    assert recorded and {s["metric"].get("cluster") for s in recorded} == {"west"}, recorded


def test_prometheus_adapter_serves_its_own_clusters_recommendation_through_thanos_query(
        cluster: Cluster, layer: Layer, tmp_path: Any) -> None:
    # keda -> adapter through mode none, as docs/install.md says (KEDA deletes its ScaledObject's HPA).
    install(cluster, "none", layer.url, tmp_path)
    wait_for(lambda: not cluster.get(f"/apis/autoscaling/v2/namespaces/{SERVING}/horizontalpodautoscalers")["items"],
             60, "KEDA's HPA gone with its ScaledObject")
    install(cluster, "adapter", layer.url, tmp_path)
    addons.install_prometheus_adapter(cluster.config, cluster.api, f"{RELEASE}-tidescale-prometheus-adapter",
                                      prometheus_url=f"{layer.url}/")
    addons.use_external_metrics_from(cluster.config, cluster.api, "adapter")
    try:
        west = both_clusters(layer)["west"]

        def served(selector: str) -> list[float]:
            path = (f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{SERVING}/tidescale_desired_replicas"
                    f"?labelSelector={selector}")
            try:
                items = yaml.safe_load(cluster.kubectl("get", "--raw", path))["items"]
            except TidescaleError:  # NotFound until the (rolled) adapter has listed the series
                return []
            return [quantity(str(i["value"])) for i in items]

        # As the HPA asks (its selector carries the cluster): west's figure alone.
        assert wait_for(lambda: served("deployment%3Dtriton,cluster%3Dwest"), 120,
                        "west's recommendation from prometheus-adapter through Thanos Query") == [west]
        # Without it the adapter's max over the layer is east's: the matcher is what keeps them apart.
        assert served("deployment%3Dtriton") == [EAST_DESIRED]
        wait_for(lambda: metric_read(cluster) is not None, 180, "the adapter HPA's first read")
        held_at(cluster, west)
    finally:
        addons.use_external_metrics_from(cluster.config, cluster.api, "keda")
        addons.install_prometheus_adapter(cluster.config, cluster.api, f"{RELEASE}-tidescale-prometheus-adapter")
