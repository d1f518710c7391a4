"""One Triton replica: the real `tritonserver` 2.51 on loopback ports, like one pod of the Deployment."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from tidescale.contracts.errors import TidescaleError, UsageError
from tidescale.devstack import tools
from tidescale.devstack.fleet.model_repo import SLOWDOWN_ENV, model_names
from tidescale.devstack.ports import LOOPBACK, free_ports
from tidescale.devstack.procs import ManagedProcess

TraceMode = Literal["triton", "opentelemetry"]

# Triton's OpenTelemetry batch span processor as docs/install.md advises it, for every OTLP replica
# the project runs (the local fleet, the local cluster's Deployment, the benchmarks). Triton's
# default posts at most 512 spans (about 170 traced requests); the exporter pays about 1 ms per post
# whatever it holds, so a post of up to 2048 spans costs it about 6 µs less per traced request
# (docs/exporter.md). The queue holds four posts, so spans that end while one is in flight are not
# dropped (Triton drops what a full queue cannot take). Triton's 5 s schedule delay stays: it bounds
# how late a span arrives when the load is low.
OTLP_BATCH_SETTINGS: tuple[tuple[str, int], ...] = (("bsp_max_export_batch_size", 2048),
                                                    ("bsp_max_queue_size", 8192))


# Triton's bsp_schedule_delay (5000 ms, left at its default): the longest its batch processor holds a
# span before posting it, and so how long a reader must wait before taking every span as in.
OTLP_SCHEDULE_DELAY_S = 5.0


def otlp_batch_flags() -> list[str]:
    """`--trace-config=opentelemetry,<setting>=<value>` for each of OTLP_BATCH_SETTINGS."""
    return [f"--trace-config=opentelemetry,{key}={value}" for key, value in OTLP_BATCH_SETTINGS]


@dataclass(frozen=True)
class TraceSettings:
    """Triton request tracing: `mode=triton` writes a JSON file, `mode=opentelemetry` posts OTLP/HTTP."""

    mode: TraceMode = "triton"
    rate: int = 1  # sample 1 request in `rate`
    level: str = "TIMESTAMPS"
    file: Path | None = None  # mode=triton; default <workdir>/trace.json
    # mode=triton: 0 writes the file at exit; N writes `file.0`, `file.1`, … every N traces.
    log_frequency: int = 0
    url: str = "http://127.0.0.1:4318/v1/traces"  # mode=opentelemetry
    # mode=opentelemetry: headers of every OTLP post (`Authorization=Bearer …`); Triton's exporter
    # (opentelemetry-cpp) reads them from its environment only.
    headers: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.mode not in ("triton", "opentelemetry"):
            raise UsageError(f"trace mode must be 'triton' or 'opentelemetry', got {self.mode!r}")
        if self.rate < 1:
            raise UsageError(f"trace rate must be >= 1 (sample 1 in N), got {self.rate}")
        if self.log_frequency < 0:
            raise UsageError(f"trace log frequency must be >= 0 (0: at exit), got {self.log_frequency}")
        if self.level not in ("TIMESTAMPS", "TENSORS", "OFF"):
            raise UsageError(f"trace level must be TIMESTAMPS, TENSORS or OFF, got {self.level!r}")

    def flags(self, workdir: Path) -> list[str]:
        """`--trace-config` flags in Triton 2.51 syntax."""
        out = ["--trace-config", f"level={self.level}", "--trace-config", f"rate={self.rate}",
               "--trace-config", f"mode={self.mode}"]
        if self.mode == "triton":
            path = self.file or workdir / "trace.json"
            out += ["--trace-config", f"triton,file={path}", "--trace-config",
                    f"triton,log-frequency={self.log_frequency}"]
        else:
            out += ["--trace-config", f"opentelemetry,url={self.url}", *otlp_batch_flags()]
        return out


@dataclass(frozen=True)
class ReplicaPorts:
    http: int
    grpc: int
    metrics: int

    @classmethod
    def allocate(cls) -> ReplicaPorts:
        http, grpc, metrics = free_ports(3)
        return cls(http, grpc, metrics)


class TritonReplica:
    """A tritonserver process serving a model repository, labelled like a pod of a Deployment."""

    def __init__(self, pod: str, namespace: str, repo: Path, workdir: Path, *,
                 trace: TraceSettings | None = None, summary_latencies: bool = False,
                 ports: ReplicaPorts | None = None) -> None:
        self.pod = pod
        self.namespace = namespace
        self.repo = repo.resolve()
        self.workdir = workdir.resolve()
        self.trace = trace
        self.summary_latencies = summary_latencies
        self.ports = ports or ReplicaPorts.allocate()
        self.models = model_names(repo)
        if not self.models:
            raise UsageError(f"model repository {repo} has no models (no */config.pbtxt)")
        self._proc: ManagedProcess | None = None
        self._ready = False
        # Unix times like kube-state-metrics' kube_pod_start_time / kube_pod_status_ready_time.
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.terminating = False  # set once we asked it to stop: a dead process then is no crash

    # --- addresses -------------------------------------------------------------------------------
    @property
    def http_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.http}"

    @property
    def metrics_address(self) -> str:
        return f"{LOOPBACK}:{self.ports.metrics}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.metrics_address}/metrics"

    @property
    def labels(self) -> dict[str, str]:
        return {"namespace": self.namespace, "pod": self.pod}

    @property
    def slowdown_file(self) -> Path:
        return self.workdir / "gpu-slowdown"

    def set_slowdown(self, factor: float) -> None:
        """Stretch every model execution by *factor* (>= 1), e.g. while the pod's GPU is throttled."""
        if factor < 1.0:
            raise UsageError(f"slowdown factor must be >= 1, got {factor}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        tmp = self.slowdown_file.with_suffix(".tmp")
        tmp.write_text(repr(float(factor)))
        tmp.replace(self.slowdown_file)  # atomic: the model never reads a half-written number

    @property
    def log_path(self) -> Path:
        return self.workdir / "tritonserver.log"

    # --- lifecycle -------------------------------------------------------------------------------
    def argv(self, install: tools.TritonInstall) -> list[str]:
        argv = [
            str(install.binary),
            "--model-repository", str(self.repo),
            "--backend-directory", str(install.backend_dir),
            "--disable-auto-complete-config",
            "--model-control-mode", "explicit", "--load-model", "*",
            "--http-address", LOOPBACK, "--http-port", str(self.ports.http),
            "--grpc-address", LOOPBACK, "--grpc-port", str(self.ports.grpc),
            "--metrics-address", LOOPBACK, "--metrics-port", str(self.ports.metrics),
            "--allow-metrics", "true", "--allow-gpu-metrics", "false",
            "--log-verbose", "0",
        ]
        if self.summary_latencies:
            argv += ["--metrics-config", "summary_latencies=true"]
        if self.trace is not None:
            argv += self.trace.flags(self.workdir)
        return argv

    def start(self) -> TritonReplica:
        install = tools.triton()
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**install.env(), SLOWDOWN_ENV: str(self.slowdown_file)}
        if self.trace is not None and self.trace.headers:
            env["OTEL_EXPORTER_OTLP_TRACES_HEADERS"] = self.trace.headers
        self.started_at, self.ready_at = time.time(), None
        self._proc = ManagedProcess(f"tritonserver[{self.pod}]", self.argv(install), self.log_path,
                                    env=env, cwd=self.workdir).start()
        return self

    def alive(self) -> bool:
        return self._proc is not None and self._proc.alive()

    @property
    def ready(self) -> bool:
        """Ready like a pod: the server answered ready with every model loaded, and is still running."""
        return self._ready and self.alive()

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until `/v2/health/ready` and every model's ready endpoint answer 200."""
        if self._proc is None:
            raise TidescaleError(f"replica {self.pod} was not started")
        self._proc.wait_http(f"{self.http_url}/v2/health/ready", timeout=timeout)
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            pending = list(self.models)
            while pending:
                if time.monotonic() > deadline:
                    raise TidescaleError(f"replica {self.pod}: models {pending} not ready after {timeout:.0f}s "
                                         f"(see {self.log_path})")
                with contextlib.suppress(httpx.HTTPError):
                    pending = [m for m in pending
                               if client.get(f"{self.http_url}/v2/models/{m}/ready").status_code != 200]
                if pending:
                    time.sleep(0.1)
        self.ready_at = time.time()
        self._ready = True

    def terminate(self) -> None:
        """Mark not ready and send SIGTERM (Triton drains in-flight requests)."""
        self._ready = False
        self.terminating = True
        if self._proc is not None:
            self._proc.terminate()

    def stop(self, grace: float = 10.0) -> None:
        self._ready = False
        self.terminating = True
        if self._proc is not None:
            self._proc.stop(grace)

    def crashed(self) -> bool:
        """The process exited without being asked to (a container restart is due)."""
        return self._proc is not None and not self.terminating and not self._proc.alive()

    def kill(self) -> None:
        """SIGKILL, as a crash or OOM kill would (chaos testing); the fleet restarts the pod."""
        self._ready = False
        if self._proc is not None:
            self._proc.kill()

    def restart(self) -> TritonReplica:
        """Start a fresh process for the same pod (same ports, same workdir), like a container restart."""
        self._ready = False
        self.terminating = False
        return self.start()

    @property
    def process(self) -> ManagedProcess | None:
        return self._proc

    # --- queries ---------------------------------------------------------------------------------
    def _get_json(self, path: str) -> Any:
        try:
            resp = httpx.get(f"{self.http_url}{path}", timeout=5.0)
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise TidescaleError(f"replica {self.pod}: GET {path} failed: {exc}") from exc
        return resp.json()

    def server_version(self) -> str:
        """The server's version string from `GET /v2` (e.g. "2.51.0")."""
        return str(self._get_json("/v2")["version"])

    def model_stats(self) -> dict[str, Any]:
        """`GET /v2/models/stats` as parsed JSON."""
        data = self._get_json("/v2/models/stats")
        assert isinstance(data, dict)
        return data

    def metrics_text(self) -> str:
        try:
            resp = httpx.get(self.metrics_url, timeout=5.0)
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise TidescaleError(f"replica {self.pod}: GET /metrics failed: {exc}") from exc
        return resp.text

    def __repr__(self) -> str:
        return f"TritonReplica({self.pod!r}, http={self.ports.http}, ready={self.ready})"
