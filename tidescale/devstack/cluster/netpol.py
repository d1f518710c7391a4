"""NetworkPolicy enforcement: kube-router's network policy controller alone, as a host daemon.

kube-router (``github.com/cloudnativelabs/kube-router/v2``, pinned in deploy/cluster/go/kube-router)
runs with ``--run-firewall`` only: no BGP routing, no service proxy (kube-proxy keeps Services), no
CNI config. It speaks to the API server as ``system:kube-router``, bound to the ClusterRole that
kube-router's own manifests grant (read from the module's ``daemonset/generic-kuberouter.yaml``).

Which pods it enforces: it programs a firewall chain for each *local* pod, and a pod is local when
its ``status.hostIP`` is the node's first InternalIP (``getLocalPods`` in ``pkg/controllers/netpol``;
the pod CIDR plays no part). Every node of this cluster registers the one cluster address as its
InternalIP and the node agents write it as each pod's hostIP, so one instance, named after the first
node, enforces the policies of the pods of every node. A second instance would program the same
chains from the same pods and only race the first.

What it leaves on the host: the chains ``KUBE-ROUTER-INPUT/FORWARD/OUTPUT``, ``KUBE-NWPLCY-*`` and
``KUBE-POD-FW-*`` in the filter table, jumps to them from INPUT, FORWARD and OUTPUT, and the ipsets
``KUBE-SRC-*``/``KUBE-DST-*`` the policy chains match on. It keeps them when it stops, and its
``--cleanup-config`` would also run its router's and proxy's cleanup, so `cluster down` removes them
itself: the chains with kube-proxy's (``lifecycle.remove_kube_chains``), then the sets. The policy
controller writes no sysctl (kube-router's router and proxy do, and they do not run).

Traffic from the host itself to a pod is always allowed (its rule for a source of type LOCAL, which
is how a kubelet's probes reach a pod behind a policy); the node agents' probes rely on it.

Services without endpoints: kube-router ACCEPTs every packet of a pod that its policies allow, in
KUBE-ROUTER-FORWARD, whose jump it keeps first in FORWARD (upstream's design: the policy controller
is the authority on pod traffic). kube-proxy's REJECT for a Service with no endpoints (in its
KUBE-SERVICES filter chain, after that jump) then never sees a pod's packets, which are not DNATed
either, so they took the default route off the machine and the client waited for its timeout. A
routing rule now answers them (:func:`service_rule`): a pod's packet still addressed to the Service
range after kube-proxy's DNAT has no route, and the pod gets ENETUNREACH at once. DNAT happens
before routing, so Services with endpoints are untouched; the host's own connections do not come
from the pod range, and kube-proxy still rejects those.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from typing import Any

from tidescale.contracts.errors import TidescaleError
from tidescale.devstack.cluster.config import ClusterConfig, tool

MODULE = "github.com/cloudnativelabs/kube-router/v2"
USER = "system:kube-router"  # the client certificate's CN; RBAC binds the ClusterRole to it
CLUSTER_ROLE = "kube-router"
MODULE_RBAC = "daemonset/generic-kuberouter.yaml"  # every daemonset/ example carries the same ClusterRole
METRICS_PORT = 20241  # metrics and /healthz (one mux), on the cluster address only; health port 0 = off
TOP_LEVEL_CHAINS = {"INPUT": "KUBE-ROUTER-INPUT", "FORWARD": "KUBE-ROUTER-FORWARD", "OUTPUT": "KUBE-ROUTER-OUTPUT"}
IPSET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-")  # kube-router's policy sets; "inet6:" before them for IPv6
SERVICE_RULE_PRIORITY = 1000  # before the main table (32766)
SYNC_COUNT = re.compile(r"^kube_router_controller_iptables_sync_time_count\s+(\S+)\s*$", re.MULTILINE)


def argv(config: ClusterConfig) -> list[str]:
    """The policy controller alone; its only listener is on the cluster address."""
    return [
        str(tool("kube-router")), f"--kubeconfig={config.kubeconfig_for('kube-router')}",
        f"--hostname-override={config.node_names()[0]}",
        "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--run-loadbalancer=false",
        "--enable-cni=false", "--enable-ipv4=true", "--enable-ipv6=false",
        f"--service-cluster-ip-range={config.service_cidr}",
        # The health server binds every interface (":port", no address flag), so it stays off; the
        # metrics server takes an address and serves /healthz too (both use Go's default mux).
        "--health-port=0", f"--metrics-addr={config.host_ip}", f"--metrics-port={METRICS_PORT}",
    ]


def env(config: ClusterConfig) -> dict[str, str]:
    """kube-router finds its Node by NODE_NAME first, then the machine's hostname, then
    --hostname-override: name it, so neither an inherited NODE_NAME nor the hostname decides."""
    return {**os.environ, "NODE_NAME": config.node_names()[0]}


def metrics_url(config: ClusterConfig) -> str:
    return f"http://{config.host_ip}:{METRICS_PORT}/metrics"


def rbac(module_docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kube-router's ClusterRole as its manifests have it, bound to the certificate identity (the
    manifests bind it to a ServiceAccount of a DaemonSet, which a host daemon does not have)."""
    role = next((d for d in module_docs if d.get("kind") == "ClusterRole"
                 and d.get("metadata", {}).get("name") == CLUSTER_ROLE), None)
    if role is None:
        raise TidescaleError(f"kube-router's manifests ({MODULE_RBAC}) have no ClusterRole {CLUSTER_ROLE}")
    role = {**role, "metadata": {k: v for k, v in role["metadata"].items() if k != "namespace"}}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": CLUSTER_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }
    return [role, binding]


def grant(config: ClusterConfig) -> None:
    """Apply the ClusterRole from the pinned module (the source the binary was built from)."""
    import yaml

    from tidescale.devstack.cluster.addons import apply, module_dir

    path = module_dir("kube-router", MODULE) / MODULE_RBAC
    apply(config, rbac([d for d in yaml.safe_load_all(path.read_text()) if d]))


def synced(metrics_text: str) -> bool:
    """At least one full policy sync has run (the sync-time histogram counts each one)."""
    match = SYNC_COUNT.search(metrics_text)
    return match is not None and float(match.group(1)) >= 1


def chains_installed() -> bool:
    """The jumps from INPUT, FORWARD and OUTPUT to kube-router's chains are in place."""
    for builtin, chain in TOP_LEVEL_CHAINS.items():
        rules = subprocess.run(["iptables", "-t", "filter", "-S", builtin], capture_output=True, text=True).stdout
        if f"-j {chain}" not in rules:
            return False
    return True


def ours(names: list[str]) -> list[str]:
    """Of ipset names, kube-router's policy sets."""
    return [n for n in names if n.removeprefix("inet6:").startswith(IPSET_PREFIXES)]


def ipsets() -> list[str]:
    """kube-router's ipsets on this host (none, or no ipset program, is an empty list)."""
    if shutil.which("ipset") is None:
        return []
    out = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True).stdout
    return ours([line.strip() for line in out.splitlines() if line.strip()])


def remove_ipsets() -> None:
    """Destroy kube-router's sets; run after its chains are gone (a set in use cannot be destroyed)."""
    for name in ipsets():
        subprocess.run(["ipset", "destroy", name], capture_output=True)


def service_rule(config: ClusterConfig) -> list[str]:
    """`ip rule add` arguments: a pod's packet left addressed to a Service (no endpoint, no DNAT) has no route."""
    return ["from", str(config.pod_cidr), "to", str(config.service_cidr), "priority", str(SERVICE_RULE_PRIORITY),
            "unreachable"]


def add_service_rule(config: ClusterConfig) -> None:
    remove_service_rules()
    proc = subprocess.run(["ip", "rule", "add", *service_rule(config)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise TidescaleError(f"`ip rule add {' '.join(service_rule(config))}` failed: {proc.stderr.strip()}")


def _selector(rule: dict[str, Any]) -> list[str]:
    return ["from", f"{rule.get('src')}/{rule.get('srclen', 32)}", "to", f"{rule.get('dst')}/{rule.get('dstlen', 32)}",
            "priority", str(rule["priority"]), "unreachable"]


def parse_service_rules(rules: list[dict[str, Any]]) -> list[list[str]]:
    """Of `ip -j rule show`, the service rules, each as the arguments that name it to `ip rule del`."""
    return [_selector(r) for r in rules
            if r.get("priority") == SERVICE_RULE_PRIORITY and r.get("action") == "unreachable"]


def _service_rules() -> list[list[str]]:
    if shutil.which("ip") is None:
        return []
    out = subprocess.run(["ip", "-j", "rule", "show"], capture_output=True, text=True).stdout.strip()
    return parse_service_rules(json.loads(out) if out else [])


def service_rules() -> list[str]:
    """The service rules on this host, for leftovers: `ip rule: from ... unreachable`."""
    return ["ip rule: " + " ".join(r) for r in _service_rules()]


def remove_service_rules() -> None:
    for rule in _service_rules():
        subprocess.run(["ip", "rule", "del", *rule], capture_output=True)
