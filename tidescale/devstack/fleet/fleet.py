"""A Deployment of Triton replicas on this machine: pod names, scaling, readiness, scrape targets.

Scaling behaves like Kubernetes: new pods start in the background and count as Ready only once
every model has loaded (the cold start); scale-down removes the newest pods from the endpoints at
once and stops them in parallel in the background (Triton drains in-flight requests).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from tidescale.contracts.errors import TidescaleError, UsageError
from tidescale.devstack.fleet.model_repo import DEFAULT_MODELS, ModelSpec, render_config, write_model_repository
from tidescale.devstack.fleet.periodic import Periodic
from tidescale.devstack.fleet.triton import TraceSettings, TritonReplica
from tidescale.devstack.procs import stop_all

# Kubernetes' pod-name suffix alphabet (no vowels, no ambiguous characters).
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_REPLICAS = 64
MAX_CRASH_RECORDS = 100

ScrapeTarget = tuple[str, dict[str, str]]
# What Triton prints when it catches a fatal signal, e.g. "Signal (11) received." before its backtrace.
_SIGNAL_LINE = re.compile(r"^Signal \((\d+)\) received")


@dataclass(frozen=True)
class ReplicaCrash:
    """A pod's server exited without being asked to: what kubectl's lastState.terminated would say."""

    pod: str
    at: float  # Unix time the supervisor saw the exit
    exit_code: int | None  # like a container's: 128 + signal when killed by one
    signal: int | None  # the fatal signal Triton reported in its log (or that killed it)

    def describe(self) -> str:
        cause = f"signal {self.signal}" if self.signal is not None else f"exit code {self.exit_code}"
        return f"{self.pod} crashed ({cause})"


def crash_from(pod: str, returncode: int | None, log_tail: str, at: float) -> ReplicaCrash:
    """Name a crash the way Kubernetes reports it: a signal death is exit code 128 + N."""
    signal_no = -returncode if returncode is not None and returncode < 0 else None
    for line in log_tail.splitlines():
        m = _SIGNAL_LINE.match(line.strip())
        if m:
            signal_no = int(m.group(1))
    if returncode is None:
        exit_code = None
    elif returncode < 0:
        exit_code = 128 - returncode
    else:
        exit_code = returncode
    return ReplicaCrash(pod, at, exit_code, signal_no)


def template_hash(specs: Sequence[ModelSpec], deployment: str) -> str:
    """A stable pod-template-hash-like string derived from the model configs."""
    digest = hashlib.sha256(json.dumps([deployment, *(render_config(s) for s in specs)]).encode()).digest()
    return "".join(SUFFIX_ALPHABET[b % len(SUFFIX_ALPHABET)] for b in digest[:5])


class PodNamer:
    """`<deployment>-<hash>-<5 chars>` names, reproducible for a seed and never repeated."""

    def __init__(self, deployment: str, template: str, seed: int) -> None:
        self.prefix = f"{deployment}-{template}-"
        self._rng = random.Random(seed)
        self._used: set[str] = set()

    def next(self) -> str:
        while True:
            name = self.prefix + "".join(self._rng.choice(SUFFIX_ALPHABET) for _ in range(5))
            if name not in self._used:
                self._used.add(name)
                return name


class TritonFleet:
    """N real Triton replicas of one model repository, scaled like a Deployment."""

    def __init__(self, workdir: Path, models: Sequence[ModelSpec] = DEFAULT_MODELS, *,
                 namespace: str = "tidescale-demo", deployment: str = "triton", replicas: int = 1,
                 trace: TraceSettings | None = None, summary_latencies: bool = False,
                 ready_timeout: float = 180.0, seed: int = 0) -> None:
        if not 0 <= replicas <= MAX_REPLICAS:
            raise UsageError(f"replicas must be in 0..{MAX_REPLICAS}, got {replicas}")
        self.workdir = workdir.resolve()
        self.models = tuple(models)
        self.namespace = namespace
        self.deployment = deployment
        self.initial_replicas = replicas
        self.trace = trace
        self.summary_latencies = summary_latencies
        self.ready_timeout = ready_timeout
        self.repo = workdir / "model_repository"
        self._namer = PodNamer(deployment, template_hash(self.models, deployment), seed)
        self._lock = threading.Lock()
        self._replicas: list[TritonReplica] = []
        self._starters: list[threading.Thread] = []
        self._stoppers: list[threading.Thread] = []
        self._failures: dict[str, str] = {}
        self.restarts: dict[str, int] = {}
        self._crashes: deque[ReplicaCrash] = deque(maxlen=MAX_CRASH_RECORDS)
        self._next_restart: dict[str, float] = {}
        self._supervisor = Periodic("fleet-supervisor", 0.5, self._supervise)

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self, wait: bool = True) -> TritonFleet:
        """Write the model repository, start the initial replicas and (by default) wait until Ready."""
        write_model_repository(self.repo, self.models)
        self.scale_to(self.initial_replicas)
        self._supervisor.start()
        if wait:
            self.wait_ready(self.initial_replicas, self.ready_timeout)
        return self

    def wait_ready(self, n: int | None = None, timeout: float | None = None) -> None:
        """Wait until the background starts finished; fail if fewer than *n* replicas became Ready."""
        with self._lock:
            starters = list(self._starters)
        for t in starters:
            t.join(timeout if timeout is not None else self.ready_timeout)
        want = self.spec_replicas if n is None else n
        ready = len(self.ready_replicas())
        if ready < want:
            detail = "; ".join(f"{pod}: {err}" for pod, err in self._failures.items())
            raise TidescaleError(f"only {ready}/{want} Triton replicas became ready. {detail}")

    def scale_to(self, n: int) -> None:
        """Set the desired replica count; returns at once (new replicas become Ready later)."""
        if not 0 <= n <= MAX_REPLICAS:
            raise UsageError(f"replicas must be in 0..{MAX_REPLICAS}, got {n}")
        with self._lock:
            while len(self._replicas) < n:
                self._add_replica_locked()
            removed = self._replicas[n:]
            del self._replicas[n:]
        if removed:
            self._stop_in_background(removed)

    def _add_replica_locked(self) -> TritonReplica:
        pod = self._namer.next()
        replica = TritonReplica(pod, self.namespace, self.repo, self.workdir / "pods" / pod, trace=self.trace,
                                summary_latencies=self.summary_latencies)
        self._replicas.append(replica)
        self.restarts[pod] = 0
        starter = threading.Thread(target=self._start_one, args=(replica,), name=f"start-{pod}", daemon=True)
        self._starters.append(starter)
        starter.start()
        return replica

    def _start_one(self, replica: TritonReplica) -> None:
        try:
            replica.start()
            replica.wait_ready(self.ready_timeout)
        except TidescaleError as exc:
            self._failures[replica.pod] = str(exc).splitlines()[0]
            replica.stop(grace=2.0)

    def _stop_in_background(self, replicas: list[TritonReplica]) -> None:
        for r in replicas:
            r.terminate()  # out of the endpoints at once, like a Terminating pod
        procs = [r.process for r in replicas if r.process is not None]
        t = threading.Thread(target=stop_all, args=(procs,), name="stop-replicas", daemon=True)
        with self._lock:
            self._stoppers.append(t)
        t.start()

    def _supervise(self) -> None:
        """Restart crashed pods with Kubernetes-like back-off (1, 2, 4 … 30 s), counting restarts."""
        now = time.monotonic()
        for replica in self.replicas:
            if not replica.crashed():
                continue
            if replica.pod not in self._next_restart:
                self._record_crash(replica)
            due = self._next_restart.setdefault(replica.pod, now + min(30.0, 2.0 ** self.restarts[replica.pod]))
            if now < due or self._supervisor.stopping:
                continue
            del self._next_restart[replica.pod]
            self.restarts[replica.pod] += 1
            replica.restart()
            waiter = threading.Thread(target=self._wait_restarted, args=(replica,), daemon=True)
            with self._lock:
                self._starters.append(waiter)
            waiter.start()

    def _record_crash(self, replica: TritonReplica) -> None:
        proc = replica.process
        returncode, tail = (proc.returncode, proc.log_tail(60)) if proc is not None else (None, "")
        crash = crash_from(replica.pod, returncode, tail, time.time())
        with self._lock:
            self._crashes.append(crash)

    def crashes(self) -> list[ReplicaCrash]:
        """Unrequested exits seen by the supervisor, oldest first (the newest MAX_CRASH_RECORDS)."""
        with self._lock:
            return list(self._crashes)

    def _wait_restarted(self, replica: TritonReplica) -> None:
        try:
            replica.wait_ready(self.ready_timeout)
        except TidescaleError as exc:
            self._failures[replica.pod] = str(exc).splitlines()[0]

    def kill_replica(self, pod: str) -> None:
        """SIGKILL one pod's server (chaos); the supervisor restarts it and counts the restart."""
        for replica in self.replicas:
            if replica.pod == pod:
                replica.kill()
                return
        raise UsageError(f"no pod {pod!r} in deployment {self.deployment}")

    def stop(self) -> None:
        """Stop every replica in parallel and wait for all background starts and stops."""
        self._supervisor.stop()
        with self._lock:
            replicas = list(self._replicas)
            self._replicas.clear()
            starters, stoppers = list(self._starters), list(self._stoppers)
        for r in replicas:
            r.terminate()
        stop_all([r.process for r in replicas if r.process is not None])
        for t in starters:
            t.join(5.0)
        # A starter may have launched a process after we looked: stop stragglers too.
        stop_all([r.process for r in replicas if r.process is not None and r.alive()], grace=2.0)
        for t in stoppers:
            t.join(20.0)

    def __enter__(self) -> TritonFleet:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- state -----------------------------------------------------------------------------------
    @property
    def replicas(self) -> list[TritonReplica]:
        """Current pods (Ready or starting), oldest first."""
        with self._lock:
            return list(self._replicas)

    @property
    def spec_replicas(self) -> int:
        with self._lock:
            return len(self._replicas)

    def ready_replicas(self) -> list[TritonReplica]:
        return [r for r in self.replicas if r.ready]

    def ready_urls(self) -> list[str]:
        """HTTP base URLs of Ready replicas: the Service endpoints a load generator balances over."""
        return [r.http_url for r in self.ready_replicas()]

    def failures(self) -> dict[str, str]:
        return dict(self._failures)

    def scrape_targets(self) -> list[ScrapeTarget]:
        """(address, labels) of every pod's Triton metrics port, like a PodMonitor would discover."""
        return [(r.metrics_address, {**r.labels, "deployment": self.deployment}) for r in self.replicas]
