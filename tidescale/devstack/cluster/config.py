"""Where the local cluster lives: its state directory, address ranges and ports.

Every address the cluster uses is one it makes itself: ``host_ip`` sits on a dummy link that
`cluster up` creates, pods get addresses from ``pod_cidr`` in network namespaces of their own, and
Service addresses come from ``service_cidr`` through kube-proxy. Nothing binds to the machine's
own interfaces, so the cluster cannot collide with what else runs here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from tidescale.devstack.tools import REPO_ROOT, TOOLS_BIN

NODE_PREFIX = "tidescale-node-"


@dataclass(frozen=True)
class ClusterConfig:
    state_dir: Path = field(default_factory=lambda: Path(os.environ.get("TIDESCALE_CLUSTER_DIR",
                                                                          REPO_ROOT / ".cluster")))
    host_ip: IPv4Address = IPv4Address("10.243.0.1")  # noqa: RUF009 - immutable
    pod_cidr: IPv4Network = IPv4Network("10.244.0.0/16")  # noqa: RUF009 - immutable
    service_cidr: IPv4Network = IPv4Network("10.96.0.0/16")  # noqa: RUF009 - immutable
    dns_ip: IPv4Address = IPv4Address("10.96.0.10")  # noqa: RUF009 - immutable
    cluster_domain: str = "cluster.local"
    api_port: int = 6443
    etcd_port: int = 2379
    etcd_peer_port: int = 2380
    nodes: int = 1
    hpa_sync_period_s: int = 15

    @property
    def api_url(self) -> str:
        return f"https://{self.host_ip}:{self.api_port}"

    @property
    def kubernetes_service_ip(self) -> IPv4Address:
        return self.service_cidr.network_address + 1

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pids_dir(self) -> Path:
        return self.state_dir / "pids"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state_dir / "admin.kubeconfig"

    def kubeconfig_for(self, component: str) -> Path:
        return self.state_dir / "kubeconfigs" / f"{component}.kubeconfig"

    def node_names(self) -> list[str]:
        return [f"{NODE_PREFIX}{i}" for i in range(self.nodes)]


def tool(name: str) -> Path:
    return TOOLS_BIN / name
