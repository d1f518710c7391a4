"""The upstream control plane as host processes: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kube-proxy and kube-router's network policy controller, each with its own certificate
identity.

They are started detached (their own session) so that `tidescale cluster up` can return while the
cluster keeps running; each records its pid under the state directory for `cluster down`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from tidescale.contracts.errors import MissingToolError, TidescaleError
from tidescale.devstack.cluster import netpol
from tidescale.devstack.cluster.config import ClusterConfig, tool
from tidescale.devstack.cluster.pki import KeyPair, Pki
from tidescale.devstack.procs import ManagedProcess
from tidescale.devstack.tools import SETUP_HINT

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kube-router")


@dataclass(frozen=True)
class Identities:
    ca: KeyPair
    front_proxy_ca: KeyPair
    apiserver: KeyPair
    front_proxy_client: KeyPair
    service_account: KeyPair
    clients: dict[str, KeyPair]


# component -> (CN, groups): the names RBAC's bootstrap roles and the Node authorizer expect.
CLIENT_IDENTITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("kubernetes-admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "kube-proxy": ("system:kube-proxy", ()),
    "kube-router": (netpol.USER, ()),  # bound to kube-router's own ClusterRole (netpol.rbac)
}


def make_identities(config: ClusterConfig) -> Identities:
    pki = Pki(config.pki_dir)
    ca = pki.ca("ca", "tidescale-cluster-ca")
    front = pki.ca("front-proxy-ca", "tidescale-front-proxy-ca")
    domain = config.cluster_domain
    apiserver = pki.leaf(
        "apiserver", ca, "kube-apiserver", server=True,
        dns=["kubernetes", "kubernetes.default", "kubernetes.default.svc", f"kubernetes.default.svc.{domain}"],
        ips=[config.host_ip, config.kubernetes_service_ip],
    )
    clients = {name: pki.leaf(name, ca, cn, groups) for name, (cn, groups) in CLIENT_IDENTITIES.items()}
    for node in config.node_names():
        clients[node] = pki.leaf(node, ca, f"system:node:{node}", ("system:nodes",))
    return Identities(
        ca=ca, front_proxy_ca=front, apiserver=apiserver,
        front_proxy_client=pki.leaf("front-proxy-client", front, "front-proxy-client"),
        service_account=pki.service_account_key(), clients=clients,
    )


def write_kubeconfig(path: Path, server: str, ca: Path, client: KeyPair, user: str) -> Path:
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "tidescale",
        "clusters": [{"name": "tidescale", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}],
        "contexts": [{"name": "tidescale", "context": {"cluster": "tidescale", "user": user}}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def write_kubeconfigs(config: ClusterConfig, ids: Identities) -> None:
    write_kubeconfig(config.admin_kubeconfig, config.api_url, ids.ca.cert, ids.clients["admin"], "admin")
    for name, pair in ids.clients.items():
        write_kubeconfig(config.kubeconfig_for(name), config.api_url, ids.ca.cert, pair, name)


def require_binaries() -> None:
    missing = [b for b in BINARIES if not tool(b).exists()]
    if missing:
        raise MissingToolError(f"the local cluster's binaries are not built ({', '.join(missing)}): {SETUP_HINT}")


def component_argv(config: ClusterConfig, ids: Identities) -> dict[str, list[str]]:
    """Each control-plane process and its flags; everything binds to the cluster's host address."""
    host, _pki = str(config.host_ip), config.pki_dir
    etcd_url = f"http://{host}:{config.etcd_port}"
    return {
        "etcd": [
            str(tool("etcd")), "--name=tidescale", f"--data-dir={config.state_dir / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://{host}:{config.etcd_peer_port}",
            f"--initial-advertise-peer-urls=http://{host}:{config.etcd_peer_port}",
            f"--initial-cluster=tidescale=http://{host}:{config.etcd_peer_port}",
            "--log-level=warn", "--quota-backend-bytes=2147483648",
        ],
        "kube-apiserver": [
            str(tool("kube-apiserver")), f"--etcd-servers={etcd_url}",
            f"--bind-address={host}", f"--advertise-address={host}", f"--secure-port={config.api_port}",
            f"--tls-cert-file={ids.apiserver.cert}", f"--tls-private-key-file={ids.apiserver.key}",
            f"--client-ca-file={ids.ca.cert}",
            f"--service-account-issuer=https://kubernetes.default.svc.{config.cluster_domain}",
            f"--service-account-key-file={ids.service_account.cert}",
            f"--service-account-signing-key-file={ids.service_account.key}",
            f"--service-cluster-ip-range={config.service_cidr}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true", "--profiling=false", "--event-ttl=1h",
            # the aggregation layer, for KEDA's and prometheus-adapter's metrics APIs
            f"--requestheader-client-ca-file={ids.front_proxy_ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={ids.front_proxy_client.cert}",
            f"--proxy-client-key-file={ids.front_proxy_client.key}",
            "--enable-aggregator-routing=true",
        ],
        "kube-controller-manager": [
            str(tool("kube-controller-manager")), *_kubeconfig_flags(config, "kube-controller-manager"),
            f"--bind-address={host}", "--secure-port=10257", "--leader-elect=false",
            f"--service-account-private-key-file={ids.service_account.key}", f"--root-ca-file={ids.ca.cert}",
            f"--cluster-signing-cert-file={ids.ca.cert}", f"--cluster-signing-key-file={ids.ca.key}",
            "--use-service-account-credentials=true", "--cluster-name=tidescale",
            "--allocate-node-cidrs=true", f"--cluster-cidr={config.pod_cidr}", "--node-cidr-mask-size=24",
            f"--service-cluster-ip-range={config.service_cidr}",
            f"--horizontal-pod-autoscaler-sync-period={config.hpa_sync_period_s}s",
            f"--requestheader-client-ca-file={ids.front_proxy_ca.cert}",
        ],
        "kube-scheduler": [
            str(tool("kube-scheduler")), *_kubeconfig_flags(config, "kube-scheduler"),
            f"--bind-address={host}", "--secure-port=10259", "--leader-elect=false",
        ],
        # No --cluster-cidr: pods route straight back to the host address, so off-cluster clients
        # need no masquerade (hairpin traffic is still masqueraded by the endpoint rules).
        "kube-proxy": [
            str(tool("kube-proxy")), f"--kubeconfig={config.kubeconfig_for('kube-proxy')}",
            f"--hostname-override={config.node_names()[0]}", "--proxy-mode=iptables",
            f"--healthz-bind-address={host}:10256", f"--metrics-bind-address={host}:10249",
            f"--bind-address={host}",
        ],
        "kube-router": netpol.argv(config),
    }


def _kubeconfig_flags(config: ClusterConfig, component: str) -> list[str]:
    path = config.kubeconfig_for(component)
    return [f"--kubeconfig={path}", f"--authentication-kubeconfig={path}", f"--authorization-kubeconfig={path}"]


def readiness(config: ClusterConfig, ids: Identities) -> dict[str, tuple[str, ssl.SSLContext | bool]]:
    host = config.host_ip
    ca = ssl.create_default_context(cafile=str(ids.ca.cert))
    return {
        "etcd": (f"http://{host}:{config.etcd_port}/health", True),
        "kube-apiserver": (f"{config.api_url}/readyz", ca),
        "kube-controller-manager": (f"https://{host}:10257/healthz", False),
        "kube-scheduler": (f"https://{host}:10259/healthz", False),
        "kube-proxy": (f"http://{host}:10256/livez", True),
        "kube-router": (netpol.metrics_url(config), True),  # and netpol.synced: see lifecycle
    }


def wait_ready(proc: ManagedProcess, url: str, verify: ssl.SSLContext | bool, timeout: float = 120.0,
               ok: Callable[[httpx.Response], bool] | None = None) -> None:
    deadline = time.monotonic() + timeout
    check = ok or (lambda r: r.is_success)
    with httpx.Client(timeout=3.0, verify=verify) as client:
        while time.monotonic() < deadline:
            if not proc.alive():
                raise TidescaleError(f"{proc.name} exited early (see {proc.log_path}):\n{proc.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if check(client.get(url)):
                    return
            time.sleep(0.2)
    raise TidescaleError(f"{proc.name} not ready at {url} after {timeout:.0f}s (see {proc.log_path}):\n"
                         f"{proc.log_tail()}")


def start_daemon(config: ClusterConfig, name: str, argv: list[str],
                 env: dict[str, str] | None = None) -> ManagedProcess:
    proc = ManagedProcess(name, argv, config.logs_dir / f"{name}.log", env=env).start()
    config.pids_dir.mkdir(parents=True, exist_ok=True)
    (config.pids_dir / f"{name}.pid").write_text(str(proc.pid))
    return proc


def recorded_pids(config: ClusterConfig) -> dict[str, int]:
    pids: dict[str, int] = {}
    if config.pids_dir.is_dir():
        for f in config.pids_dir.glob("*.pid"):
            with contextlib.suppress(ValueError, OSError):
                pids[f.stem] = int(f.read_text().strip())
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z"):
            return False
    return True


def stop_recorded(config: ClusterConfig, names: list[str] | None = None, grace: float = 10.0) -> None:
    """SIGTERM every recorded process group at once, then SIGKILL what is left after *grace*."""
    pids = recorded_pids(config)
    targets = {n: p for n, p in pids.items() if names is None or n in names}
    for pid in targets.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in targets.values()):
        time.sleep(0.1)
    for pid in targets.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for name in targets:
        with contextlib.suppress(FileNotFoundError):
            (config.pids_dir / f"{name}.pid").unlink()
