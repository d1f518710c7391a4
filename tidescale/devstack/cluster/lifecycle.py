"""`tidescale cluster up | down | status`: bring the local cluster up in order, and tear it all down.

Up: the host link and its address, certificates, etcd, kube-apiserver, then the controllers and
scheduler, then one node agent per node, then kube-proxy and kube-router's network policy
controller, then cluster DNS. Any failure or Ctrl-C on the way runs the same teardown as `down`, so
nothing is left behind: no process, network namespace, link, mount point, kube-proxy or kube-router
rule, kube-router ipset or routing rule.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tidescale.contracts.errors import MissingToolError, TidescaleError
from tidescale.devstack.cluster import controlplane as cp
from tidescale.devstack.cluster import netpol
from tidescale.devstack.cluster.config import ClusterConfig, tool
from tidescale.devstack.cluster.kubectl import deployment_available, kubectl, render_manifest, wait_for
from tidescale.devstack.node.kubeapi import ApiError, KubeApi
from tidescale.devstack.tools import SETUP_HINT

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
NETWORK_POLICY = "kube-router"  # its policy controller alone (netpol.py)


@dataclass
class Step:
    name: str
    seconds: float


def _preflight() -> None:
    if os.geteuid() != 0:
        raise TidescaleError("the local cluster makes network namespaces and mounts: run it as root")
    cp.require_binaries()
    for prog in ("ip", "iptables-restore", "ipset", "nsenter", "unshare", "openssl"):
        if shutil.which(prog) is None:
            raise MissingToolError(f"{prog} is not installed: {SETUP_HINT}")
    _let_non_root_containers_run_python()


def _let_non_root_containers_run_python() -> None:
    """Containers run as their securityContext's user, and tidescale's image is the venv, whose
    interpreter may live under a root-only home (pyenv in /root). Grant search (x) on those
    directories, never read, so a non-root container can exec it as it would in its image."""
    real = Path(os.path.realpath(sys.executable))
    for directory in reversed(real.parents):
        mode = directory.stat().st_mode
        if not mode & 0o001:
            directory.chmod(mode | 0o001)


def is_up(config: ClusterConfig) -> bool:
    pids = cp.recorded_pids(config)
    return (bool(pids) and all(cp.alive(pids[n]) for n in (*CONTROL_PLANE, NETWORK_POLICY) if n in pids)
            and "kube-apiserver" in pids)


def up(config: ClusterConfig, progress: Callable[[str], None] = lambda s: None, monitoring: bool = True) -> list[Step]:
    _preflight()
    if is_up(config):
        progress("the cluster is already up")
        return []
    down(config, quiet=True)  # a half-dead earlier run leaves nothing in the way
    steps: list[Step] = []
    try:
        _up(config, progress, steps, monitoring)
    except BaseException:
        progress("bringing the cluster up failed; tearing down what was started")
        down(config, quiet=True)
        raise
    return steps


def _timed(steps: list[Step], name: str, progress: Callable[[str], None], fn: Callable[[], object]) -> None:
    progress(f"{name} ...")
    start = time.monotonic()
    fn()
    steps.append(Step(name, round(time.monotonic() - start, 1)))


def _up(config: ClusterConfig, progress: Callable[[str], None], steps: list[Step], monitoring: bool) -> None:
    from tidescale.devstack.node.sandbox import HostNetwork

    host = HostNetwork(config.host_ip, config.pod_cidr)
    _timed(steps, "host network", progress, host.up)
    ids = cp.make_identities(config)
    cp.write_kubeconfigs(config, ids)
    argv, ready = cp.component_argv(config, ids), cp.readiness(config, ids)

    def start(name: str) -> None:
        proc = cp.start_daemon(config, name, argv[name])
        cp.wait_ready(proc, *ready[name])

    for name in CONTROL_PLANE[:-1]:
        _timed(steps, name, progress, lambda n=name: start(n))  # type: ignore[misc]
    api = KubeApi(config.admin_kubeconfig)
    _timed(steps, "node agents", progress, lambda: _start_agents(config, api))
    # kube-proxy last: it reports healthy only once its Node exists (30 s of waiting otherwise).
    _timed(steps, "kube-proxy", progress, lambda: start("kube-proxy"))
    # kube-router needs its Node too (it reads the node's InternalIP to know which pods are local).
    _timed(steps, "network policies (kube-router)", progress,
           lambda: _start_kube_router(config, argv[NETWORK_POLICY], ready[NETWORK_POLICY][0]))
    cp.start_daemon(config, "local-provisioner", [
        sys.executable, "-m", "tidescale.devstack.cluster.provisioner", f"--kubeconfig={config.admin_kubeconfig}",
        f"--root={config.state_dir / 'volumes'}"])
    _timed(steps, "cluster DNS (CoreDNS)", progress, lambda: _install_dns(config, api))
    from tidescale.devstack.cluster.addons import install_dcgm_exporter

    _timed(steps, "simulated GPUs (dcgm-exporter on every node)", progress, lambda: install_dcgm_exporter(config, api))
    if monitoring:
        from tidescale.devstack.cluster.addons import install_monitoring_stack

        _timed(steps, "monitoring (prometheus-operator, Prometheus, Alertmanager)", progress,
               lambda: install_monitoring_stack(config, api))


def _start_kube_router(config: ClusterConfig, argv: list[str], metrics_url: str) -> None:
    """Ready once its chains hang off INPUT/FORWARD/OUTPUT and a first full sync has run, so every pod
    that exists now is enforced; later pods and policies are programmed as their events arrive."""
    netpol.grant(config)
    netpol.add_service_rule(config)  # kube-router's ACCEPT would let pods' packets to a Service without endpoints out
    proc = cp.start_daemon(config, NETWORK_POLICY, argv, env=netpol.env(config))
    cp.wait_ready(proc, metrics_url, True,
                  ok=lambda r: r.is_success and netpol.synced(r.text) and netpol.chains_installed())


def _start_agents(config: ClusterConfig, api: KubeApi) -> None:
    ca = config.pki_dir / "ca.crt"
    for node in config.node_names():
        cp.start_daemon(config, f"node-agent-{node}", [
            sys.executable, "-m", "tidescale.devstack.node.agent", f"--node={node}",
            f"--kubeconfig={config.kubeconfig_for(node)}", f"--state-dir={config.state_dir}",
            f"--host-ip={config.host_ip}", f"--dns-ip={config.dns_ip}", f"--cluster-domain={config.cluster_domain}",
            f"--ca={ca}", f"--kubernetes-service={config.kubernetes_service_ip}:443",
        ])

    def ready() -> bool:
        nodes = api.get("/api/v1/nodes").get("items", [])
        ok = {n["metadata"]["name"] for n in nodes
              if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))}
        return set(config.node_names()) <= ok

    wait_for("the nodes", ready, 90, lambda: _log_tail(config, f"node-agent-{config.node_names()[0]}"))


def _install_dns(config: ClusterConfig, api: KubeApi) -> None:
    kubectl(config, "apply", "-f", "-", stdin=render_manifest(config, "coredns.yaml"))
    wait_for("CoreDNS", lambda: deployment_available(api, "kube-system", "coredns"), 120,
             lambda: _log_tail(config, f"node-agent-{config.node_names()[0]}"))


def _log_tail(config: ClusterConfig, name: str, lines: int = 15) -> str:
    path = config.logs_dir / f"{name}.log"
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def down(config: ClusterConfig, quiet: bool = False) -> None:
    """Stop everything in parallel and remove every trace; safe to run any number of times."""
    from tidescale.devstack.node.launch import cleanup_mountpoints
    from tidescale.devstack.node.sandbox import HostNetwork

    agents = [n for n in cp.recorded_pids(config) if n.startswith("node-agent-")]
    cp.stop_recorded(config, agents, grace=45)  # agents stop their pods gracefully first
    _kill_container_leftovers(config)
    cp.stop_recorded(config, None, grace=10)  # kube-router too: its rules stay (and enforce) until removed here
    if tool("kube-proxy").exists() and shutil.which("iptables-restore"):
        subprocess.run([str(tool("kube-proxy")), "--cleanup", "--proxy-mode=iptables"], capture_output=True)
    remove_kube_chains()
    netpol.remove_ipsets()  # once no chain matches on them
    netpol.remove_service_rules()
    HostNetwork(config.host_ip, config.pod_cidr).down()
    nodes = config.state_dir / "nodes"
    for specs in sorted(nodes.glob("*/pods/*/specs")) if nodes.is_dir() else []:
        cleanup_mountpoints(specs)
    for path in (config.state_dir / "etcd", nodes, config.state_dir / "pids", config.state_dir / "volumes"):
        shutil.rmtree(path, ignore_errors=True)


def remove_kube_chains() -> None:
    """What `kube-proxy --cleanup` keeps (KUBE-FIREWALL, which a kubelet would own) goes too, and
    kube-router's chains (KUBE-ROUTER-*, KUBE-NWPLCY-*, KUBE-POD-FW-*) with their jumps from the
    built-in chains: every rule of a built-in chain that names a KUBE-* chain, then every KUBE-* chain."""
    for binary in ("iptables", "ip6tables"):
        if shutil.which(binary) is None:
            continue
        for table in ("filter", "nat", "mangle"):
            listed = subprocess.run([binary, "-t", table, "-S"], capture_output=True, text=True).stdout.splitlines()
            for rule in listed:
                parts = shlex.split(rule)
                if parts[:1] == ["-A"] and not parts[1].startswith("KUBE-") and "KUBE-" in rule:
                    subprocess.run([binary, "-t", table, "-D", *parts[1:]], capture_output=True)
            chains = [r.split()[1] for r in listed if r.startswith("-N KUBE-")]
            for chain in chains:
                subprocess.run([binary, "-t", table, "-F", chain], capture_output=True)
            for chain in chains:
                subprocess.run([binary, "-t", table, "-X", chain], capture_output=True)


def kube_chains() -> list[str]:
    out: list[str] = []
    for binary in ("iptables", "ip6tables"):
        if shutil.which(f"{binary}-save"):
            dump = subprocess.run([f"{binary}-save"], capture_output=True, text=True).stdout
            out += [f"{binary}:{line.split()[0][1:]}" for line in dump.splitlines() if line.startswith(":KUBE-")]
    return out


def leftovers(config: ClusterConfig) -> list[str]:
    """Whatever a cluster made that is still here: namespaces, links, rules, ipsets, mounts, processes."""
    from tidescale.devstack.node.sandbox import HostNetwork

    found = HostNetwork.leftovers() + kube_chains() + [f"ipset:{name}" for name in netpol.ipsets()]
    found += netpol.service_rules()
    state = str(config.state_dir)
    with contextlib.suppress(OSError):
        found += [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if state in line]
    found += [f"process {name}" for name, pid in cp.recorded_pids(config).items() if cp.alive(pid)]
    return found


def _kill_container_leftovers(config: ClusterConfig) -> None:
    import signal

    nodes = config.state_dir / "nodes"
    for pidfile in nodes.glob("*/pods/*/pids/*") if nodes.is_dir() else []:
        with contextlib.suppress(ValueError, OSError):
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)


def status(config: ClusterConfig) -> dict[str, object]:
    pids = cp.recorded_pids(config)
    processes = {name: ("running" if cp.alive(pid) else "dead") for name, pid in sorted(pids.items())}
    out: dict[str, object] = {"up": is_up(config), "api": config.api_url, "kubeconfig": str(config.admin_kubeconfig),
                              "processes": processes}
    if is_up(config):
        with contextlib.suppress(ApiError, OSError):
            api = KubeApi(config.admin_kubeconfig, timeout=5)
            out["version"] = api.get("/version").get("gitVersion")
            out["nodes"] = {n["metadata"]["name"]: next((c["status"] for c in n["status"].get("conditions", [])
                                                         if c["type"] == "Ready"), "Unknown")
                            for n in api.get("/api/v1/nodes").get("items", [])}
    out["leftovers"] = leftovers(config) if not is_up(config) else []
    return out


def kubeconfig_path(config: ClusterConfig) -> Path:
    if not config.admin_kubeconfig.exists():
        raise TidescaleError("the local cluster has never been up here: run `tidescale cluster up`")
    return config.admin_kubeconfig
