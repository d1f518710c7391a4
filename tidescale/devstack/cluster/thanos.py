"""A global query layer inside the local cluster, as users run one (issue 46): prometheus-operator's
Thanos sidecar beside kube-prometheus-stack's Prometheus (`Prometheus.spec.thanos`, with the cluster's
name as an external label), another cluster's Prometheus with its own sidecar, and a Thanos Query
Deployment over both that every tidescale reader points at as at a Prometheus.

The containers run the `thanos` that `scripts/build-cluster.sh thanos` built from the pinned module
(`node/images.py` maps the image to it); the demo does not need any of it.
"""

from __future__ import annotations

from typing import Any

import yaml

from tidescale.devstack.cluster import addons
from tidescale.devstack.cluster.config import ClusterConfig
from tidescale.devstack.cluster.kubectl import deployment_available, kubectl, wait_for
from tidescale.devstack.node.kubeapi import ApiError, KubeApi

# The pinned module's version (deploy/cluster/go/thanos); the tag only names what the host runs.
THANOS_IMAGE = "quay.io/thanos/thanos:v0.42.4"
PROMETHEUS_IMAGE = "quay.io/prometheus/prometheus:v3.5.0"
GRPC_PORT = 10901  # the Store API, where prometheus-operator's sidecar serves it
QUERY_PORT = 9090  # Thanos Query's HTTP API, on Prometheus' port: its clients take it for one
SIDECAR_CONTAINER = "thanos-sidecar"  # the container prometheus-operator adds
KPS_PROMETHEUS_PATH = (f"/apis/monitoring.coreos.com/v1/namespaces/{addons.MONITORING_NS}/prometheuses/"
                       f"{addons.PROMETHEUS}")
# The headless Service prometheus-operator keeps for its Prometheus pods; with a sidecar it lists `grpc`.
KPS_STORE = f"prometheus-operated.{addons.MONITORING_NS}.svc:{GRPC_PORT}"


def _pod_is(api: KubeApi, want_sidecar: bool) -> bool:
    pod = api.get(f"/api/v1/namespaces/{addons.MONITORING_NS}/pods/{addons.PROMETHEUS_POD}")
    names = {c["name"] for c in pod["spec"]["containers"]}
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))
    return (SIDECAR_CONTAINER in names) == want_sidecar and ready and not pod["metadata"].get("deletionTimestamp")


def _waiting(api: KubeApi) -> str:
    """Where the Prometheus pod's roll stands: gone, still terminating (since when), or its containers
    not running (ErrImagePull names a missing thanos) or not ready."""
    try:
        pod = api.get(f"/api/v1/namespaces/{addons.MONITORING_NS}/pods/{addons.PROMETHEUS_POD}")
    except ApiError as exc:
        return f"no pod {addons.PROMETHEUS_POD} ({exc})"
    if pod["metadata"].get("deletionTimestamp"):
        return f"the old pod is terminating since {pod['metadata']['deletionTimestamp']}"
    return "; ".join(f"{c['name']}: " + (f"{w.get('reason')} {w.get('message', '')}".strip()
                                         if (w := c.get("state", {}).get("waiting")) else
                                         "ready" if c.get("ready") else "running, not ready")
                     for c in pod.get("status", {}).get("containerStatuses", []))


# The operator gives its Prometheus pods 600 s to stop: a roll may wait that long for the old pod (it
# stops in seconds, nearly always), and then for the new one to start.
ROLL_TIMEOUT_S = 600 + 240


def sidecar_on_kps_prometheus(api: KubeApi, cluster: str | None) -> None:
    """kube-prometheus-stack's Prometheus with the operator's Thanos sidecar and `cluster=<cluster>` as
    its external label (rules evaluated there never see it; Thanos adds it to what it answers), or
    back as it was (None). The operator rolls the pod either way; this returns once the new one is Ready."""
    spec: dict[str, Any] = ({"externalLabels": {"cluster": cluster}, "thanos": {"image": THANOS_IMAGE}}
                            if cluster is not None else {"externalLabels": None, "thanos": None})
    api.patch_merge(KPS_PROMETHEUS_PATH, {"spec": spec})
    wait_for("Prometheus " + ("with its Thanos sidecar" if cluster else "without a sidecar"),
             lambda: _pod_is(api, cluster is not None), ROLL_TIMEOUT_S, lambda: _waiting(api))


def prometheus_with_sidecar(namespace: str, name: str, cluster: str, metrics_page: str) -> list[dict[str, Any]]:
    """Another cluster's Prometheus, standing for one whose fleet has the same names as this one's: it
    scrapes *metrics_page* (text format, served from a ConfigMap) and carries `cluster=<cluster>`,
    with a sidecar serving it on the Store API behind Service *name*."""
    config = {"global": {"scrape_interval": "5s", "external_labels": {"cluster": cluster}},
              "scrape_configs": [{"job_name": name, "static_configs": [{"targets": ["localhost:8080"]}],
                                  # a file served as is has no text-format Content-Type
                                  "fallback_scrape_protocol": "PrometheusText0.0.4"}]}
    labels = {"app.kubernetes.io/name": name}
    volumes = [{"name": "config", "configMap": {"name": name}}, {"name": "data", "emptyDir": {}}]
    containers = [
        {"name": "prometheus", "image": PROMETHEUS_IMAGE,
         "args": ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus",
                  "--web.listen-address=:9090"],
         "volumeMounts": [{"name": "config", "mountPath": "/etc/prometheus"},
                          {"name": "data", "mountPath": "/prometheus"}],
         "readinessProbe": {"httpGet": {"path": "/-/ready", "port": 9090}, "periodSeconds": 2}},
        {"name": SIDECAR_CONTAINER, "image": THANOS_IMAGE,
         "args": ["sidecar", "--prometheus.url=http://localhost:9090/", f"--grpc-address=:{GRPC_PORT}",
                  "--http-address=:10902", "--tsdb.path=/prometheus", "--log.level=warn"],
         "volumeMounts": [{"name": "data", "mountPath": "/prometheus"}]},
        {"name": "page", "image": "tidescale",
         "command": ["python3", "-m", "http.server", "8080", "--directory", "/page"],
         "volumeMounts": [{"name": "config", "mountPath": "/page"}]},
    ]
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
         "data": {"prometheus.yml": yaml.safe_dump(config), "metrics": metrics_page}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"containers": containers, "volumes": volumes}}}},
        _service(namespace, name, labels, GRPC_PORT),
    ]


def query_deployment(namespace: str, endpoints: list[str], name: str = "thanos-query") -> list[dict[str, Any]]:
    """Thanos Query over *endpoints* (Store API addresses), deduplicating HA pairs on `replica`."""
    labels = {"app.kubernetes.io/name": name}
    container = {"name": "query", "image": THANOS_IMAGE,
                 "args": ["query", f"--http-address=:{QUERY_PORT}", f"--grpc-address=:{GRPC_PORT}",
                          "--query.replica-label=replica", "--log.level=warn",
                          *(f"--endpoint={e}" for e in endpoints)],
                 "readinessProbe": {"httpGet": {"path": "/-/ready", "port": QUERY_PORT}, "periodSeconds": 2}}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}},
        _service(namespace, name, labels, QUERY_PORT),
    ]


def _service(namespace: str, name: str, labels: dict[str, str], port: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": labels, "ports": [{"name": "grpc" if port == GRPC_PORT else "http", "port": port}]}}


def install(config: ClusterConfig, api: KubeApi, docs: list[dict[str, Any]]) -> None:
    """Apply *docs* and wait until each Deployment among them is available."""
    kubectl(config, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    for doc in docs:
        if doc["kind"] == "Deployment":
            ns, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
            wait_for(name, lambda ns=ns, name=name: deployment_available(api, ns, name), 180)  # type: ignore[misc]


def query_url(namespace: str, name: str = "thanos-query") -> str:
    """Thanos Query as pods in the cluster reach it."""
    return f"http://{name}.{namespace}.svc:{QUERY_PORT}"
