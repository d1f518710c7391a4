"""`helm install` of deploy/helm/tidescale into the local cluster, as users install it next to
prometheus-operator, under a release name and namespace other than `tidescale`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.conftest import KEDA_BUILD, Cluster, chart, wait_for_targets_up
from tests.hostile import DIGIT_FIRST_RELEASE, LONGEST_RELEASE
from tests.waiting import wait_for
from tidescale.devstack.cluster import addons

pytestmark = [pytest.mark.e2e, pytest.mark.builds()]  # needs no background build

RELEASE, NAMESPACE, SERVING = "obs", "observability", "e2e-serving"
MODEL_DEPLOYMENT = "e2e-model-server"
REVIEW_ALERT = {"alertname": "TritonModelReviewRequired", "severity": "info", "namespace": SERVING,
                "model": "e2e-review-model", "version": "3", "reason": "string_ops"}
KPS = "monitoring.additionalLabels.release=" + addons.KPS_RELEASE  # kube-prometheus-stack at its defaults


@pytest.fixture(scope="module")
def release(cluster: Cluster) -> Iterator[str]:
    # The route to the review service as an AlertmanagerConfig in the serving namespace (auto: the
    # operator serves the API), as docs/install.md has kube-prometheus-stack users install it. The serving
    # namespace holds the model's Deployment: the review service may create Events there.
    cluster.kubectl("create", "namespace", SERVING, check=False)
    cluster.helm("install", RELEASE, str(chart()), "--namespace", NAMESPACE, "--create-namespace", "--wait",
                 "--set", KPS, "--set", f"serving.namespace={SERVING}",
                 "--set", f"reviews.kubeEvents.modelDeployments.{REVIEW_ALERT['model']}={MODEL_DEPLOYMENT}",
                 "--timeout", "240s")
    yield RELEASE
    if installed(cluster):  # the last test uninstalls it itself
        cluster.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "120s")
    cluster.kubectl("delete", "namespace", SERVING, "--wait=false", check=False)


def installed(cluster: Cluster) -> bool:
    return bool(cluster.helm("list", "--namespace", NAMESPACE, "--filter", f"^{RELEASE}$", "-q").strip())


def get_json(url: str) -> Any:
    """None while the server is not answering (yet)."""
    try:
        resp = httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return None
    return resp.json() if resp.status_code == 200 else None


def test_the_release_becomes_ready(cluster: Cluster, release: str) -> None:
    deployments = cluster.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments")["items"]
    assert {d["metadata"]["name"] for d in deployments} == {f"{release}-tidescale-exporter",
                                                             f"{release}-tidescale-reviews"}
    for d in deployments:
        assert d["status"].get("availableReplicas") == d["spec"]["replicas"], d["metadata"]["name"]


def test_every_target_the_operator_made_from_the_chart_is_up(cluster: Cluster, release: str) -> None:
    # Scrape pools are named <kind>/<monitor's namespace>/<monitor>/<endpoint>.
    targets = wait_for_targets_up(cluster, lambda t: t["scrapePool"].split("/")[1] == NAMESPACE,
                                  "the chart's scrape targets to be up")
    jobs = {t["labels"]["job"] for t in targets}
    assert {"tidescale-exporter", "tidescale-reviews"} <= jobs, jobs  # no targets: no recommender
    # The chart's dcgm-exporter monitor finds the GPU Operator's layout: one target per node.
    dcgm = [t for t in targets if t["labels"].get("namespace") == "gpu-operator"]
    assert len(dcgm) == cluster.config.nodes, [t["scrapePool"] for t in targets]


def test_the_chart_rules_are_loaded(cluster: Cluster, release: str) -> None:
    def groups() -> list[str]:
        data = cluster.prometheus("/api/v1/rules")["data"]["groups"]
        return [g["name"] for g in data if NAMESPACE in g.get("file", "")]

    assert wait_for(groups, 90, "the chart's PrometheusRules in Prometheus")




def test_alertmanager_delivers_a_review_alert_to_the_review_service_with_the_charts_token(
        cluster: Cluster, release: str) -> None:
    """kube-prometheus-stack's Alertmanager at its defaults: the operator adds namespace="<its namespace>" to
    the AlertmanagerConfig's route (OnNamespace), which the chart put in the serving namespace that
    review alerts carry."""
    alertmanager = cluster.alertmanager_url()
    reviews = cluster.get(f"/api/v1/namespaces/{NAMESPACE}/services/{release}-tidescale-reviews")["spec"]
    reviews_url = f"http://{reviews['clusterIP']}:{reviews['ports'][0]['port']}/api/v1/reviews"

    def route_loaded() -> bool:
        status = get_json(f"{alertmanager}/api/v2/status")
        return bool(status) and f"{SERVING}/{release}-tidescale-reviews/model-reviews" in status["config"]["original"]

    # prometheus-operator turns the chart's AlertmanagerConfig (and the token copied beside it) into
    # Alertmanager's configuration; the config reloader then applies it.
    wait_for(route_loaded, 180, "the chart's AlertmanagerConfig in Alertmanager's configuration")
    alert = {"labels": REVIEW_ALERT, "annotations": {"summary": "string ops take 30 % of op time"}}
    httpx.post(f"{alertmanager}/api/v2/alerts", json=[alert], timeout=10).raise_for_status()

    def opened() -> list[dict[str, Any]]:
        found = get_json(f"{reviews_url}?model={REVIEW_ALERT['model']}")
        return list(found["items"]) if found else []

    # The webhook answers 401 without the chart's token: a review that opens proves Alertmanager sent it.
    [review] = wait_for(opened, 120, "the review the alert opens (group_wait is 30 s)")
    assert (review["namespace"], review["version"], review["reason"]) == (SERVING, "3", "string_ops")

    def review_events() -> list[dict[str, Any]]:
        return [e for e in cluster.get(f"/api/v1/namespaces/{SERVING}/events")["items"]
                if e["reason"] == "ModelReviewOpened"]

    # The review service, with its own account (allowed to create Events in the serving namespace only),
    # tells `kubectl describe deployment` about the review.
    [event] = wait_for(review_events, 60, "the review's Kubernetes Event on the model's Deployment")
    assert event["involvedObject"]["kind"] == "Deployment" and event["involvedObject"]["name"] == MODEL_DEPLOYMENT
    assert f"review #{review['id']}" in event["message"]
    # The same alert again, as Alertmanager re-sends a firing alert: still exactly one review, one Event.
    httpx.post(f"{alertmanager}/api/v2/alerts", json=[alert], timeout=10).raise_for_status()
    time.sleep(5)
    assert len(opened()) == 1 and len(review_events()) == 1


def rendered_against_the_cluster(cluster: Cluster, release: str, template: str, kind: str,
                                 *sets: str) -> list[dict[str, Any]]:
    """The *kind* objects of one chart template as `helm template --dry-run=server` renders them: with
    the chart's `lookup`s answered by this cluster, as at install time."""
    args = [arg for value in sets for arg in ("--set", value)]
    out = cluster.helm("template", release, str(chart()), "--dry-run=server", "--namespace", NAMESPACE,
                       *args, "--show-only", f"templates/{template}")
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] == kind]


def test_the_chart_reads_the_installed_podmonitor_crd_for_a_numeric_port(cluster: Cluster) -> None:
    """monitoring.triton.portNumber=auto looks up the real CRD (prometheus-operator v0.85 has portNumber)."""
    [monitor] = rendered_against_the_cluster(cluster, "probe", "monitors.yaml", "PodMonitor",
                                             "serving.metricsPort=8002")
    assert monitor["spec"]["podMetricsEndpoints"][0]["portNumber"] == 8002


def test_the_api_server_takes_every_object_of_a_long_or_digit_first_release(cluster: Cluster) -> None:
    """The names the chart makes, as the API server validates them: a 53-character release name (helm's
    longest), whose names past 63 characters are cut and hashed, with the profile-capture CronJob
    (52 characters at most), and a release name with a digit first, whose Services Kubernetes 1.36
    takes. Applied with --dry-run=server: the API server checks every object and stores none."""
    namespace = "e2e-names"
    cluster.kubectl("create", "namespace", namespace, check=False)
    try:
        for name in (LONGEST_RELEASE, DIGIT_FIRST_RELEASE):
            rendered = cluster.helm("template", name, str(chart()), "--dry-run=server", "--namespace", namespace,
                                    "--set", KPS, "--set", "profileCapture.enabled=true",
                                    "--set", "profileCapture.target=triton:6009", "--set", "profileCapture.model=m")
            docs = [d for d in yaml.safe_load_all(rendered) if d]
            assert {"Service", "CronJob", "Deployment", "PersistentVolumeClaim"} <= {d["kind"] for d in docs}
            out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=rendered)
            assert out.count("(server dry run)") == len(docs), out
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_a_dcgm_exporter_someone_else_scrapes_is_not_scraped_twice(cluster: Cluster, release: str) -> None:
    """monitoring.dcgmExporter.enabled: auto adds no second monitor where another one already scrapes
    dcgm-exporter's port for a Prometheus of the cluster, and only there: the GPU Operator's own monitor
    that kps does not load (no `release: kps`), one selecting by matchExpressions that exclude the
    Service (Istio's component monitor), or one on another port does not count."""
    def dcgm_monitors(name: str) -> list[str]:
        return [d["metadata"]["name"] for d in rendered_against_the_cluster(
            cluster, name, "monitors.yaml", "ServiceMonitor", KPS) if "dcgm" in d["metadata"]["name"]]

    # An upgrade of this release keeps its own monitor; a second release finds this one's and adds none.
    assert dcgm_monitors(release) == [f"{release}-tidescale-dcgm-exporter"]
    assert dcgm_monitors("second") == []

    def theirs(name: str, labels: dict[str, str], selector: dict[str, Any],
               port: str = "gpu-metrics") -> dict[str, Any]:
        return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": {"name": name, "namespace": "gpu-operator", "labels": labels},
                "spec": {"selector": selector, "endpoints": [{"port": port, "honorLabels": True}]}}

    gpu_operator = {"matchLabels": {"app": "nvidia-dcgm-exporter"}}
    cases = [
        (theirs("gpu-operator-own", {"app": "nvidia-dcgm-exporter"}, gpu_operator), False),  # kps does not load it
        (theirs("istio-like", addons.MONITORING_LABELS,
                {"matchExpressions": [{"key": "istio", "operator": "In", "values": ["pilot"]}]}), False),
        (theirs("other-port", addons.MONITORING_LABELS, gpu_operator, port="metrics"), False),
        (theirs("dcgm-exporter", addons.MONITORING_LABELS, gpu_operator), True),  # kps loads it: that one scrapes
    ]
    for monitor, scraped in cases:
        cluster.apply(monitor)
        try:
            assert dcgm_monitors(release) == ([] if scraped else [f"{release}-tidescale-dcgm-exporter"]), \
                monitor["metadata"]["name"]
        finally:
            cluster.kubectl("delete", "servicemonitor", "-n", "gpu-operator", monitor["metadata"]["name"], check=False)


@pytest.mark.builds(KEDA_BUILD)
def test_keda_mode_reads_the_installed_keda_crd_for_the_tolerance_field(cluster: Cluster) -> None:
    """KEDA 2.21's ScaledObject CRD has behavior.*.tolerance, and Kubernetes 1.36 applies it: exact tolerance."""
    addons.install_keda(cluster.config, cluster.api)  # idempotent; this module must not rely on another's
    [scaled] = rendered_against_the_cluster(
        cluster, "probe", "autoscaling.yaml", "ScaledObject", "autoscaling.mode=keda",
        "autoscaling.targets[0].deployment=triton", "autoscaling.targets[0].model=m",
        "recommender.settings.capacity_rps=10")
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert str(behavior["scaleUp"]["tolerance"]) == str(behavior["scaleDown"]["tolerance"]) == "0"


def leftovers(cluster: Cluster) -> list[str]:
    """Every object of any listable kind, in any namespace or none, that still carries the release's label."""
    kinds = [k for k in cluster.kubectl("api-resources", "--verbs=list", "-o", "name").split()
             if k.split(".")[0] != "events"]
    found = cluster.kubectl("get", ",".join(kinds), "--all-namespaces", "-o", "name",
                            "-l", f"app.kubernetes.io/instance={RELEASE}", check=False).split()
    history = cluster.kubectl("get", "secrets", "-n", NAMESPACE, "-o", "name", "-l", f"owner=helm,name={RELEASE}")
    return found + history.split()


def test_helm_upgrade_rolls_the_release_and_uninstall_leaves_nothing_behind(cluster: Cluster, release: str) -> None:
    exporter = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{release}-tidescale-exporter"
    cluster.helm("upgrade", RELEASE, str(chart()), "--namespace", NAMESPACE, "--reuse-values",
             "--set", "exporter.podAnnotations.e2e/upgraded=yes", "--wait", "--timeout", "240s")
    deployment = cluster.get(exporter)
    assert deployment["spec"]["template"]["metadata"]["annotations"]["e2e/upgraded"] == "yes"
    status = deployment["status"]
    assert status.get("updatedReplicas") == status.get("availableReplicas") == deployment["spec"]["replicas"]
    assert leftovers(cluster), "the release's objects carry app.kubernetes.io/instance (else this test proves nothing)"

    cluster.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "120s")
    # Pods go with their ReplicaSets through the garbage collector, a moment after helm returns.
    wait_for(lambda: leftovers(cluster) == [], 120, f"nothing left of the release: {leftovers(cluster)}")


def test_a_recommender_whose_panic_may_wait_reads_its_targets_hpas_and_nothing_else(cluster: Cluster,
                                                                                     namespace: str) -> None:
    """`panic_confirm_readings` 2: the chart's Role lets the recommender's account `get` each target's
    HPA by name (`hpaName` included), as the API server's RBAC decides it, and the recommender's own
    read (the official client, as that account) gives the HPA's lastScaleTime as Unix time
    (autoscaler/hpaclock.py). Nothing else: no other HPA, no list, no write."""
    from kubernetes import client, config

    from tidescale.contracts.kubeapi import hpa_last_scale_time

    sets = [f"serving.namespace={namespace}", "recommender.tuning.panic_confirm_readings=2",
            "autoscaling.targets[0].deployment=triton-a", "autoscaling.targets[0].model=a",
            "autoscaling.targets[0].hpaName=a-hpa", "autoscaling.targets[1].deployment=triton-b",
            "autoscaling.targets[1].model=b"]
    docs = [d for kind in ("Role", "RoleBinding")
            for d in rendered_against_the_cluster(cluster, "hparead", "recommender.yaml", kind, *sets)
            if d["metadata"]["name"].endswith("-hpa-read")]
    assert len(docs) == 2
    cluster.apply(*docs)
    [subject] = docs[1]["subjects"]
    account = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"

    def can(verb: str, what: str) -> str:
        return cluster.kubectl("auth", "can-i", verb, what, "-n", namespace, f"--as={account}", check=False).strip()

    assert [can("get", "horizontalpodautoscalers.autoscaling/a-hpa"),
            can("get", "horizontalpodautoscalers.autoscaling/triton-b"),
            can("get", "horizontalpodautoscalers.autoscaling/someone-elses"),
            can("list", "horizontalpodautoscalers.autoscaling"),
            can("patch", "horizontalpodautoscalers.autoscaling/a-hpa")] == ["yes", "yes", "no", "no", "no"]

    cluster.apply({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                   "metadata": {"name": "a-hpa", "namespace": namespace},
                   "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "triton-a"},
                            "minReplicas": 1, "maxReplicas": 2}})
    cluster.kubectl("patch", "hpa", "a-hpa", "-n", namespace, "--subresource=status", "--type=merge", "-p",
                    '{"status": {"lastScaleTime": "2026-12-07T01:02:03Z", "currentReplicas": 1, "desiredReplicas": 1}}')
    api = config.new_client_from_config(str(cluster.config.admin_kubeconfig))
    api.set_default_header("Impersonate-User", account)  # the recommender's account, as in its pod
    hpas = client.AutoscalingV2Api(api)
    stamp = 1796605323.0  # 2026-12-07T01:02:03Z
    wait_for(lambda: hpa_last_scale_time(hpas.read_namespaced_horizontal_pod_autoscaler("a-hpa", namespace)) == stamp,
             timeout=30, what="the HPA's lastScaleTime as the recommender reads it")
