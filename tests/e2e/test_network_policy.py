"""NetworkPolicies are enforced (kube-router's policy controller), shown with plain Kubernetes objects.

A web server in namespace A behind a policy that admits namespaces labelled X and pods labelled Y in
A. Clients connect from their pods' network namespaces (what `kubectl exec` would give; there is no
kubelet API here), so each connection carries the client pod's address as on a real node.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import pytest

from tests.e2e.conftest import Cluster
from tests.waiting import wait_for
from tidescale.devstack.cluster import netpol
from tidescale.devstack.node.sandbox import NETNS_RUN_DIR, PodSandbox

pytestmark = [pytest.mark.e2e, pytest.mark.builds()]  # needs no background build

IMAGE = "ghcr.io/tidescale/tidescale:0.1.0"  # the node agent runs the venv for tidescale's image
ALLOWED_NS = {"e2e.tidescale.dev/netpol": "allowed"}  # X: namespaces the policy admits
FRIEND = {"e2e.tidescale.dev/role": "friend"}  # Y: pods of A the policy admits
PORT = 8080

# Connect, send a request, read the status line: one result per target, as a word.
PROBE = """
import errno, socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, int(port)))
        s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
        print("ok" if s.recv(12).startswith(b"HTTP/1.0 200") else "bad")
    except ConnectionRefusedError:
        print("refused")
    except (socket.timeout, TimeoutError):
        print("timeout")
    except OSError as exc:
        print("unreachable" if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) else f"error:{exc.errno}")
    finally:
        s.close()
"""


def _pod(name: str, labels: dict[str, str], command: list[str], **container: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": IMAGE, "command": command, **container}]}}


def _sleeper(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return _pod(name, labels, ["python", "-c", "import time; time.sleep(3600)"])


def _running(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    pod = cluster.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    status = pod.get("status", {})
    ready = all(c.get("ready") for c in status.get("containerStatuses") or [{}])
    return pod if status.get("phase") == "Running" and status.get("podIP") and ready else None


def _wait_running(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    found = wait_for(lambda: _running(cluster, namespace, name), 90, f"pod {namespace}/{name} running and ready")
    assert found is not None
    return found


def probe_from(pod: dict[str, Any], *targets: str) -> list[str]:
    """Connect to each HOST:PORT from inside *pod*'s network namespace (its address, its policies)."""
    netns, _ = PodSandbox.names_for(pod["metadata"]["uid"])
    proc = subprocess.run(["nsenter", f"--net={NETNS_RUN_DIR / netns}", sys.executable, "-c", PROBE, *targets],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def probe_from_host(*targets: str) -> list[str]:
    return subprocess.run([sys.executable, "-c", PROBE, *targets], capture_output=True, text=True,
                          timeout=30).stdout.split()


def test_a_network_policy_admits_only_its_peers_until_deleted(cluster: Cluster, namespace: str) -> None:
    peer_ns, other_ns = f"{namespace}-peer", f"{namespace}-other"
    cluster.kubectl("create", "namespace", peer_ns)
    cluster.kubectl("create", "namespace", other_ns)
    try:
        cluster.kubectl("label", "namespace", peer_ns, *(f"{k}={v}" for k, v in ALLOWED_NS.items()))
        web = _pod("web", {"app": "web"}, ["python", "-m", "http.server", str(PORT)],
                   ports=[{"name": "http", "containerPort": PORT}],
                   readinessProbe={"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1})
        service: dict[str, Any] = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                   "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}}
        placed = {"web": namespace, "friend": namespace, "stranger": namespace, "peer": peer_ns,
                  "outsider": other_ns}
        for doc in (web, service, _sleeper("friend", FRIEND), _sleeper("stranger", {}), _sleeper("peer", {}),
                    _sleeper("outsider", {})):
            doc["metadata"]["namespace"] = placed.get(doc["metadata"]["name"], namespace)
            cluster.apply(doc)
        pods = {name: _wait_running(cluster, ns, name) for name, ns in placed.items()}
        clients = ("friend", "stranger", "peer", "outsider")
        pod_ip = f"{pods['web']['status']['podIP']}:{PORT}"
        cluster_ip = f"{cluster.get(f'/api/v1/namespaces/{namespace}/services/web')['spec']['clusterIP']}:80"

        def outcomes() -> dict[str, list[str]]:
            """Each client's result for the pod address and for the Service address."""
            return {c: probe_from(pods[c], pod_ip, cluster_ip) for c in clients}

        everyone = {c: ["ok", "ok"] for c in clients}
        # Without a policy every client gets in (the Service's rules may take a sync period to appear).
        wait_for(lambda: outcomes() == everyone, 60, lambda: f"all clients admitted before the policy: {outcomes()}")

        cluster.apply({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "web-ingress", "namespace": namespace},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"namespaceSelector": {"matchLabels": ALLOWED_NS}},
                                           {"podSelector": {"matchLabels": FRIEND}}],
                                  "ports": [{"port": PORT, "protocol": "TCP"}]}]},
        })
        # kube-router programs the policy asynchronously, in one iptables-restore: wait for its effect.
        enforced = {"friend": ["ok", "ok"], "stranger": ["refused", "refused"], "peer": ["ok", "ok"],
                    "outsider": ["refused", "refused"]}
        wait_for(lambda: outcomes() == enforced, 60, lambda: f"the policy enforced: {outcomes()}")
        # The node itself still gets in (kubelet probes do on a real node): the server stays Ready.
        assert probe_from_host(pod_ip, cluster_ip) == ["ok", "ok"]
        assert _running(cluster, namespace, "web") is not None
        # The policy's peers are ipsets, which `cluster down` must remove (lifecycle.leftovers reports them).
        assert netpol.ipsets(), "kube-router matches policy peers with ipsets, but none were found"

        cluster.kubectl("delete", "networkpolicy", "-n", namespace, "web-ingress")
        wait_for(lambda: outcomes() == everyone, 60, lambda: f"all clients admitted after the policy: {outcomes()}")
    finally:
        for ns in (peer_ns, other_ns):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_the_policy_controller_listens_on_the_cluster_address_only(cluster: Cluster) -> None:
    """kube-router's health server would bind every interface: it is off, and metrics (with /healthz)
    are served on the cluster address alone."""
    listening = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout.splitlines()
    theirs = [line.split()[3] for line in listening if '"kube-router"' in line]
    assert theirs == [f"{cluster.config.host_ip}:{netpol.METRICS_PORT}"], listening
    with socket.create_connection((str(cluster.config.host_ip), netpol.METRICS_PORT), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        assert s.recv(12).startswith(b"HTTP/1.0 200")


def test_a_pod_gets_no_route_to_a_service_without_endpoints(cluster: Cluster, namespace: str) -> None:
    """kube-router ACCEPTs a pod's packets before kube-proxy's REJECT for a Service with no endpoints
    could refuse them; the cluster's routing rule (netpol.service_rule) answers them at once instead
    of letting them leave the machine by its default route while the client waits for a timeout."""
    cluster.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nothing", "namespace": namespace},
                   "spec": {"selector": {"app": "nothing"}, "ports": [{"port": 80, "targetPort": PORT}]}},
                  {**_sleeper("client", {}), "metadata": {"name": "client", "namespace": namespace}})
    client = _wait_running(cluster, namespace, "client")
    ip = cluster.get(f"/api/v1/namespaces/{namespace}/services/nothing")["spec"]["clusterIP"]
    assert probe_from(client, f"{ip}:80") == ["unreachable"]
    # A Service with endpoints is DNATed before routing, so the rule does not touch it: the API server
    # answers (400 to plain HTTP on its TLS port, an answer all the same).
    assert probe_from(client, f"{cluster.config.kubernetes_service_ip}:443") == ["bad"]
