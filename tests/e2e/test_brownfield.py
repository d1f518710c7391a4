"""tidescale installed into the cluster a user already has, exactly as docs/install.md ("Next to what you
already run") says: kube-prometheus-stack at its defaults (release `kps`: this cluster's monitoring
stack), Triton in `serving` already scraped by the user's own ServiceMonitor and already scaled by the
user's own HPA, the GPU Operator's dcgm-exporter with its own ServiceMonitor (which kps does not
load), KEDA pre-installed, another team's AlertmanagerConfig and HPA, and tidescale as `gpuobs` in
`platform-obs`, installed by a CI identity bound to Roles in `platform-obs` and `serving` only.

The tests run in order on one release: the takeover of the user's HPA, Triton counted once, a review
alert through kps's Alertmanager, the NetworkPolicies, adapter -> keda, uninstall; then a ScaledObject
of the user's taken over, and an umbrella chart."""

from __future__ import annotations

import base64
import contextlib
import copy
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import yaml

from tests.e2e.conftest import KPS_VALUES, Cluster, OciChart, chart, wait_for_targets_up
from tests.e2e.load import Load
from tests.waiting import wait_for
from tidescale.autoscaler.recommend import replicas_for
from tidescale.devstack.cluster import addons
from tidescale.devstack.cluster.serving import triton_deployment
from tidescale.devstack.demo.faults import string_heavy_trace_viewer
from tidescale.devstack.demo.on_cluster import SHORT_WINDOWS
from tidescale.devstack.tools import REPO_ROOT, helm

pytestmark = pytest.mark.e2e

RELEASE, NAMESPACE, SERVING, OTHER_TEAM = "gpuobs", "platform-obs", "serving", "team-a"
FULLNAME = f"{RELEASE}-tidescale"
USER_HPA, OTHER_HPA = "triton-hpa", "batch-hpa"
MODEL, REVIEW_MODEL = "resnet50", "ctr_ranker"
INSTALLER = "ci-installer"
OFFERED_RPS = 24.0  # one replica serves it; the recommender sizes for it at capacityRps 20
TEST_SPEEDUPS: dict[str, Any] = {  # test-only: short windows, so that the story fits in minutes
    "recommender": {"settings": {"interval_s": 5,
                                 "tuning": {"down_delay_s": 30, "rate_window_s": 30, "fast_window_s": 15,
                                            "dip_hold_s": 60}}},
    "defaultRules": {"overrides": SHORT_WINDOWS},
    "monitoring": {"interval": "5s"},
}


def documented_values() -> dict[str, Any]:
    """The values block of docs/install.md's "Next to what you already run", as a user copies it."""
    text = (REPO_ROOT / "docs" / "install.md").read_text()
    match = re.search(r"<!-- brownfield-values[^>]*-->\s*```yaml\n(.*?)```", text, re.S)
    assert match, "docs/install.md lost its brownfield values block"
    values: dict[str, Any] = yaml.safe_load(match.group(1))
    return values


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
                else copy.deepcopy(value)
    return out


def hpas_on(cluster: Cluster, deployment: str) -> list[dict[str, Any]]:
    items = cluster.get(f"/apis/autoscaling/v2/namespaces/{SERVING}/horizontalpodautoscalers")["items"]
    return [h for h in items if h["spec"]["scaleTargetRef"]["name"] == deployment]


class HpaWatch:
    """Every half second, the HPAs on a Deployment: a takeover without a gap never sees none, nor two."""

    def __init__(self, cluster: Cluster, deployment: str) -> None:
        self.cluster, self.deployment = cluster, deployment
        self.seen: list[list[str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # an API hiccup is not a gap
                self.seen.append(sorted(h["metadata"]["name"] for h in hpas_on(self.cluster, self.deployment)))
            self._stop.wait(0.5)

    def __enter__(self) -> HpaWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


# --- the user's cluster ----------------------------------------------------------------------------

def installer_kubeconfig(cluster: Cluster, tmp: Path) -> Path:
    """A kubeconfig for a CI identity that may do what the chart renders in platform-obs and serving only
    (RoleBindings to one ClusterRole, as a platform team grants it), and nothing cluster-wide."""
    rules = [
        {"apiGroups": [""], "resources": ["secrets", "configmaps", "services", "serviceaccounts", "pods",
                                          "persistentvolumeclaims", "events", "endpoints"], "verbs": ["*"]},
        {"apiGroups": ["apps"], "resources": ["deployments", "deployments/scale", "daemonsets", "replicasets"],
         "verbs": ["*"]},
        {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": ["*"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["*"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["*"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["*"]},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["*"]},
        {"apiGroups": ["monitoring.coreos.com"], "resources": ["servicemonitors", "podmonitors", "prometheusrules",
                                                               "alertmanagerconfigs"], "verbs": ["*"]},
        {"apiGroups": ["keda.sh"], "resources": ["scaledobjects", "triggerauthentications"], "verbs": ["*"]},
    ]
    cluster.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": INSTALLER, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "e2e-tidescale-installer"}, "rules": rules},
        *({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": INSTALLER, "namespace": ns},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                       "name": "e2e-tidescale-installer"},
           "subjects": [{"kind": "ServiceAccount", "name": INSTALLER, "namespace": NAMESPACE}]}
          for ns in (NAMESPACE, SERVING)))
    token = cluster.api.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{INSTALLER}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 7200}})["status"]["token"]
    admin = yaml.safe_load(cluster.config.admin_kubeconfig.read_text())
    admin["users"] = [{"name": INSTALLER, "user": {"token": token}}]
    admin["contexts"] = [{"name": INSTALLER, "context": {"cluster": admin["clusters"][0]["name"], "user": INSTALLER}}]
    admin["current-context"] = INSTALLER
    path = tmp / "installer.kubeconfig"
    path.write_text(yaml.safe_dump(admin))
    path.chmod(0o600)
    return path


def user_objects() -> list[dict[str, Any]]:
    """What the user had before tidescale: their own monitor on Triton (kps loads it), the GPU Operator's
    own dcgm monitor (kps does not: no release label), their HPA on Triton and another team's HPA and
    AlertmanagerConfig."""
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "spec": {"minReplicas": 1, "maxReplicas": 4,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                                  "target": {"type": "Utilization",
                                                                             "averageUtilization": 80}}}]}}
    return [
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
         "metadata": {"name": "triton", "namespace": SERVING, "labels": addons.MONITORING_LABELS},
         "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "triton"}},
                  "endpoints": [{"port": "metrics", "interval": "5s"}]}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
         "metadata": {"name": "nvidia-dcgm-exporter", "namespace": addons.GPU_OPERATOR_NS,
                      "labels": {"app": "nvidia-dcgm-exporter"}},
         "spec": {"selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
                  "endpoints": [{"port": "gpu-metrics", "honorLabels": False}]}},
        merged(hpa, {"metadata": {"name": USER_HPA, "namespace": SERVING},
                     "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton"}}}),
        merged(hpa, {"metadata": {"name": OTHER_HPA, "namespace": SERVING},
                     "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": "batch-ranker"}}}),
        {"apiVersion": "monitoring.coreos.com/v1alpha1", "kind": "AlertmanagerConfig",
         "metadata": {"name": "team-a-oncall", "namespace": OTHER_TEAM},
         "spec": {"route": {"receiver": "team-a"}, "receivers": [{"name": "team-a"}]}},
    ]


class Brownfield:
    def __init__(self, cluster: Cluster, kubeconfig: Path, tmp: Path, oci: OciChart) -> None:
        self.cluster, self.kubeconfig, self.tmp, self.oci = cluster, kubeconfig, tmp, oci
        self.user_hpa_uid = ""
        self.alertmanager_config = ""

    def helm_as_installer(self, *args: str) -> str:
        return self.cluster.helm(*args, f"--kubeconfig={self.kubeconfig}")

    def install(self, action: str, *layers: dict[str, Any], flags: tuple[str, ...] = ()) -> None:
        path = self.tmp / f"values-{len(list(self.tmp.glob('values-*')))}.yaml"
        path.write_text(yaml.safe_dump(merged(documented_values(), TEST_SPEEDUPS, *layers)))
        # From the OCI registry, as a platform team installs a published chart.
        self.helm_as_installer(action, RELEASE, *self.oci.install_args(), *flags,
                               "--namespace", NAMESPACE, "-f", str(path), "--wait", "--timeout", "300s")

    def query(self, promql: str) -> float | None:
        found = self.cluster.prometheus("/api/v1/query?" + urlencode({"query": promql}))["data"]["result"]
        return float(found[0]["value"][1]) if found else None


@pytest.fixture(scope="module")
def brownfield(cluster: Cluster, oci_chart: OciChart, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brownfield]:
    tmp = tmp_path_factory.mktemp("brownfield")
    for ns in (NAMESPACE, SERVING, OTHER_TEAM):
        cluster.kubectl("create", "namespace", ns, check=False)
    addons.install_keda(cluster.config, cluster.api)
    addons.use_external_metrics_from(cluster.config, cluster.api, "keda")
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(triton_deployment(
        SERVING, otlp_url=f"http://{FULLNAME}-exporter.{NAMESPACE}.svc:9105/v1/traces")))
    cluster.apply(*user_objects())
    state = Brownfield(cluster, installer_kubeconfig(cluster, tmp), tmp, oci_chart)
    state.user_hpa_uid = hpas_on(cluster, "triton")[0]["metadata"]["uid"]
    config = f"/api/v1/namespaces/{addons.MONITORING_NS}/secrets/{addons.ALERTMANAGER_CONFIG_SECRET}"
    state.alertmanager_config = cluster.get(config)["data"]["alertmanager.yaml"]
    yield state
    uninstall_leftovers(cluster)
    cluster.kubectl("delete", "servicemonitor", "-n", addons.GPU_OPERATOR_NS, "nvidia-dcgm-exporter", check=False)
    cluster.kubectl("delete", "clusterrole", "e2e-tidescale-installer", check=False)
    for ns in (NAMESPACE, SERVING, OTHER_TEAM, "umbrella"):
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def uninstall_leftovers(cluster: Cluster) -> None:
    """Uninstall whatever release a failed test left (no error when there is none)."""
    for release, namespace in ((RELEASE, NAMESPACE), ("platform", "umbrella")):
        listed = cluster.helm("list", "--namespace", namespace, "--filter", f"^{release}$", "-q")
        if listed.strip():
            cluster.helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout", "120s")


# --- the tests, in order ---------------------------------------------------------------------------

def test_the_chart_names_the_hpa_it_would_fight(brownfield: Brownfield, tmp_path: Path) -> None:
    """With cluster-wide lookups (an admin's install) and no hpaName, the chart finds the user's HPA on the
    target and refuses, naming it and the value to set, instead of a second HPA (AmbiguousSelector)."""
    values = merged(documented_values(), {"clusterLookups": True, "autoscaling": {"targets": [
        {k: v for k, v in documented_values()["autoscaling"]["targets"][0].items() if k != "hpaName"}]}})
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    proc = subprocess.run([str(helm()), f"--kubeconfig={brownfield.cluster.config.admin_kubeconfig}", "template",
                           RELEASE, str(chart()), "--dry-run=server", "--namespace", NAMESPACE, "-f", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and f"HorizontalPodAutoscaler {USER_HPA}" in proc.stderr, proc.stderr
    assert f"hpaName={USER_HPA}" in proc.stderr


def test_a_namespace_scoped_installer_takes_over_the_users_hpa_without_a_gap(brownfield: Brownfield) -> None:
    """KEDA adopts the user's HPA in place (transfer-hpa-ownership): the same object throughout, never
    none and never two on the Deployment, and then it is KEDA's and reads the recommender."""
    cluster = brownfield.cluster
    with HpaWatch(cluster, "triton") as watch:
        brownfield.install("install")

        def adopted() -> dict[str, Any] | None:
            [hpa] = hpas_on(cluster, "triton")
            owners = {o["kind"] for o in hpa["metadata"].get("ownerReferences", [])}
            return hpa if "ScaledObject" in owners and hpa["spec"]["metrics"][0]["type"] == "External" else None

        hpa = wait_for(adopted, 120, "KEDA to take the user's HPA over")
    assert hpa["metadata"]["name"] == USER_HPA and hpa["metadata"]["uid"] == brownfield.user_hpa_uid
    assert watch.seen and all(names == [USER_HPA] for names in watch.seen), watch.seen


def test_triton_scraped_twice_is_counted_once(brownfield: Brownfield) -> None:
    """The user's ServiceMonitor and the chart's PodMonitor both scrape Triton: the recorded request rate
    and the replicas the recommender asks for are those of one scrape, not twice them."""
    cluster = brownfield.cluster
    ours, theirs = f"{SERVING}/{FULLNAME}-triton", "triton"
    selector = f'nv_inference_request_success{{namespace="{SERVING}", model="{MODEL}"}}'
    url = f"http://{cluster.get(f'/api/v1/namespaces/{SERVING}/services/triton')['spec']['clusterIP']}:8000" \
          f"/v2/models/{MODEL}/infer"
    load = Load(url, OFFERED_RPS)
    thread = threading.Thread(target=load.run, daemon=True)
    thread.start()
    try:
        def jobs() -> set[str]:
            found = cluster.prometheus("/api/v1/query?" + urlencode({"query": f"count by (job) ({selector})"}))
            return {r["metric"]["job"] for r in found["data"]["result"]}

        wait_for(lambda: jobs() >= {ours, theirs}, 240, lambda: f"both jobs scraping Triton (seen: {jobs()})")
        truth = f'sum(rate({selector.replace("}", f", job={chr(34)}{ours}{chr(34)}}}")}[1m]))'
        naive = f"sum(rate({selector}[1m]))"
        rule = 'sum by (namespace, model) (max by (namespace, pod, model, version, gpu_uuid) ' \
               f"(rate({selector}[1m])))"

        def settled() -> tuple[float, float, float] | None:
            values = brownfield.query(truth), brownfield.query(naive), brownfield.query(rule)
            return values if all(v and v > OFFERED_RPS * 0.5 for v in values) else None  # type: ignore[return-value]

        one, both, deduped = wait_for(settled, 240, "a steady request rate in Prometheus")
        assert both == pytest.approx(2 * one, rel=0.15)  # the duplicate is really there
        assert deduped == pytest.approx(one, rel=0.15)  # and the rules' reading counts it once
        recorded = f'namespace_model:nv_inference_request_success:rate5m{{namespace="{SERVING}", model="{MODEL}"}}'
        assert wait_for(lambda: brownfield.query(recorded), 120, "the recorded rate") < 1.4 * OFFERED_RPS

        expected = replicas_for(OFFERED_RPS, 20.0, 0.9)
        desired = f'max(tidescale_desired_replicas{{namespace="{SERVING}", deployment="triton"}})'
        wait_for(lambda: brownfield.query(desired) == expected, 300, f"the recommender to ask for {expected}")
        asked = []
        for _ in range(12):
            asked.append(brownfield.query(desired))
            time.sleep(2.5)
        assert max(a or 0 for a in asked) == expected, asked  # twice the load would ask for 4
    finally:
        load.stop.set()
        thread.join(timeout=30)


def test_a_review_alert_opens_exactly_one_review_through_kps_alertmanager(brownfield: Brownfield) -> None:
    """A string-heavy profile: the exporter labels its series with the serving namespace, the rule's
    alert carries it, and kps's Alertmanager (default OnNamespace strategy) routes it through the
    chart's AlertmanagerConfig in `serving` to the review service: one review, however often re-sent."""
    cluster = brownfield.cluster
    auth = cluster.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{FULLNAME}-auth")["data"]
    exporter = cluster.get(f"/api/v1/namespaces/{NAMESPACE}/services/{FULLNAME}-exporter")["spec"]["clusterIP"]
    resp = httpx.post(f"http://{exporter}:9105/v1/profiles", params={"model": REVIEW_MODEL, "version": "1"},
                      headers={"Authorization": f"Bearer {base64.b64decode(auth['exporter-token']).decode()}",
                               "content-type": "application/json", "x-filename": "string_heavy.trace_viewer.json"},
                      content=string_heavy_trace_viewer(0.3), timeout=30)
    resp.raise_for_status()
    reviews = cluster.get(f"/api/v1/namespaces/{NAMESPACE}/services/{FULLNAME}-reviews")["spec"]["clusterIP"]

    def opened() -> list[dict[str, Any]]:
        try:
            found = httpx.get(f"http://{reviews}:9107/api/v1/reviews", params={"model": REVIEW_MODEL}, timeout=5)
        except httpx.HTTPError:
            return []
        return list(found.json()["items"]) if found.status_code == 200 else []

    [review] = wait_for(opened, 240, "the review the op-share alert opens")
    assert (review["namespace"], review["model"], review["version"]) == (SERVING, REVIEW_MODEL, "1")
    time.sleep(40)  # Alertmanager re-sends at group_interval: still one review
    assert len(opened()) == 1


def test_network_policies_let_kps_keda_in_and_keep_other_namespaces_out(brownfield: Brownfield) -> None:
    """Enforced by kube-router: kps's Prometheus scrapes every tidescale pod (from `monitoring`), KEDA
    reads the recommender (the HPA has a current value), and a pod of another namespace is refused."""
    cluster = brownfield.cluster
    jobs = {t["labels"]["job"] for t in wait_for_targets_up(
        cluster, lambda t: t["labels"].get("namespace") == NAMESPACE, "tidescale's targets")}
    assert {"tidescale-exporter", "tidescale-reviews", "tidescale-recommender"} <= jobs, jobs
    [hpa] = hpas_on(cluster, "triton")
    wait_for(lambda: hpas_on(cluster, "triton")[0].get("status", {}).get("currentMetrics"), 120,
             "KEDA's metric on the HPA (KEDA reaching the recommender)")
    assert hpa["metadata"]["name"] == USER_HPA
    exporter = cluster.get(f"/api/v1/namespaces/{NAMESPACE}/services/{FULLNAME}-exporter")["spec"]["clusterIP"]
    assert connects_from(cluster, addons.MONITORING_NS, exporter, 9105)
    assert not connects_from(cluster, OTHER_TEAM, exporter, 9105)


def connects_from(cluster: Cluster, namespace: str, ip: str, port: int) -> bool:
    """Whether a pod in *namespace* can open a TCP connection to ip:port (its exit code says)."""
    name = f"probe-{int(time.monotonic() * 1000) % 100000}"
    script = f"import socket, sys; socket.create_connection(({ip!r}, {port}), timeout=5); sys.exit(0)"
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                   "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                            "containers": [{"name": "probe", "image": "ghcr.io/tidescale/tidescale:0.1.0",
                                            "command": ["python", "-c", script]}]}})
    try:
        def finished() -> str:
            phase = str(cluster.get(f"/api/v1/namespaces/{namespace}/pods/{name}").get("status", {}).get("phase", ""))
            return phase if phase in ("Succeeded", "Failed") else ""

        return wait_for(finished, 90, f"probe pod in {namespace}") == "Succeeded"
    finally:
        cluster.kubectl("delete", "pod", "-n", namespace, name, "--wait=false", check=False)


def test_an_upgrade_from_adapter_to_keda_takes_the_hpa_over(brownfield: Brownfield) -> None:
    """adapter -> keda: the ScaledObject names the adapter mode's HPA, so KEDA's webhook lets it take
    that HPA over instead of refusing the object; Helm then drops it from the release, and KEDA keeps one."""
    cluster = brownfield.cluster
    target = {**documented_values()["autoscaling"]["targets"][0], "hpaName": "triton"}
    # The installer may not write into prometheus-adapter's namespace: no ConfigMap there (install.md).
    brownfield.install("upgrade", {"autoscaling": {"mode": "adapter", "targets": [target]},
                                   "prometheusAdapter": {"renderValues": False}})
    wait_for(lambda: [h["metadata"]["name"] for h in hpas_on(cluster, "triton")] == ["triton"], 120,
             "the adapter mode's HPA alone")
    brownfield.install("upgrade", {"autoscaling": {"mode": "keda", "targets": [target]}})

    def kedas() -> bool:
        found = hpas_on(cluster, "triton")
        return len(found) == 1 and found[0]["metadata"]["name"] == "triton" and any(
            o["kind"] == "ScaledObject" for o in found[0]["metadata"].get("ownerReferences", []))

    wait_for(kedas, 120, "one HPA, KEDA's, on the Deployment")
    so = cluster.get(f"/apis/keda.sh/v1alpha1/namespaces/{SERVING}/scaledobjects/triton")
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in so["status"]["conditions"])


def test_uninstall_leaves_what_is_not_the_releases(brownfield: Brownfield) -> None:
    """kps's Alertmanager configuration, another team's AlertmanagerConfig and HPA stay as they were."""
    cluster = brownfield.cluster
    other = {h["metadata"]["name"]: h["metadata"]["resourceVersion"] for h in hpas_on(cluster, "batch-ranker")}
    brownfield.helm_as_installer("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "120s")
    secret = cluster.get(f"/api/v1/namespaces/{addons.MONITORING_NS}/secrets/{addons.ALERTMANAGER_CONFIG_SECRET}")
    assert secret["data"]["alertmanager.yaml"] == brownfield.alertmanager_config
    assert cluster.get(f"/apis/monitoring.coreos.com/v1alpha1/namespaces/{OTHER_TEAM}"
                       "/alertmanagerconfigs/team-a-oncall")
    assert {h["metadata"]["name"]: h["metadata"]["resourceVersion"] for h in hpas_on(cluster, "batch-ranker")} \
        == other == {OTHER_HPA: other[OTHER_HPA]}
    assert not cluster.kubectl("get", "alertmanagerconfigs,secrets", "-n", SERVING, "-o", "name",
                               "-l", f"app.kubernetes.io/instance={RELEASE}", check=False).split()


def test_a_users_scaledobject_is_adopted_in_place(brownfield: Brownfield) -> None:
    """A ScaledObject of the user's on Triton, annotated for Helm as docs/install.md says, with hpaName
    its HPA's: Helm updates it in place and KEDA keeps the same HPA."""
    cluster = brownfield.cluster
    # The HPA taken over above went with the release (run alone, this test removes the user's first).
    cluster.kubectl("delete", "hpa", "-n", SERVING, USER_HPA, "--ignore-not-found", check=False)
    cluster.apply({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                   "metadata": {"name": "triton", "namespace": SERVING},
                   "spec": {"scaleTargetRef": {"name": "triton"}, "minReplicaCount": 1, "maxReplicaCount": 4,
                            "triggers": [{"type": "cron", "metadata": {"timezone": "UTC", "start": "0 0 * * *",
                                                                       "end": "0 1 * * *", "desiredReplicas": "1"}}]}})
    [before] = wait_for(lambda: hpas_on(cluster, "triton"), 120, "KEDA's HPA for the user's ScaledObject")
    assert before["metadata"]["name"] == "keda-hpa-triton"
    cluster.kubectl("annotate", "scaledobject", "triton", "-n", SERVING, f"meta.helm.sh/release-name={RELEASE}",
                    f"meta.helm.sh/release-namespace={NAMESPACE}", "--overwrite")
    cluster.kubectl("label", "scaledobject", "triton", "-n", SERVING, "app.kubernetes.io/managed-by=Helm",
                    "--overwrite")
    target = {**documented_values()["autoscaling"]["targets"][0], "hpaName": "keda-hpa-triton"}
    with HpaWatch(cluster, "triton") as watch:
        # Helm 4 applies server-side: the fields the user's `kubectl apply` set are kubectl's until forced.
        brownfield.install("install", {"autoscaling": {"targets": [target]}}, flags=("--force-conflicts",))
        so = wait_for(lambda: (s := cluster.get(f"/apis/keda.sh/v1alpha1/namespaces/{SERVING}/scaledobjects/triton"))
                      ["spec"]["triggers"][0]["type"] == "metrics-api" and s, 60, "the chart's trigger")
    assert so["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    [after] = hpas_on(cluster, "triton")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert watch.seen and all(names == ["keda-hpa-triton"] for names in watch.seen), watch.seen
    brownfield.helm_as_installer("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "120s")


def test_an_umbrella_chart_with_tidescale_as_a_dependency_installs(brownfield: Brownfield) -> None:
    """The packaged chart as a dependency of a platform team's chart: Helm passes `global` and the
    `tidescale.enabled` condition, and the schema takes both."""
    cluster = brownfield.cluster
    parent = brownfield.tmp / "platform"
    (parent / "charts").mkdir(parents=True)
    (parent / "charts" / chart().name).write_bytes(chart().read_bytes())
    (parent / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "platform", "version": "1.0.0",
        "dependencies": [{"name": "tidescale", "version": ">=0.0.0-0", "condition": "tidescale.enabled"}]}))
    (parent / "values.yaml").write_text(yaml.safe_dump({
        "global": {"imageRegistry": "ghcr.io", "team": "ml"},
        "tidescale": merged({"enabled": True}, KPS_VALUES)}))
    cluster.kubectl("create", "namespace", "umbrella", check=False)
    cluster.helm("install", "platform", str(parent), "--namespace", "umbrella", "--wait", "--timeout", "240s")
    deployments = cluster.get("/apis/apps/v1/namespaces/umbrella/deployments")["items"]
    assert {d["metadata"]["name"] for d in deployments} == {"platform-tidescale-exporter",
                                                             "platform-tidescale-reviews"}
    assert all(d["status"].get("availableReplicas") == d["spec"]["replicas"] for d in deployments)
    cluster.helm("uninstall", "platform", "--namespace", "umbrella", "--wait", "--timeout", "120s")
