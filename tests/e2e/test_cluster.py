"""The local cluster itself: upstream control plane, our node agent, kube-proxy and CoreDNS."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from ipaddress import IPv4Address
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import NODES, Cluster, pod_json
from tests.waiting import wait_for
from tidescale.contracts.kubeapi import deployment_event, post_event_once, series_name

pytestmark = [pytest.mark.e2e, pytest.mark.builds()]  # needs no background build

IMAGE = "ghcr.io/tidescale/tidescale:0.1.0"  # the node agent runs the venv for tidescale's image


def pod(name: str, script: str, restart: str = "Never", **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": IMAGE, "command": ["python", "-c", script], **spec.pop("container", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 5, "containers": [container], **spec}}


def phase(cluster: Cluster, namespace: str, name: str) -> str:
    return str(pod_json(cluster, namespace, name).get("status", {}).get("phase", ""))


def finished(cluster: Cluster, namespace: str, name: str) -> str:
    def done() -> str:
        current = phase(cluster, namespace, name)
        return current if current in ("Succeeded", "Failed") else ""

    return wait_for(done, 90, f"pod {name} to finish")


def apply_in(cluster: Cluster, namespace: str, *docs: dict[str, Any]) -> None:
    for doc in docs:
        doc.setdefault("metadata", {})["namespace"] = namespace
    cluster.apply(*docs)


def test_nodes_are_ready_with_leases_and_pod_cidrs(cluster: Cluster) -> None:
    nodes = cluster.get("/api/v1/nodes")["items"]
    assert len(nodes) == NODES
    cidrs = set()
    for node in nodes:
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        cidrs.add(node["spec"]["podCIDR"])
        name = node["metadata"]["name"]
        lease = cluster.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
        assert lease["spec"]["holderIdentity"] == node["metadata"]["name"]
    assert len(cidrs) == NODES


@pytest.fixture(scope="module")
def web(cluster: Cluster) -> tuple[str, list[dict[str, Any]]]:
    ns = "e2e-web"
    cluster.kubectl("create", "namespace", ns, check=False)
    labels = {"app": "web"}
    apply_in(cluster, ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{
                "name": "http", "image": IMAGE, "command": ["python", "-m", "http.server", "8080"],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}}]}}},
    }, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": "http"}]},
    })

    def available() -> bool:
        dep = cluster.get(f"/apis/apps/v1/namespaces/{ns}/deployments/web")
        return int(dep.get("status", {}).get("availableReplicas") or 0) == 2

    wait_for(available, 120, "the web Deployment's 2 replicas")
    return ns, cluster.pods(ns, "app=web")


Web = tuple[str, list[dict[str, Any]]]


def test_each_pod_has_its_own_address_and_the_same_port(cluster: Cluster, web: Web) -> None:
    _, pods = web
    ips = [IPv4Address(p["status"]["podIP"]) for p in pods]
    assert len(set(ips)) == 2
    assert all(ip in cluster.config.pod_cidr for ip in ips)
    for ip in ips:  # both listen on 8080, each in its own network namespace
        assert httpx.get(f"http://{ip}:8080/", timeout=5).status_code == 200


def test_endpointslices_follow_readiness(cluster: Cluster, web: Web) -> None:
    ns, pods = web
    slices = cluster.get(f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices")["items"]
    ready = {a for s in slices for e in s.get("endpoints", []) if e["conditions"].get("ready") for a in e["addresses"]}
    assert ready == {p["status"]["podIP"] for p in pods}


def test_a_pod_reaches_a_service_by_dns_name_through_kube_proxy(cluster: Cluster,
                                                                 web: Web) -> None:
    ns, _ = web
    # kube-proxy programs a Service's rules within a sync period of its endpoints: retry like a client.
    script = ("import urllib.request, socket, sys, time\n"
              "for _ in range(30):\n"
              "    try:\n"
              "        ip = socket.gethostbyname('web')\n"
              f"        status = urllib.request.urlopen('http://web.{ns}.svc.cluster.local/', timeout=5).status\n"
              "        print(ip, status); break\n"
              "    except OSError as exc:\n"
              "        print('retry', exc, file=sys.stderr); time.sleep(1)\n")
    apply_in(cluster, ns, pod("client", script))
    assert finished(cluster, ns, "client") == "Succeeded"
    service_ip = cluster.get(f"/api/v1/namespaces/{ns}/services/web")["spec"]["clusterIP"]
    out = cluster.logs_of(ns, pod_json(cluster, ns, "client"), "main").splitlines()
    assert out[-1].split() == [service_ip, "200"], out


def test_the_projected_service_account_token_authenticates(cluster: Cluster, namespace: str) -> None:
    script = (
        "import json, ssl, urllib.request\n"
        "d = '/var/run/secrets/kubernetes.io/serviceaccount/'\n"
        "ctx = ssl.create_default_context(cafile=d + 'ca.crt')\n"
        "body = json.dumps({'apiVersion': 'authentication.k8s.io/v1', 'kind': 'SelfSubjectReview'}).encode()\n"
        "req = urllib.request.Request('https://kubernetes.default.svc/apis/authentication.k8s.io/v1/selfsubjectreviews',"
        " data=body, headers={'Authorization': 'Bearer ' + open(d + 'token').read(),"
        " 'Content-Type': 'application/json'})\n"
        "print(json.load(urllib.request.urlopen(req, context=ctx))['status']['userInfo']['username'])\n"
        "print(open(d + 'namespace').read())\n"
    )
    apply_in(cluster, namespace, pod("whoami", script))
    assert finished(cluster, namespace, "whoami") == "Succeeded"
    out = cluster.logs_of(namespace, pod_json(cluster, namespace, "whoami"), "main").split()
    assert out == [f"system:serviceaccount:{namespace}:default", namespace]


def test_events_named_by_a_change_are_created_once_and_counted_up(cluster: Cluster, namespace: str) -> None:
    """`post_event_once` against the real API server and client: a taken name is a 409, the Event
    read back carries its lastTimestamp, and a dict patch (strategic merge) counts it up."""
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.config.admin_kubeconfig)))
    now = datetime.now(UTC).replace(microsecond=0)

    def post(message: str, at: datetime) -> str:
        body = deployment_event(namespace, "triton", reason="TidescaleRecommendation", message=message,
                                component="e2e", now=at, name_prefix="tidescale-recommendation", series_key="1->3")
        return post_event_once(api, body, now=at, twin_window_s=60)

    assert post("replica a", now) == "created"
    assert post("replica b", now + timedelta(seconds=10)) == "twin"
    assert post("again", now + timedelta(minutes=20)) == "repeated"
    [event] = [e for e in cluster.get(f"/api/v1/namespaces/{namespace}/events")["items"]
               if e["reason"] == "TidescaleRecommendation"]
    assert event["metadata"]["name"] == series_name("triton", "tidescale-recommendation", "1->3")
    assert (event["count"], event["message"]) == (2, "again")


def test_env_value_from_and_configmap_volumes(cluster: Cluster, namespace: str) -> None:
    apply_in(cluster, namespace,
             {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
              "data": {"mode": "fast", "f.txt": "hi"}},
             {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"}, "stringData": {"token": "s3cret"}})
    script = ("import os, json; print(json.dumps({k: os.environ[k] for k in ('MODE', 'TOKEN', 'POD', 'IP', 'REF')}));"
              " print(open('/etc/e2e/f.txt').read())")
    apply_in(cluster, namespace, pod("env", script, container={
        "env": [{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "REF", "value": "$(MODE)-x"}],
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/e2e", "readOnly": True}]},
        volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}]))
    assert finished(cluster, namespace, "env") == "Succeeded"
    p = pod_json(cluster, namespace, "env")
    lines = cluster.logs_of(namespace, p, "main").splitlines()
    assert json.loads(lines[0]) == {"MODE": "fast", "TOKEN": "s3cret", "POD": "env", "IP": p["status"]["podIP"],
                                    "REF": "fast-x"}
    assert lines[1] == "hi"


def test_a_crashing_container_restarts_with_its_last_state(cluster: Cluster, namespace: str) -> None:
    apply_in(cluster, namespace, pod("crash", "import sys; sys.exit(3)", restart="Always"))

    def restarted() -> dict[str, Any] | None:
        statuses = pod_json(cluster, namespace, "crash").get("status", {}).get("containerStatuses") or [{}]
        return statuses[0] if statuses[0].get("restartCount", 0) >= 1 else None

    status = wait_for(restarted, 60, "a restart")
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["lastState"]["terminated"]["reason"] == "Error"


def test_a_failing_liveness_probe_restarts_the_container(cluster: Cluster, namespace: str) -> None:
    apply_in(cluster, namespace, pod("live", "import time; time.sleep(600)", restart="Always", container={
        "livenessProbe": {"tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 2}}))

    def restarts() -> int:
        statuses = pod_json(cluster, namespace, "live").get("status", {}).get("containerStatuses") or [{}]
        return int(statuses[0].get("restartCount", 0))

    wait_for(restarts, 60, "a liveness restart")


def test_deletion_sends_sigterm_and_waits_for_the_container(cluster: Cluster, namespace: str) -> None:
    script = ("import signal, sys, time\n"
              "def bye(*_):\n    print('SIGTERM', flush=True); time.sleep(1); sys.exit(0)\n"
              "signal.signal(signal.SIGTERM, bye); print('up', flush=True); time.sleep(600)\n")
    apply_in(cluster, namespace, pod("term", script, restart="Always"))
    wait_for(lambda: phase(cluster, namespace, "term") == "Running", 60, "the pod to run")
    p = pod_json(cluster, namespace, "term")
    # Running means the process was started, not that Python has installed its handler yet: on a busy
    # machine a SIGTERM before that kills it silently (CI's run of stop 78 logged nothing at all).
    wait_for(lambda: cluster.logs_of(namespace, p, "main").split() == ["up"], 60, "the handler to be installed")
    cluster.kubectl("delete", "pod", "-n", namespace, "term", "--wait=true", "--timeout=60s")
    assert cluster.logs_of(namespace, p, "main").split() == ["up", "SIGTERM"]
