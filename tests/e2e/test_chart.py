"""`helm install` of deploy/helm/tidescale into the local cluster, as users install it next to
prometheus-operator, under a release name and namespace other than `tidescale`."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Cluster
from tests.waiting import wait_for
from tidescale.contracts.tools import REPO_ROOT, helm

pytestmark = pytest.mark.e2e

RELEASE, NAMESPACE = "obs", "observability"
CHART = REPO_ROOT / "deploy" / "helm" / "tidescale"


def run_helm(cluster: Cluster, *args: str) -> str:
    proc = subprocess.run([str(helm()), f"--kubeconfig={cluster.config.admin_kubeconfig}", *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def release(cluster: Cluster) -> Iterator[str]:
    run_helm(cluster, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace", "--wait",
             "--timeout", "240s")
    yield RELEASE
    run_helm(cluster, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "120s")


def prometheus(cluster: Cluster, path: str) -> dict[str, Any]:
    pod = cluster.get("/api/v1/namespaces/monitoring/pods/prometheus-k8s-0")
    return dict(httpx.get(f"http://{pod['status']['podIP']}:9090{path}", timeout=10).json())


def test_the_release_becomes_ready(cluster: Cluster, release: str) -> None:
    deployments = cluster.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments")["items"]
    assert {d["metadata"]["name"] for d in deployments} == {f"{release}-tidescale-exporter",
                                                             f"{release}-tidescale-reviews"}
    for d in deployments:
        assert d["status"].get("availableReplicas") == d["spec"]["replicas"], d["metadata"]["name"]


def test_every_target_the_operator_made_from_the_chart_is_up(cluster: Cluster, release: str) -> None:
    def chart_targets() -> list[dict[str, Any]]:
        active = prometheus(cluster, "/api/v1/targets?state=active")["data"]["activeTargets"]
        ours = [t for t in active if t["labels"].get("namespace") == NAMESPACE]
        return ours if ours and all(t["health"] == "up" for t in ours) else []

    targets = wait_for(chart_targets, 120, "the chart's scrape targets to be up")
    jobs = {t["labels"]["job"] for t in targets}
    assert {"tidescale-exporter", "tidescale-reviews"} <= jobs, jobs  # no targets: no recommender


def test_the_chart_rules_are_loaded(cluster: Cluster, release: str) -> None:
    def groups() -> list[str]:
        data = prometheus(cluster, "/api/v1/rules")["data"]["groups"]
        return [g["name"] for g in data if NAMESPACE in g.get("file", "")]

    assert wait_for(groups, 90, "the chart's PrometheusRules in Prometheus")
