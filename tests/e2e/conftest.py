"""One local cluster for the whole e2e run: up once per session, torn down (and checked clean) at the end."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
import time
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


# What the test command (scripts/test.sh) builds in the background while the e2e tests run: the
# environment variable naming the file that each build leaves its exit status in, and what it builds.
# Unset (a developer's run, or the demo's setup): built beforehand.
KEDA_BUILD, ADDONS_BUILD, THANOS_BUILD = "TIDESCALE_KEDA_BUILD", "TIDESCALE_ADDONS_BUILD", "TIDESCALE_THANOS_BUILD"
BACKGROUND_BUILDS = {KEDA_BUILD: "KEDA", ADDONS_BUILD: "prometheus-adapter and the registry", THANOS_BUILD: "Thanos"}
BUILD_TIMEOUT_S = 1800.0


def needed_builds(item: pytest.Item) -> tuple[str, ...]:
    """The background builds a test needs, by its closest `builds(...)` mark; unmarked: KEDA,
    prometheus-adapter and the registry (a new module waits for them unless it says otherwise)."""
    mark = item.get_closest_marker("builds")
    return tuple(mark.args) if mark is not None else (KEDA_BUILD, ADDONS_BUILD)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that need no background build first, then those that need one for some tests, then
    the rest, each module's tests in their order (a stable sort): the build goes on meanwhile."""
    def module_of(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    needs: dict[str, list[bool]] = {}
    for item in items:
        needs.setdefault(module_of(item), []).append(bool(needed_builds(item)))
    rank = {module: 0 if not any(flags) else 1 if not all(flags) else 2 for module, flags in needs.items()}
    items.sort(key=lambda item: rank[module_of(item)])


def _build_status(env: str) -> str | None:
    """The exit status a background build left, or None while it runs (or when none is named)."""
    status_file = os.environ.get(env)
    if not status_file or not Path(status_file).is_file():
        return None
    return Path(status_file).read_text().strip() or None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Wait for the builds a test needs before its clock starts: pytest-timeout times the setup too."""
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    for env in needed_builds(item):
        while os.environ.get(env) and _build_status(env) is None and time.monotonic() < deadline:
            time.sleep(1.0)
    return (yield)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test whose build failed, or never finished, fails at its setup, naming the build."""
    for env in needed_builds(item):
        if not os.environ.get(env):
            continue
        status, what = _build_status(env), BACKGROUND_BUILDS.get(env, env)
        if status is None:
            pytest.fail(f"{what}, which the test command builds beside the e2e tests, was not built within "
                        f"{BUILD_TIMEOUT_S:g} s ({os.environ[env]})")
        if status != "0":
            pytest.fail(f"building {what} failed (exit status {status}): the test command's output shows why")


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
