"""The node agent: registers a Node and runs the pods the scheduler binds to it.

It stands in for the kubelet and its container runtime, the one part of the cluster that cannot
run here. It speaks to the API server as ``system:node:<name>`` so the Node authorizer and
NodeRestriction admission limit it exactly as they limit a kubelet.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
import time
from datetime import UTC, datetime
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from tidescale.devstack.node.kubeapi import ApiError, Json, KubeApi
from tidescale.devstack.node.pods import GpuAllocator, NodeContext, PodRunner
from tidescale.devstack.node.podspec import POD_RESOURCES, TokenCache, kubelet_root
from tidescale.devstack.node.sandbox import DnsConfig

log = logging.getLogger("tidescale.node")

LEASE_S = 40
RENEW_S = 10


def micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeAgent:
    def __init__(self, name: str, api: KubeApi, host_ip: str, dns: DnsConfig, state_dir: Path, ca_pem: bytes,
                 kubernetes_service: tuple[str, int], gpus: int = 4, heartbeat_api: KubeApi | None = None) -> None:
        self.name, self.api, self.host_ip = name, api, host_ip
        # The kubelet renews its lease on a client of its own, so a renewal never waits behind pod traffic.
        self.heartbeat_api = heartbeat_api or api
        svc_host, svc_port = kubernetes_service
        service_env = {
            "KUBERNETES_SERVICE_HOST": svc_host, "KUBERNETES_SERVICE_PORT": str(svc_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(svc_port), "KUBERNETES_PORT": f"tcp://{svc_host}:{svc_port}",
            f"KUBERNETES_PORT_{svc_port}_TCP": f"tcp://{svc_host}:{svc_port}",
            f"KUBERNETES_PORT_{svc_port}_TCP_PROTO": "tcp", f"KUBERNETES_PORT_{svc_port}_TCP_PORT": str(svc_port),
            f"KUBERNETES_PORT_{svc_port}_TCP_ADDR": svc_host,
        }
        node_dir = state_dir / "nodes" / name
        self.ctx = NodeContext(api=api, node_name=name, host_ip=host_ip, dns=dns, state_dir=node_dir, ca_pem=ca_pem,
                               service_env=service_env, tokens=TokenCache(api, {}),
                               gpus=GpuAllocator(gpus, kubelet_root(node_dir) / POD_RESOURCES))
        self.gpu_count = gpus
        self.runners: dict[str, PodRunner] = {}
        self.used_ips: set[IPv4Address] = set()
        self.pod_cidr: IPv4Network | None = None
        self.stopping = threading.Event()

    # -- node ------------------------------------------------------------------------------------
    def node_status(self) -> Json:
        stamp = micro_now()[:19] + "Z"
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "tidescale node agent is ready", "lastHeartbeatTime": stamp}
        capacity = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi",
                    "nvidia.com/gpu": str(self.gpu_count)}
        return {
            "capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": self.host_ip}, {"type": "Hostname", "address": self.name}],
            "conditions": [ready] + [
                {"type": t, "status": "False", "reason": f"KubeletHas{r}", "lastHeartbeatTime": stamp}
                for t, r in (("MemoryPressure", "SufficientMemory"), ("DiskPressure", "NoDiskPressure"),
                             ("PIDPressure", "SufficientPID"))],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": "v0.0.0-tidescale-node-agent", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64", "containerRuntimeVersion": "host://0",
                         "osImage": "tidescale node agent", "kernelVersion": "", "machineID": "",
                         "systemUUID": "", "bootID": ""},
        }

    def register(self) -> None:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": {
                    "kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                    "node.kubernetes.io/instance-type": "tidescale-sim-gpu"}}}
        try:
            self.api.create("/api/v1/nodes", body)
        except ApiError as exc:
            if exc.status != 409:
                raise
        self.api.patch_strategic(f"/api/v1/nodes/{self.name}/status", {"status": self.node_status()})
        deadline = time.monotonic() + 60
        while self.pod_cidr is None and time.monotonic() < deadline:
            cidr = self.api.get(f"/api/v1/nodes/{self.name}").get("spec", {}).get("podCIDR")
            if cidr:
                self.pod_cidr = IPv4Network(cidr)
            else:
                time.sleep(0.5)
        if self.pod_cidr is None:
            raise RuntimeError("the node got no podCIDR from kube-controller-manager's node IPAM")

    def _heartbeat(self) -> None:
        """Renew the lease and the Ready condition until stopped, whatever one round raises: a node
        whose heartbeat stops is unreachable 40 s later, and its pods are evicted 5 minutes after."""
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        while True:
            renewed = False
            try:
                renewed = self._renew_lease(lease_path)
                with contextlib.suppress(ApiError, OSError):
                    self.heartbeat_api.patch_strategic(f"/api/v1/nodes/{self.name}/status",
                                                       {"status": self.node_status()})
            except Exception:
                log.exception("heartbeat failed; trying again")
            if self.stopping.wait(RENEW_S if renewed else 2):
                return

    def _renew_lease(self, path: str) -> bool:
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_S, "renewTime": micro_now()}
        api = self.heartbeat_api
        try:
            try:
                api.patch_merge(path, {"spec": spec})
            except ApiError as exc:
                if exc.status != 404:
                    raise
                node = api.get(f"/api/v1/nodes/{self.name}")
                api.create("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": node["metadata"]["uid"]}]},
                    "spec": spec})
            return True
        except (ApiError, OSError) as exc:
            log.warning("lease renewal failed: %s", exc)
            return False

    # -- pods ------------------------------------------------------------------------------------
    def _allocate_ip(self) -> IPv4Address:
        assert self.pod_cidr is not None
        for ip in list(self.pod_cidr.hosts())[1:]:
            if ip not in self.used_ips:
                self.used_ips.add(ip)
                return ip
        raise RuntimeError(f"pod addresses of {self.pod_cidr} exhausted")

    def _handle(self, pod: Json) -> None:
        uid = pod["metadata"]["uid"]
        runner = self.runners.get(uid)
        if runner is None:
            if pod["metadata"].get("deletionTimestamp") and not pod.get("status", {}).get("podIP"):
                with contextlib.suppress(ApiError):
                    self.api.delete(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}",
                                    {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
                return
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                return
            ip = self.ctx.host_ip if pod["spec"].get("hostNetwork") else self._allocate_ip()
            runner = PodRunner(self.ctx, pod, IPv4Address(ip))
            self.runners[uid] = runner
            runner.start()
        else:
            runner.update(pod)

    def _reap(self) -> None:
        for uid, runner in list(self.runners.items()):
            if runner.done.is_set():
                del self.runners[uid]
                self.used_ips.discard(runner.ip)

    def _watch_pods(self) -> None:
        selector = f"spec.nodeName={self.name}"
        while not self.stopping.is_set():
            try:
                listing = self.api.get("/api/v1/pods", fieldSelector=selector)
                seen = set()
                for pod in listing.get("items", []):
                    seen.add(pod["metadata"]["uid"])
                    self._handle(pod)
                for uid, runner in list(self.runners.items()):
                    if uid not in seen:
                        runner.deleting.set()
                rv = listing["metadata"]["resourceVersion"]
                while not self.stopping.is_set():
                    for event in self.api.watch("/api/v1/pods", rv, fieldSelector=selector):
                        self._reap()
                        obj = event.get("object", {})
                        if event.get("type") == "ERROR":
                            raise ApiError(int(obj.get("code", 500)), str(obj.get("message")))
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if event.get("type") == "BOOKMARK":
                            continue
                        if event.get("type") == "DELETED":
                            gone = self.runners.get(obj["metadata"]["uid"])
                            if gone is not None:
                                gone.deleting.set()
                            continue
                        self._handle(obj)
                        if self.stopping.is_set():
                            break
                    self._reap()
            except Exception as exc:
                if not self.stopping.is_set():
                    log.warning("pod watch: %s; listing again", exc)
                    self.stopping.wait(1.0)

    def run(self) -> None:
        self.register()
        threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True).start()
        watcher = threading.Thread(target=self._watch_pods, name="pod-watch", daemon=True)
        watcher.start()
        log.info("node %s ready (pod CIDR %s)", self.name, self.pod_cidr)
        self.stopping.wait()
        runners = list(self.runners.values())
        for r in runners:
            r.deleting.set()
        for r in runners:
            r.done.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tidescale-node-agent", description=__doc__)
    parser.add_argument("--node", required=True)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--host-ip", required=True)
    parser.add_argument("--dns-ip", required=True)
    parser.add_argument("--cluster-domain", default="cluster.local")
    parser.add_argument("--ca", type=Path, required=True)
    parser.add_argument("--kubernetes-service", required=True, help="ip:port of the kubernetes Service")
    parser.add_argument("--gpus", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    domain = args.cluster_domain
    dns = DnsConfig(nameserver=IPv4Address(args.dns_ip), search=(f"svc.{domain}", domain))
    svc_ip, _, svc_port = args.kubernetes_service.partition(":")
    agent = NodeAgent(args.node, KubeApi(args.kubeconfig), args.host_ip, dns, args.state_dir,
                      args.ca.read_bytes(), (svc_ip, int(svc_port)), gpus=args.gpus,
                      heartbeat_api=KubeApi(args.kubeconfig, timeout=RENEW_S))

    def stop(signum: int, _frame: object) -> None:
        agent.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
