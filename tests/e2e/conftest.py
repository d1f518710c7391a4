"""One local cluster for the whole e2e run: up once per session, torn down (and checked clean) at the end."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.waiting import wait_for
from tidescale.devstack.cluster import addons, lifecycle
from tidescale.devstack.cluster.config import ClusterConfig
from tidescale.devstack.cluster.kubectl import kubectl
from tidescale.devstack.node.kubeapi import KubeApi
from tidescale.devstack.tools import REPO_ROOT, helm

NODES = 2
# What a user's values need for kube-prometheus-stack at its defaults (release `kps`) to load the chart's
# monitors and rules.
KPS_VALUES: dict[str, Any] = {"monitoring": {"additionalLabels": addons.MONITORING_LABELS}}


# The modules that need neither KEDA nor prometheus-adapter: they run first, while the test command still
# builds those two (TIDESCALE_ADDONS_BUILD); every other module waits for them, a new one included.
CORE_ONLY_MODULES = ("test_cluster", "test_network_policy", "test_hpa_table")


def _module_name(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The core-only modules first, in their order; the rest after them, in theirs (a stable sort)."""
    items.sort(key=lambda item: _module_name(item) not in CORE_ONLY_MODULES)


@pytest.fixture(scope="module", autouse=True)
def addons_built(request: pytest.FixtureRequest) -> None:
    if request.module.__name__.rsplit(".", 1)[-1] not in CORE_ONLY_MODULES:
        wait_for_background_build("TIDESCALE_ADDONS_BUILD", "KEDA and prometheus-adapter")


def wait_for_background_build(env: str, what: str, timeout: float = 1800) -> None:
    """scripts/test.sh builds some components while the e2e tests that do not need them run, and names
    in *env* the file that the build leaves its exit status in. Unset: built beforehand (setup)."""
    status_file = os.environ.get(env)
    if not status_file:
        return
    path = Path(status_file)
    status = wait_for(lambda: path.read_text().strip() if path.is_file() else "", timeout,
                      f"{what}, which the test command builds beside the e2e tests ({path})")
    assert status == "0", f"building {what} failed (exit status {status}): the test command's output shows why"


@functools.cache
def chart() -> Path:
    """The chart as users install it: `helm package`d (versioned like the project), once per session."""
    out = Path(tempfile.mkdtemp(prefix="tidescale-chart-"))
    proc = subprocess.run([str(helm()), "package", str(REPO_ROOT / "deploy" / "helm" / "tidescale"),
                           "--destination", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [packaged] = out.glob("tidescale-*.tgz")
    return packaged


@dataclass
class Cluster:
    config: ClusterConfig
    api: KubeApi

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        return kubectl(self.config, *args, stdin=stdin, check=check)

    def apply(self, *docs: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(list(docs)))

    def get(self, path: str) -> dict[str, Any]:
        return self.api.get(path)

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return list(self.api.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector).get("items", []))

    def pod_ip(self, namespace: str, name: str) -> str:
        return str(self.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["status"]["podIP"])

    def prometheus(self, path: str) -> dict[str, Any]:
        """An HTTP API answer of the cluster's Prometheus (kube-prometheus-stack's, release `kps`)."""
        ip = self.pod_ip(addons.MONITORING_NS, addons.PROMETHEUS_POD)
        return dict(httpx.get(f"http://{ip}:9090{path}", timeout=10).json())

    def alertmanager_url(self) -> str:
        return f"http://{self.pod_ip(addons.MONITORING_NS, addons.ALERTMANAGER_POD)}:9093"

    def helm(self, *args: str) -> str:
        """helm as the cluster's admin; a failure fails the test with helm's message."""
        proc = subprocess.run([str(helm()), f"--kubeconfig={self.config.admin_kubeconfig}", *args],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def logs_of(self, namespace: str, pod: dict[str, Any], container: str) -> str:
        """The node agent keeps container output under the node's state directory (there is no kubelet API)."""
        node = pod["spec"]["nodeName"]
        path = self.config.state_dir / "nodes" / node / "pods" / pod["metadata"]["uid"] / "logs" / f"{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass(frozen=True)
class OciChart:
    """The packaged chart pushed to the cluster's OCI registry, as a platform team publishes it."""

    ref: str  # oci://host:port/charts/tidescale
    version: str

    def install_args(self) -> list[str]:
        return [self.ref, "--version", self.version, "--plain-http"]


@pytest.fixture(scope="session")
def oci_chart(cluster: Cluster) -> OciChart:
    address = addons.install_registry(cluster.config, cluster.api)
    packaged = chart()
    cluster.helm("push", str(packaged), f"oci://{address}/charts", "--plain-http")
    version = packaged.name.removeprefix("tidescale-").removesuffix(".tgz")
    return OciChart(f"oci://{address}/charts/tidescale", version)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.skip("the local cluster needs root (network and mount namespaces)")
    config = ClusterConfig(nodes=NODES)
    was_up = lifecycle.is_up(config)
    lifecycle.up(config, progress=lambda s: print(f"[cluster] {s}", flush=True))
    try:
        yield Cluster(config, KubeApi(config.admin_kubeconfig))
    finally:
        if not was_up:
            lifecycle.down(config)
            # Teardown is part of the contract: nothing the cluster made may outlive it.
            assert lifecycle.leftovers(config) == [], "cluster down left something behind"
            assert not lifecycle.is_up(config)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def wait_for_targets_up(cluster: Cluster, keep: Callable[[dict[str, Any]], bool], what: str,
                        count: int | None = None) -> list[dict[str, Any]]:
    """Prometheus' active targets that *keep* selects, once there are *count* of them (or any) and all are up.

    A monitor's target appears only when the operator's config reaches Prometheus, and reads
    `unknown` until its first scrape, an interval later: on a busy 2-core machine, and first of all
    on a cluster just started, that took over 180 s (never `down`). A test reading series through
    such a target waits here first, and a timeout shows each target's health and last error."""
    def ours() -> list[dict[str, Any]]:
        try:
            active = cluster.prometheus("/api/v1/targets?state=active")["data"]["activeTargets"]
        except (httpx.HTTPError, KeyError, ValueError):
            return []
        return [t for t in active if keep(t)]

    def all_up() -> list[dict[str, Any]]:
        found = ours()
        enough = len(found) == count if count is not None else bool(found)
        return found if enough and all(t["health"] == "up" for t in found) else []

    def seen() -> str:
        return f"{what}: {[(t['scrapePool'], t['scrapeUrl'], t['health'], t['lastError']) for t in ours()]}"

    return wait_for(all_up, 300, seen)


def pod_json(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", "pod", "-n", namespace, name, "-o", "json"))


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
