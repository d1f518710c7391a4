"""kubectl and waiting, shared by the cluster's bring-up and its add-ons."""

from __future__ import annotations

import contextlib
import string
import subprocess
import time
from collections.abc import Callable

from tidescale.contracts.errors import TidescaleError
from tidescale.devstack.cluster.config import ClusterConfig
from tidescale.devstack.node.kubeapi import ApiError, KubeApi
from tidescale.devstack.tools import REPO_ROOT, find_binary

MANIFESTS = REPO_ROOT / "deploy" / "cluster" / "manifests"


def kubectl(config: ClusterConfig, *args: str, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run([str(find_binary("kubectl")), f"--kubeconfig={config.admin_kubeconfig}", *args],
                          input=stdin, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise TidescaleError(f"kubectl {' '.join(args[:3])} failed: {proc.stderr.strip()[-600:]}")
    return proc.stdout


def render_manifest(config: ClusterConfig, name: str, **extra: str) -> str:
    text = (MANIFESTS / name).read_text()
    return string.Template(text).safe_substitute(
        CLUSTER_DOMAIN=config.cluster_domain, DNS_IP=str(config.dns_ip), **extra)


def wait_for(what: str, check: Callable[[], bool], timeout: float, hint: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ApiError, OSError, TidescaleError):
            if check():
                return
        time.sleep(0.5)
    raise TidescaleError(f"{what} not ready after {timeout:.0f}s{(': ' + hint()) if hint() else ''}")




def deployment_available(api: KubeApi, namespace: str, name: str) -> bool:
    dep = api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
    want = dep["spec"].get("replicas", 1)
    return int(dep.get("status", {}).get("availableReplicas") or 0) >= want
