"""kube-router's policy controller on the local cluster: its flags, identity, readiness and teardown."""

from __future__ import annotations

import shutil
import subprocess
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import pytest

from tidescale.contracts.errors import TidescaleError
from tidescale.devstack.cluster import controlplane, lifecycle, netpol
from tidescale.devstack.cluster.config import ClusterConfig
from tidescale.devstack.cluster.pki import KeyPair

# The ClusterRole of kube-router v2.1.0's daemonset/generic-kuberouter.yaml, abridged.
MODULE_DOCS: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kube-router", "namespace": "kube-system"}},
    {"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
     "metadata": {"name": "kube-router", "namespace": "kube-system"},
     "rules": [{"apiGroups": [""], "resources": ["namespaces", "pods", "services", "nodes", "endpoints"],
                "verbs": ["list", "get", "watch"]},
               {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                "verbs": ["list", "get", "watch"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "kube-router"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kube-router"},
     "subjects": [{"kind": "ServiceAccount", "name": "kube-router", "namespace": "kube-system"}]},
]


def _flags(argv: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in argv[1:])


def test_only_the_policy_controller_runs_and_listens_on_the_cluster_address_alone(tmp_path: Path) -> None:
    config = ClusterConfig(state_dir=tmp_path, nodes=3)
    argv = netpol.argv(config)
    assert Path(argv[0]).name == "kube-router"
    flags = _flags(argv)
    assert (flags["run-firewall"], flags["run-router"], flags["run-service-proxy"], flags["run-loadbalancer"]) == (
        "true", "false", "false", "false")
    assert flags["kubeconfig"] == str(config.kubeconfig_for("kube-router"))
    # One instance for every node: all of them share the InternalIP that makes a pod "local".
    assert flags["hostname-override"] == "tidescale-node-0" == netpol.env(config)["NODE_NAME"]
    assert flags["service-cluster-ip-range"] == "10.96.0.0/16"
    # The health server cannot take an address, so it is off; metrics (and /healthz) bind the cluster address.
    assert flags["health-port"] == "0"
    assert (flags["metrics-addr"], flags["metrics-port"]) == (str(config.host_ip), str(netpol.METRICS_PORT))
    assert IPv4Address(flags["metrics-addr"]) == IPv4Address("10.243.0.1")
    assert "enable-pprof" not in flags
    pair = KeyPair(tmp_path / "x.crt", tmp_path / "x.key")
    ids = controlplane.Identities(ca=pair, front_proxy_ca=pair, apiserver=pair, front_proxy_client=pair,
                                  service_account=pair, clients={})
    assert controlplane.component_argv(config, ids)["kube-router"] == argv
    assert netpol.metrics_url(config) == f"http://10.243.0.1:{netpol.METRICS_PORT}/metrics"


def test_it_has_its_own_certificate_identity() -> None:
    assert controlplane.CLIENT_IDENTITIES["kube-router"] == ("system:kube-router", ())
    assert "kube-router" in controlplane.BINARIES


def test_its_cluster_role_is_kube_routers_own_bound_to_that_identity() -> None:
    role, binding = netpol.rbac(MODULE_DOCS)
    assert role["kind"] == "ClusterRole" and role["metadata"] == {"name": "kube-router"}  # cluster-scoped
    assert role["rules"] == MODULE_DOCS[1]["rules"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "kube-router"}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": "system:kube-router"}]
    assert MODULE_DOCS[1]["metadata"]["namespace"] == "kube-system"  # the module's documents are not changed
    with pytest.raises(TidescaleError, match="no ClusterRole kube-router"):
        netpol.rbac([MODULE_DOCS[0], MODULE_DOCS[2]])


def test_ready_only_after_a_first_full_sync() -> None:
    head = ("# HELP kube_router_controller_iptables_sync_time Time it took for controller to sync iptables\n"
            "# TYPE kube_router_controller_iptables_sync_time histogram\n"
            'kube_router_controller_iptables_sync_time_bucket{le="+Inf"} %s\n'
            "kube_router_controller_iptables_sync_time_sum 0.05\n")
    assert not netpol.synced(head % 0 + "kube_router_controller_iptables_sync_time_count 0\n")
    assert netpol.synced(head % 2 + "kube_router_controller_iptables_sync_time_count 2\n")
    assert not netpol.synced("kube_router_build_info 1\n")  # before the controller registered its metrics


def test_its_ipsets_are_told_from_others() -> None:
    names = ["KUBE-SRC-ABCDEFGHIJKLMNOP", "KUBE-DST-QRSTUVWXYZ234567", "inet6:KUBE-SRC-ABCDEFGHIJKLMNOP",
             "my-own-set", "KUBE-ROUTER-EXTRA", "cilium_set"]
    assert netpol.ours(names) == names[:3]


class FakeHost:
    """`iptables`/`ipset` as a host with kube-router's rules would answer them; records every change."""

    def __init__(self, filter_rules: list[str], sets: list[str]) -> None:
        self.filter_rules = filter_rules
        self.sets = sets
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        out = ""
        if argv[0] == "iptables" and argv[3] == "-S" and argv[2] == "filter":
            out = "\n".join(self.filter_rules) + "\n"
        elif argv[:3] == ["ipset", "list", "-n"]:
            out = "\n".join(self.sets) + "\n"
        elif argv[0] in ("iptables", "ipset") and argv[3:4] != ["-S"]:
            self.calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, out, "")


def test_teardown_removes_the_jumps_then_the_chains_then_the_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    host = FakeHost([
        "-P INPUT ACCEPT", "-P FORWARD ACCEPT", "-P OUTPUT ACCEPT",
        "-N KUBE-NWPLCY-DEFAULT", "-N KUBE-POD-FW-ABCDEFGHIJKLMNOP", "-N KUBE-ROUTER-FORWARD",
        '-A FORWARD -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD',
        "-A FORWARD -i eth0 -j ACCEPT",
        '-A KUBE-ROUTER-FORWARD -d 10.244.0.5/32 -m comment --comment "rule to jump traffic destined to POD '
        'name:web namespace: a to chain KUBE-POD-FW-ABCDEFGHIJKLMNOP" -j KUBE-POD-FW-ABCDEFGHIJKLMNOP',
    ], ["KUBE-SRC-ABCDEFGHIJKLMNOP", "someone-elses"])
    monkeypatch.setattr(subprocess, "run", host.run)
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "ip6tables" else f"/usr/sbin/{name}")

    lifecycle.remove_kube_chains()
    netpol.remove_ipsets()

    filter_calls = [c for c in host.calls if c[:3] == ["iptables", "-t", "filter"]]
    assert filter_calls == [
        ["iptables", "-t", "filter", "-D", "FORWARD", "-m", "comment", "--comment",
         "kube-router netpol - TEMCG2JMHZYE7H7T", "-j", "KUBE-ROUTER-FORWARD"],
        *(["iptables", "-t", "filter", "-F", c] for c in
          ("KUBE-NWPLCY-DEFAULT", "KUBE-POD-FW-ABCDEFGHIJKLMNOP", "KUBE-ROUTER-FORWARD")),
        *(["iptables", "-t", "filter", "-X", c] for c in
          ("KUBE-NWPLCY-DEFAULT", "KUBE-POD-FW-ABCDEFGHIJKLMNOP", "KUBE-ROUTER-FORWARD")),
    ]
    assert host.calls[-1] == ["ipset", "destroy", "KUBE-SRC-ABCDEFGHIJKLMNOP"]  # after the chains matching on it


def test_a_leftover_ipset_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tidescale.devstack.node import sandbox

    monkeypatch.setattr(sandbox.HostNetwork, "leftovers", staticmethod(lambda: []))
    monkeypatch.setattr(lifecycle, "kube_chains", lambda: ["iptables:KUBE-ROUTER-INPUT"])
    monkeypatch.setattr(netpol, "ipsets", lambda: ["KUBE-DST-QRSTUVWXYZ234567"])
    monkeypatch.setattr(netpol, "service_rules", lambda: [])
    found = lifecycle.leftovers(ClusterConfig(state_dir=tmp_path))
    assert found == ["iptables:KUBE-ROUTER-INPUT", "ipset:KUBE-DST-QRSTUVWXYZ234567"]


def test_a_pods_packet_left_addressed_to_a_service_has_no_route(tmp_path: Path) -> None:
    assert netpol.service_rule(ClusterConfig(state_dir=tmp_path)) == [
        "from", "10.244.0.0/16", "to", "10.96.0.0/16", "priority", "1000", "unreachable"]


def test_the_service_rule_is_found_among_the_hosts_rules_and_named_for_deletion() -> None:
    shown = [{"priority": 0, "src": "all", "table": "local"},
             {"priority": 1000, "src": "10.244.0.0", "srclen": 16, "dst": "10.96.0.0", "dstlen": 16,
              "action": "unreachable"},
             {"priority": 1000, "src": "192.168.0.0", "srclen": 16, "table": "vpn"},  # someone else's
             {"priority": 32766, "src": "all", "table": "main"}]
    assert netpol.parse_service_rules(shown) == [
        ["from", "10.244.0.0/16", "to", "10.96.0.0/16", "priority", "1000", "unreachable"]]


def test_a_leftover_service_rule_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tidescale.devstack.node import sandbox

    monkeypatch.setattr(sandbox.HostNetwork, "leftovers", staticmethod(lambda: []))
    monkeypatch.setattr(lifecycle, "kube_chains", lambda: [])
    monkeypatch.setattr(netpol, "ipsets", lambda: [])
    monkeypatch.setattr(netpol, "_service_rules", lambda: [netpol.service_rule(ClusterConfig(state_dir=tmp_path))])
    assert lifecycle.leftovers(ClusterConfig(state_dir=tmp_path)) == [
        "ip rule: from 10.244.0.0/16 to 10.96.0.0/16 priority 1000 unreachable"]
