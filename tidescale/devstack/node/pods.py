"""One pod on the node: its sandbox, containers, probes, restarts, status and graceful end.

This is the part of the kubelet the control plane depends on. The rules followed are the
kubelet's: init containers run one by one to completion; containers restart by the pod's
restartPolicy with back-off 10 s doubling to 5 min (reset after 10 min running); a startup probe
holds liveness and readiness off; a failed liveness probe restarts the container; readiness drives
the Ready condition the endpointslice controller reads; deletion runs preStop, SIGTERM, and
SIGKILL after the grace period, then removes the pod object.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import httpx

from tidescale.devstack.node.images import ImageNotMapped, host_image
from tidescale.devstack.node.kubeapi import ApiError, Json, KubeApi
from tidescale.devstack.node.launch import ContainerLaunch, Mount, launch_argv
from tidescale.devstack.node.podspec import (
    PodSpecError,
    SourceReader,
    TokenCache,
    VolumeBuilder,
    container_env,
    container_mounts,
    expand_args,
    kubelet_root,
)
from tidescale.devstack.node.sandbox import DnsConfig, PodSandbox

log = logging.getLogger("tidescale.node")

BACKOFF_START_S = 10.0
BACKOFF_MAX_S = 300.0
BACKOFF_RESET_S = 600.0
VOLUME_SYNC_S = 5.0


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class NodeContext:
    """What every pod on a node shares."""

    api: KubeApi
    node_name: str
    host_ip: str
    dns: DnsConfig
    state_dir: Path
    ca_pem: bytes
    service_env: dict[str, str]
    tokens: TokenCache
    gpus: GpuAllocator


@dataclass
class GpuAllocator:
    """Simulated GPUs handed to containers that limit nvidia.com/gpu, as a device plugin would.

    The assignment is written where the simulated dcgm-exporter reads it, standing in for the
    kubelet's pod-resources API that the real dcgm-exporter queries for its pod labels.
    """

    count: int
    file: Path
    # key -> namespace, pod, container, pod IP, GPU ids
    assigned: dict[str, tuple[str, str, str, str, list[int]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def allocate(self, key: str, namespace: str, pod: str, container: str, ip: str, n: int) -> list[int]:
        with self.lock:
            if key in self.assigned:
                return self.assigned[key][4]
            used = {i for *_, ids in self.assigned.values() for i in ids}
            free = [i for i in range(self.count) if i not in used][:n]
            if len(free) < n:
                raise PodSpecError(f"{n} GPU(s) wanted, {self.count - len(used)} free on this node")
            self.assigned[key] = (namespace, pod, container, ip, free)
            self._write()
            return free

    def release(self, prefix: str) -> None:
        with self.lock:
            for key in [k for k in self.assigned if k.startswith(prefix)]:
                del self.assigned[key]
            self._write()

    def _write(self) -> None:
        import json

        rows = [{"namespace": ns, "pod": pod, "container": c, "ip": ip, "gpus": ids}
                for ns, pod, c, ip, ids in self.assigned.values()]
        self.file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, self.file)


@dataclass
class ProbeState:
    spec: Json
    next_at: float = 0.0
    successes: int = 0
    failures: int = 0
    passed: bool = False


@dataclass
class ContainerState:
    spec: Json
    init: bool = False
    proc: subprocess.Popen[bytes] | None = None
    started_at: str | None = None
    started_mono: float = 0.0
    restarts: int = 0
    backoff_s: float = 0.0
    next_start: float = 0.0
    last_terminated: Json | None = None
    terminated: Json | None = None  # final state (init containers and non-restarting ones)
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    ready: bool = False
    started: bool = False
    startup: ProbeState | None = None
    liveness: ProbeState | None = None
    readiness: ProbeState | None = None

    def reset_probes(self) -> None:
        spec = self.spec
        self.startup = ProbeState(spec["startupProbe"]) if spec.get("startupProbe") else None
        self.liveness = ProbeState(spec["livenessProbe"]) if spec.get("livenessProbe") else None
        self.readiness = ProbeState(spec["readinessProbe"]) if spec.get("readinessProbe") else None
        self.ready, self.started = False, self.startup is None


class PodRunner:
    """Runs one pod until it is deleted; owns a thread."""

    def __init__(self, ctx: NodeContext, pod: Json, ip: IPv4Address) -> None:
        self.ctx, self.pod, self.ip = ctx, pod, ip
        meta = pod["metadata"]
        self.uid, self.name, self.namespace = meta["uid"], meta["name"], meta["namespace"]
        self.dir = ctx.state_dir / "pods" / self.uid
        self.host_network = bool(pod["spec"].get("hostNetwork"))
        self.sandbox: PodSandbox | None = None
        self.volumes: VolumeBuilder | None = None
        self.volume_paths: dict[str, Path] = {}
        self.inits = [ContainerState(c, init=True) for c in pod["spec"].get("initContainers") or []]
        self.containers = [ContainerState(c) for c in pod["spec"]["containers"]]
        self.start_time = now()
        self.initialized = not self.inits
        self.sandbox_ready = False
        self.deleting = threading.Event()
        self.done = threading.Event()
        self._last_status: Json | None = None
        self._thread = threading.Thread(target=self._run, name=f"pod-{self.namespace}/{self.name}", daemon=True)

    @property
    def pod_ip(self) -> str:
        return self.ctx.host_ip if self.host_network else str(self.ip)

    def start(self) -> None:
        self._thread.start()

    def update(self, pod: Json) -> None:
        self.pod["metadata"] = pod["metadata"]
        if pod["metadata"].get("deletionTimestamp"):
            self.deleting.set()

    def stop(self) -> None:
        """The agent is shutting down: stop containers and the sandbox, keep the pod object."""
        self.deleting.set()
        self._thread.join(timeout=60)

    # -- lifecycle -------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._setup_volumes_once():
                if self.deleting.wait(2.0):
                    return
            next_sync = time.monotonic() + VOLUME_SYNC_S
            while not self.deleting.is_set():
                self._step()
                if time.monotonic() >= next_sync and self.volumes is not None:
                    self.volumes.refresh()
                    next_sync = time.monotonic() + VOLUME_SYNC_S
                self._report()
                self.deleting.wait(0.5)
        except Exception as exc:
            log.exception("pod %s/%s failed", self.namespace, self.name)
            for c in self.containers:
                if c.proc is None:
                    c.waiting_reason, c.waiting_message = "CreateContainerError", str(exc)[:300]
            with contextlib.suppress(Exception):
                self._report()
            self.deleting.wait()
        finally:
            self._teardown()
            self.done.set()

    def _setup(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "pod").write_text(f"{self.namespace}/{self.name}")  # names the pids for `cluster usage`
        if not self.host_network:
            dns = self.ctx.dns if self.pod["spec"].get("dnsPolicy", "ClusterFirst") == "ClusterFirst" else None
            if dns is not None:
                ns = self.namespace
                dns = DnsConfig(nameserver=dns.nameserver, search=(f"{ns}.svc.{dns.search[1]}", *dns.search))
            self.sandbox = PodSandbox.create(self.uid, self.ip, self.pod["spec"].get("hostname") or self.name, dns)
        self.sandbox_ready = True
        self.pod["status"] = {**(self.pod.get("status") or {}), "podIP": self.pod_ip}  # for the downward API
        reader = SourceReader(self.ctx.api, self.namespace)
        self.volumes = VolumeBuilder(self.pod, self.dir, reader, self.ctx.tokens, self.ctx.node_name,
                                     self.ctx.host_ip, self.ctx.ca_pem, kubelet_root=kubelet_root(self.ctx.state_dir))

    def _setup_volumes_once(self) -> bool:
        """Like the kubelet, a missing ConfigMap/Secret keeps the pod in ContainerCreating, retried."""
        if self.volumes is None:
            self._setup()
        assert self.volumes is not None
        try:
            self.volume_paths = self.volumes.materialize()
        except (PodSpecError, ApiError) as exc:
            for c in self.inits + self.containers:
                c.waiting_reason, c.waiting_message = "ContainerCreating", f"MountVolume.SetUp failed: {exc}"
            self._report()
            return False
        for c in self.inits + self.containers:
            c.waiting_reason, c.waiting_message = "ContainerCreating", ""
            c.reset_probes()
        self._report()
        return True

    def _teardown(self) -> None:
        grace = float(self.pod["metadata"].get("deletionGracePeriodSeconds")
                      or self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        running = [c for c in self.inits + self.containers if c.proc is not None and c.proc.poll() is None]
        for c in running:
            self._pre_stop(c)
        for c in running:
            self._signal(c, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(c.proc.poll() is None for c in running if c.proc):
            time.sleep(0.1)
        for c in running:
            self._signal(c, signal.SIGKILL)
            if c.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.proc.wait(timeout=5)
        self.ctx.gpus.release(self.uid)
        if self.sandbox is not None:
            self.sandbox.destroy()
        from tidescale.devstack.node.launch import cleanup_mountpoints

        cleanup_mountpoints(self.dir / "specs")
        if self.pod["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(ApiError):
                self.ctx.api.delete(f"/api/v1/namespaces/{self.namespace}/pods/{self.name}",
                                    {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}})

    # -- containers ------------------------------------------------------------------------------
    def _step(self) -> None:
        if not self.initialized:
            self._step_inits()
            if not self.initialized:
                return
        for c in self.containers:
            self._supervise(c)

    def _step_inits(self) -> None:
        for c in self.inits:
            if c.terminated is not None and c.terminated.get("exitCode") == 0:
                continue
            self._supervise(c)
            return
        self.initialized = True

    def _supervise(self, c: ContainerState) -> None:
        mono = time.monotonic()
        if c.proc is not None:
            code = c.proc.poll()
            if code is None:
                self._probe(c, mono)
                return
            self._exited(c, code)
        if c.terminated is not None and not self._should_restart(c):
            return
        if mono < c.next_start:
            return
        self._start(c)

    def _should_restart(self, c: ContainerState) -> bool:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if c.init and c.spec.get("restartPolicy") == "Always":
            return True  # a sidecar
        if c.terminated is None:
            return True
        if policy == "Always" and not c.init:
            return True
        return policy in ("Always", "OnFailure") and c.terminated.get("exitCode") != 0

    def _exited(self, c: ContainerState, code: int) -> None:
        reason = "Completed" if code == 0 else "Error"
        exit_code = code if code >= 0 else 128 - code  # killed by signal N -> 128+N, as runtimes report
        if code < 0 and -code == signal.SIGKILL and getattr(c, "_oom", False):
            reason = "OOMKilled"
        state = {"exitCode": exit_code, "reason": reason, "startedAt": c.started_at, "finishedAt": now(),
                 "containerID": self._container_id(c)}
        c.proc, c.ready, c.started = None, False, False
        c.last_terminated = state
        c.terminated = state
        if self._should_restart(c):
            ran = time.monotonic() - c.started_mono
            c.backoff_s = BACKOFF_START_S if ran > BACKOFF_RESET_S or c.backoff_s == 0 else \
                min(BACKOFF_MAX_S, c.backoff_s * 2)
            c.next_start = time.monotonic() + c.backoff_s
            c.waiting_reason = "CrashLoopBackOff"
            c.waiting_message = f"back-off {c.backoff_s:.0f}s restarting failed container={c.spec['name']}"

    def _container_id(self, c: ContainerState) -> str:
        return f"tidescale://{self.uid}/{c.spec['name']}/{c.restarts}"

    def _start(self, c: ContainerState) -> None:
        spec = c.spec
        if c.terminated is not None:
            c.restarts += 1
        try:
            image = host_image(spec["image"])
            env = container_env(self.pod, spec, SourceReader(self.ctx.api, self.namespace), self.ctx.node_name,
                                self.ctx.host_ip, self.ctx.service_env)
            env = {**image.env, "PATH": os.pathsep.join((*image.path, os.environ.get("PATH", ""))), **env}
            gpus = int(str((spec.get("resources", {}).get("limits") or {}).get("nvidia.com/gpu", 0)))
            if gpus:
                ids = self.ctx.gpus.allocate(f"{self.uid}/{spec['name']}", self.namespace, self.name, spec["name"],
                                             str(self.pod_ip), gpus)
                env["NVIDIA_VISIBLE_DEVICES"] = ",".join(map(str, ids))
            argv = image.argv(expand_args(spec.get("command") or [], env) or None,
                              expand_args(spec.get("args") or [], env))
            mounts = [Mount(Path(src), dst) for src, dst in image.files]  # a writable image layer
            mounts += container_mounts(spec, self.volume_paths, env)
        except ImageNotMapped as exc:
            c.waiting_reason, c.waiting_message = "ErrImagePull", str(exc)
            c.next_start = time.monotonic() + BACKOFF_START_S
            return
        except (PodSpecError, ApiError) as exc:
            c.waiting_reason, c.waiting_message = "CreateContainerConfigError", str(exc)
            c.next_start = time.monotonic() + 2.0
            return
        security = {**(self.pod["spec"].get("securityContext") or {}), **(spec.get("securityContext") or {})}
        launch = ContainerLaunch(argv=argv, env=env, mounts=mounts, working_dir=spec.get("workingDir"),
                                 run_as_user=security.get("runAsUser"), run_as_group=security.get("runAsGroup"),
                                 hostname=self.pod["spec"].get("hostname") or self.name)
        if self.sandbox is None:
            c.waiting_reason, c.waiting_message = "CreateContainerError", "hostNetwork pods are not supported here"
            c.next_start = time.monotonic() + BACKOFF_MAX_S
            return
        full = launch_argv(self.sandbox.netns, launch, self.dir / "specs")
        log_path = self.dir / "logs" / f"{spec['name']}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as out:
            c.proc = subprocess.Popen(full, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        (self.dir / "pids").mkdir(exist_ok=True)
        (self.dir / "pids" / spec["name"]).write_text(str(c.proc.pid))
        c.started_at, c.started_mono = now(), time.monotonic()
        c.terminated = None
        c.waiting_reason = ""
        c.reset_probes()
        self._post_start(c)

    def _post_start(self, c: ContainerState) -> None:
        hook = (c.spec.get("lifecycle") or {}).get("postStart")
        if hook:
            self._handler(c, hook, timeout=30)

    def _pre_stop(self, c: ContainerState) -> None:
        hook = (c.spec.get("lifecycle") or {}).get("preStop")
        if hook:
            grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
            self._handler(c, hook, timeout=grace)

    @staticmethod
    def _signal(c: ContainerState, sig: int) -> None:
        if c.proc is not None and c.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.proc.pid, sig)

    # -- probes and hooks ------------------------------------------------------------------------
    def _probe(self, c: ContainerState, mono: float) -> None:
        if c.startup is not None and not c.started:
            result = self._run_probe(c, c.startup, mono)
            if result is True:
                c.started = True
            elif result is False:
                self._fail_liveness(c, "startup")
            return
        c.started = True
        if c.liveness is not None and self._run_probe(c, c.liveness, mono) is False:
            self._fail_liveness(c, "liveness")
            return
        if c.readiness is not None:
            result = self._run_probe(c, c.readiness, mono)
            if result is not None:
                c.ready = result
        else:
            c.ready = True

    def _fail_liveness(self, c: ContainerState, which: str) -> None:
        log.info("%s/%s container %s failed its %s probe; restarting", self.namespace, self.name,
                 c.spec["name"], which)
        self._signal(c, signal.SIGTERM)
        grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        if c.proc is not None:
            try:
                c.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._signal(c, signal.SIGKILL)
                c.proc.wait(timeout=5)

    def _run_probe(self, c: ContainerState, state: ProbeState, mono: float) -> bool | None:
        """None until the probe is due; then whether its threshold now says pass or fail."""
        spec = state.spec
        if state.next_at == 0.0:
            state.next_at = c.started_mono + float(spec.get("initialDelaySeconds", 0))
        if mono < state.next_at:
            return None
        state.next_at = mono + float(spec.get("periodSeconds", 10))
        ok = self._handler(c, spec, timeout=float(spec.get("timeoutSeconds", 1)))
        if ok:
            state.successes, state.failures = state.successes + 1, 0
            if state.successes >= int(spec.get("successThreshold", 1)):
                state.passed = True
        else:
            state.failures, state.successes = state.failures + 1, 0
            if state.failures >= int(spec.get("failureThreshold", 3)):
                state.passed = False
                return False
        return state.passed if ok or state.passed else None

    def _handler(self, c: ContainerState, spec: Json, timeout: float) -> bool:
        try:
            if "httpGet" in spec:
                h = spec["httpGet"]
                port = self._port(c, h["port"])
                host = h.get("host") or self.pod_ip
                scheme = h.get("scheme", "HTTP").lower()
                headers = {x["name"]: x["value"] for x in h.get("httpHeaders") or []}
                r = httpx.get(f"{scheme}://{host}:{port}{h.get('path', '/')}", timeout=timeout, verify=False,
                              headers=headers)
                return 200 <= r.status_code < 400
            if "tcpSocket" in spec:
                with socket.create_connection((self.pod_ip, self._port(c, spec["tcpSocket"]["port"])),
                                              timeout=timeout):
                    return True
            if "exec" in spec and c.proc is not None:
                cmd = ["nsenter", "-t", str(c.proc.pid), "-m", "-n", "-u", "--", *spec["exec"]["command"]]
                return subprocess.run(cmd, capture_output=True, timeout=timeout).returncode == 0
            if "sleep" in spec:
                time.sleep(min(float(spec["sleep"]["seconds"]), timeout))
                return True
        except (httpx.HTTPError, OSError, subprocess.TimeoutExpired, ValueError):
            return False
        return False

    def _port(self, c: ContainerState, port: Any) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in c.spec.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise ValueError(f"no port named {port}")

    # -- status ----------------------------------------------------------------------------------
    def _container_status(self, c: ContainerState) -> Json:
        status: Json = {"name": c.spec["name"], "image": c.spec["image"], "imageID": f"host://{c.spec['image']}",
                        "restartCount": c.restarts, "ready": c.ready, "started": c.started}
        if c.proc is not None and c.proc.poll() is None:
            status["state"] = {"running": {"startedAt": c.started_at}}
            status["containerID"] = self._container_id(c)
        elif c.terminated is not None and c.waiting_reason != "CrashLoopBackOff":
            status["state"] = {"terminated": c.terminated}
            status["containerID"] = c.terminated["containerID"]
        else:
            waiting: Json = {"reason": c.waiting_reason or "ContainerCreating"}
            if c.waiting_message:
                waiting["message"] = c.waiting_message
            status["state"] = {"waiting": waiting}
        if c.last_terminated is not None and c.restarts > 0:
            status["lastState"] = {"terminated": c.last_terminated}
        return status

    def _phase(self) -> str:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        states = [c for c in self.containers]
        if any(c.proc is not None for c in states):
            return "Running"
        if policy != "Always" and all(c.terminated is not None for c in states):
            failed = any(c.terminated and c.terminated.get("exitCode") != 0 for c in states)
            if policy == "Never" or not failed:
                return "Failed" if failed else "Succeeded"
        return "Running" if any(c.restarts for c in states) else "Pending"

    def status(self) -> Json:
        ready = all(c.ready for c in self.containers) and self.initialized

        def cond(kind: str, value: bool) -> Json:
            return {"type": kind, "status": "True" if value else "False", "lastProbeTime": None}

        status: Json = {
            "phase": self._phase(), "hostIP": self.ctx.host_ip, "hostIPs": [{"ip": self.ctx.host_ip}],
            "startTime": self.start_time,
            "conditions": [cond("PodReadyToStartContainers", self.sandbox_ready), cond("Initialized", self.initialized),
                           cond("Ready", ready), cond("ContainersReady", ready), cond("PodScheduled", True)],
            "containerStatuses": [self._container_status(c) for c in self.containers],
        }
        if self.sandbox_ready:
            status["podIP"], status["podIPs"] = self.pod_ip, [{"ip": self.pod_ip}]
        if self.inits:
            status["initContainerStatuses"] = [self._container_status(c) for c in self.inits]
        return status

    def _report(self) -> None:
        status = self.status()
        if status == self._last_status:
            return
        stamped = {**status, "conditions": [{**c, "lastTransitionTime": self._transition(c)}
                                             for c in status["conditions"]]}
        try:
            self.ctx.api.patch_merge(f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status",
                                     {"status": stamped})
            self._last_status = status
        except ApiError as exc:
            if exc.status == 404:
                self.deleting.set()
            else:
                log.warning("status of %s/%s: %s", self.namespace, self.name, exc)

    def _transition(self, condition: Json) -> str:
        if self._last_status is not None:
            for old in self._last_status["conditions"]:
                if old["type"] == condition["type"] and old["status"] == condition["status"]:
                    return str(getattr(self, "_transitions", {}).get(condition["type"], now()))
        transitions = self.__dict__.setdefault("_transitions", {})
        transitions[condition["type"]] = now()
        return str(transitions[condition["type"]])
