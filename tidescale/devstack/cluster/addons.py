"""Add-ons installed the way users install them, from the upstream modules setup built.

prometheus-operator's CRDs and its RBAC/Deployment examples are read from the pinned Go module in
Go's module cache (the same source the binary was built from), with only the namespace changed;
then kube-prometheus-stack's Prometheus and Alertmanager at their defaults, as a release named `kps`
lays them out (monitoring.yaml).
"""

from __future__ import annotations

import base64
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml

from tidescale.contracts.errors import MissingToolError, TidescaleError
from tidescale.devstack.cluster.config import ClusterConfig
from tidescale.devstack.cluster.kubectl import deployment_available, kubectl, render_manifest, wait_for
from tidescale.devstack.node.kubeapi import ApiError, KubeApi
from tidescale.devstack.tools import REPO_ROOT, SETUP_HINT

GO_MODULES = REPO_ROOT / "deploy" / "cluster" / "go"
# (component folder under GO_MODULES, upstream module) of the add-ons whose manifests are read here
PROMETHEUS_OPERATOR = ("prometheus-operator", "github.com/prometheus-operator/prometheus-operator")
KEDA = ("keda", "github.com/kedacore/keda/v2")
OPERATOR_CRDS = Path("example", "prometheus-operator-crd")  # in the prometheus-operator module
MONITORING_NS = "monitoring"


def module_dir(component: str, module: str) -> Path:
    """Where Go's module cache holds *module* at the version deploy/cluster/go/<component> pins.

    A module the cache lacks is downloaded first (that module alone, checked against the go.sum);
    the cluster build downloads it anyway.
    """
    if shutil.which("go") is None:
        raise MissingToolError(f"go is not on PATH: {SETUP_HINT}")
    cwd = GO_MODULES / component

    def cached() -> str:  # `go list` prints an empty Dir, and succeeds, for a module not downloaded
        proc = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=cwd, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    found, why = cached(), ""
    if not found:
        download = subprocess.run(["go", "mod", "download", module], cwd=cwd, capture_output=True, text=True)
        found, why = cached(), download.stderr.strip()[-300:]
    if not found or not Path(found).is_dir():
        raise TidescaleError(f"the {module} module is not in Go's module cache and `go mod download` did not "
                             f"fetch it ({why or 'no error printed'}): {SETUP_HINT}")
    return Path(found)


def _renamespace(docs: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    for doc in docs:
        if doc.get("metadata", {}).get("namespace"):
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            if "namespace" in subject:
                subject["namespace"] = namespace
    return docs


def _load_all(paths: list[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def apply(config: ClusterConfig, docs: list[dict[str, Any]], server_side: bool = False) -> None:
    args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts"] if server_side else [])
    kubectl(config, *args, stdin=yaml.safe_dump_all(docs, sort_keys=False))


def install_prometheus_operator(config: ClusterConfig, api: KubeApi) -> None:
    root = module_dir(*PROMETHEUS_OPERATOR)
    kubectl(config, "create", "namespace", MONITORING_NS, check=False)
    # kubectl reads the CRDs itself: PyYAML cannot load their `=` scalars, and they are too big for
    # client-side apply's last-applied annotation.
    crds = root / OPERATOR_CRDS
    kubectl(config, "apply", "--server-side", "--force-conflicts", "-f", str(crds))
    kubectl(config, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    rbac = root / "example" / "rbac" / "prometheus-operator"
    docs = _renamespace(_load_all(sorted(p for p in rbac.glob("*.yaml") if "service-monitor" not in p.name)),
                        MONITORING_NS)
    apply(config, docs)
    wait_for("prometheus-operator", lambda: deployment_available(api, MONITORING_NS, "prometheus-operator"), 120)


# kube-prometheus-stack at its defaults, as a release named `kps` installs it (deploy/cluster/manifests/
# monitoring.yaml): its Prometheus loads only monitors and rules labelled `release: kps`, its Alertmanager
# every AlertmanagerConfig under the operator's default matcher strategy.
KPS_RELEASE = "kps"
KPS_FULLNAME = f"{KPS_RELEASE}-kube-prometheus-stack"
PROMETHEUS = f"{KPS_FULLNAME}-prometheus"  # the Prometheus resource and kps's Service for it
ALERTMANAGER = f"{KPS_FULLNAME}-alertmanager"  # the Alertmanager resource and its Service
PROMETHEUS_POD = f"prometheus-{PROMETHEUS}-0"
ALERTMANAGER_POD = f"alertmanager-{ALERTMANAGER}-0"
ALERTMANAGER_CONFIG_SECRET = f"alertmanager-{ALERTMANAGER}"  # kps's `alertmanager.config`
MONITORING_LABELS = {"release": KPS_RELEASE}  # what a monitor or rule needs for this Prometheus to load it


def install_monitoring_stack(config: ClusterConfig, api: KubeApi) -> None:
    """kube-prometheus-stack's Prometheus and Alertmanager resources, Services, default Alertmanager
    configuration and Watchdog rule, as a release named `kps` at its defaults creates them."""
    install_prometheus_operator(config, api)
    kubectl(config, "apply", "-f", "-", stdin=render_manifest(config, "monitoring.yaml", NAMESPACE=MONITORING_NS,
                                                                KPS=KPS_RELEASE))

    def statefulset_ready(name: str) -> bool:
        sts = api.get(f"/apis/apps/v1/namespaces/{MONITORING_NS}/statefulsets/{name}")
        return int(sts.get("status", {}).get("readyReplicas") or 0) >= int(sts["spec"].get("replicas", 1))

    wait_for("Prometheus", lambda: statefulset_ready(f"prometheus-{PROMETHEUS}"), 180)
    wait_for("Alertmanager", lambda: statefulset_ready(f"alertmanager-{ALERTMANAGER}"), 180)
    wait_for("kube-state-metrics", lambda: deployment_available(api, MONITORING_NS, "kube-state-metrics"), 120)


GPU_OPERATOR_NS = "gpu-operator"
DCGM_FAULTS_SECRET = "dcgm-faults"


def dcgm_fault_token(api: KubeApi) -> str:
    """The token the simulated dcgm-exporters take for POST /faults."""
    data = api.get(f"/api/v1/namespaces/{GPU_OPERATOR_NS}/secrets/{DCGM_FAULTS_SECRET}")["data"]
    return base64.b64decode(data["token"]).decode()


def install_dcgm_exporter(config: ClusterConfig, api: KubeApi) -> None:
    """The simulated dcgm-exporter on every node, where GPU Operator puts the real one."""
    kubectl(config, "create", "namespace", GPU_OPERATOR_NS, check=False)  # the Secret goes in before the pods
    try:
        api.get(f"/api/v1/namespaces/{GPU_OPERATOR_NS}/secrets/{DCGM_FAULTS_SECRET}")
    except ApiError as exc:
        if exc.status != 404:
            raise
        api.create(f"/api/v1/namespaces/{GPU_OPERATOR_NS}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": DCGM_FAULTS_SECRET},
            "stringData": {"token": secrets.token_urlsafe(24)}})
    kubectl(config, "apply", "-f", "-", stdin=render_manifest(config, "dcgm-exporter.yaml", NAMESPACE=GPU_OPERATOR_NS))

    def on_every_node() -> bool:
        ds = api.get(f"/apis/apps/v1/namespaces/{GPU_OPERATOR_NS}/daemonsets/nvidia-dcgm-exporter").get("status", {})
        return int(ds.get("desiredNumberScheduled") or 0) == config.nodes == int(ds.get("numberReady") or 0)

    wait_for("dcgm-exporter on every node", on_every_node, 120)


KEDA_NS = "keda"
EXTERNAL_METRICS = "v1beta1.external.metrics.k8s.io"


def install_keda(config: ClusterConfig, api: KubeApi) -> None:
    """KEDA's own kustomization (config/default) from the pinned module, rendered by kubectl."""
    root = module_dir(*KEDA)
    rendered = kubectl(config, "kustomize", str(root / "config" / "default"))
    kubectl(config, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered)
    for name in ("keda-operator", "keda-metrics-apiserver", "keda-admission"):
        wait_for(name, lambda n=name: deployment_available(api, KEDA_NS, n), 180)  # type: ignore[misc]


def install_prometheus_adapter(config: ClusterConfig, api: KubeApi, configmap: str,
                               prometheus_url: str = f"http://prometheus-operated.{MONITORING_NS}.svc:9090/") -> None:
    """prometheus-adapter reading the rules the tidescale chart rendered into *configmap*, querying
    *prometheus_url* (the cluster's Prometheus, or a global query layer in front of it)."""
    kubectl(config, "apply", "-f", "-", stdin=render_manifest(
        config, "prometheus-adapter.yaml", NAMESPACE=MONITORING_NS, CONFIGMAP=configmap,
        PROMETHEUS_URL=prometheus_url))
    wait_for("prometheus-adapter", lambda: deployment_available(api, MONITORING_NS, "prometheus-adapter"), 120)


def use_external_metrics_from(config: ClusterConfig, api: KubeApi, provider: str) -> None:
    """Point the external metrics API at KEDA or prometheus-adapter: a cluster serves it from one.

    KEDA's APIService is verified with the CA its operator rotates (``kedaorg-certs``); the adapter
    serves a self-signed certificate, as the prometheus-community chart deploys it.
    """
    name, namespace = {"keda": ("keda-metrics-apiserver", KEDA_NS),
                       "adapter": ("prometheus-adapter", MONITORING_NS)}[provider]
    spec: dict[str, Any] = {"service": {"name": name, "namespace": namespace, "port": 443},
                            "group": "external.metrics.k8s.io", "version": "v1beta1",
                            "groupPriorityMinimum": 100, "versionPriority": 100}
    if provider == "keda":
        secret = api.get(f"/api/v1/namespaces/{KEDA_NS}/secrets/kedaorg-certs")
        spec |= {"caBundle": secret["data"]["ca.crt"], "insecureSkipTLSVerify": None}
    else:
        spec |= {"caBundle": None, "insecureSkipTLSVerify": True}
    path = f"/apis/apiregistration.k8s.io/v1/apiservices/{EXTERNAL_METRICS}"
    try:
        api.patch_merge(path, {"spec": spec})
    except ApiError as exc:
        if exc.status != 404:
            raise
        api.create("/apis/apiregistration.k8s.io/v1/apiservices", {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": EXTERNAL_METRICS},
            "spec": {k: v for k, v in spec.items() if v is not None}})

    def available() -> bool:
        svc = api.get(path)
        return svc["spec"]["service"]["name"] == name and any(
            c["type"] == "Available" and c["status"] == "True" for c in svc.get("status", {}).get("conditions", []))

    wait_for(f"the external metrics API from {provider}", available, 60)


REGISTRY_NS = "registry"


def install_registry(config: ClusterConfig, api: KubeApi) -> str:
    """An OCI registry in the cluster (distribution, built by setup); its address, host:port, which the
    host reaches through kube-proxy as any client in the cluster would."""
    kubectl(config, "apply", "-f", "-", stdin=render_manifest(config, "registry.yaml", NAMESPACE=REGISTRY_NS))
    wait_for("the OCI registry", lambda: deployment_available(api, REGISTRY_NS, "registry"), 120)
    address = f"{api.get(f'/api/v1/namespaces/{REGISTRY_NS}/services/registry')['spec']['clusterIP']}:5000"

    def answers() -> bool:  # through its Service: kube-proxy follows the endpoints a moment later
        try:
            return httpx.get(f"http://{address}/v2/", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for("the OCI registry's Service", answers, 60)
    return address

