"""One local cluster for the whole e2e run: up once per session, torn down (and checked clean) at the end."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tidescale.devstack.cluster import lifecycle
from tidescale.devstack.cluster.config import ClusterConfig
from tidescale.devstack.cluster.kubectl import kubectl
from tidescale.devstack.node.kubeapi import KubeApi

NODES = 2


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

    def logs_of(self, namespace: str, pod: dict[str, Any], container: str) -> str:
        """The node agent keeps container output under the node's state directory (there is no kubelet API)."""
        node = pod["spec"]["nodeName"]
        path = self.config.state_dir / "nodes" / node / "pods" / pod["metadata"]["uid"] / "logs" / f"{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""


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


def pod_json(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", "pod", "-n", namespace, name, "-o", "json"))


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
