"""Simulated GPUs behind a dcgm-exporter-format `/metrics` endpoint, one server per simulated node.

Utilisation is a duty cycle: the share of wall time the assigned Triton replica spent executing
batches, read from its `/v2/models/stats` (`batch_stats` compute_infer time counts each execution
once, unlike the per-request `nv_inference_compute_infer_duration_us`). SM and tensor activity
sit below utilisation, power and temperature follow it, framebuffer use is a base plus the
loaded models' memory. Faults (memory leak, XID, clock throttling) are injected in process or
via `POST /faults` with the node's bearer token.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from tidescale.contracts import catalog
from tidescale.contracts.errors import UsageError
from tidescale.devstack.fleet.exposition import render_family
from tidescale.devstack.fleet.httpserve import LoopbackHttpServer, Response, ServesHttp, json_response, text_response
from tidescale.devstack.fleet.periodic import Periodic
from tidescale.devstack.ports import LOOPBACK

# DCGM_CLOCKS_EVENT_REASON_* bits.
CLOCKS_GPU_IDLE = 0x1
CLOCKS_SW_POWER_CAP = 0x4
CLOCKS_HW_SLOWDOWN = 0x8
CLOCKS_SW_THERMAL = 0x20
CLOCKS_HW_THERMAL = 0x40
CLOCKS_HW_POWER_BRAKE = 0x80
THROTTLING_BITS = CLOCKS_SW_POWER_CAP | CLOCKS_HW_SLOWDOWN | CLOCKS_SW_THERMAL | CLOCKS_HW_THERMAL \
    | CLOCKS_HW_POWER_BRAKE
MAX_REASON_BITS = 0x1FF

XID_MESSAGES = {
    0: "No Error", 13: "Graphics Engine Exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    48: "Double Bit ECC Error", 63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure", 74: "NVLINK Error",
    79: "GPU has fallen off the bus", 94: "Contained ECC error", 95: "Uncontained ECC error",
}

# Field order follows dcgm-exporter's default-counters.csv plus the DCP (profiling) fields.
INT_FIELDS = (
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
)
FIELDS = (
    *INT_FIELDS, "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
)
FLOAT_FIELDS = frozenset({"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
                          "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
                          # dcgm-exporter 4.9: the utilisation ratios are doubles too
                          "DCGM_FI_DEV_BOARD_POWER_WATTS", "DCGM_FI_DEV_GPU_UTIL_RATIO",
                          "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "DCGM_FI_PROF_SM_UTIL_RATIO",
                          "DCGM_FI_PROF_TENSOR_UTIL_RATIO", "DCGM_FI_PROF_DRAM_UTIL_RATIO"})
XID_FIELDS = frozenset({"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR"})

# The shapes of dcgm-exporter the simulation writes: 4.x (the default) or 4.9, which renames the fields
# to their DCGM 4.7 names with other units (catalog.DCGM_RENAMES), renames the driver-version label and,
# since 4.8.3, writes `hostname` where 4.x wrote `Hostname`.
DCGM_VERSIONS = ("4.x", "4.9")


def field_name(name: str, dcgm_version: str) -> str:
    """What *dcgm_version* calls the 4.x field *name*."""
    rename = catalog.dcgm_rename(name)
    return rename.current if dcgm_version == "4.9" and rename is not None else name


def fields(dcgm_version: str = "4.x") -> tuple[str, ...]:
    """The families a simulated node serves, in order, as *dcgm_version* names them."""
    return tuple(field_name(name, dcgm_version) for name in FIELDS)


def in_version_unit(name: str, value: float | int, dcgm_version: str) -> float | int:
    """A 4.x reading of field *name* in *dcgm_version*'s unit (4.9: ratio, bytes, Hz, J)."""
    rename = catalog.dcgm_rename(name)
    if dcgm_version != "4.9" or rename is None or rename.factor == 1:
        return value
    scaled = value / (1 / rename.factor) if rename.factor < 1 else value * rename.factor
    return scaled if field_name(name, dcgm_version) in FLOAT_FIELDS else int(scaled)


class Workload(Protocol):
    """What a GPU needs to know about the pod it is assigned to (a TritonReplica satisfies it)."""

    pod: str
    namespace: str

    @property
    def http_url(self) -> str: ...

    def alive(self) -> bool: ...

    def set_slowdown(self, factor: float) -> None: ...


BusyReader = Callable[[Workload], float | None]


@dataclass(frozen=True)
class GpuModel:
    """Static properties of the simulated board."""

    name: str = "NVIDIA A100-SXM4-80GB"
    fb_total_mib: int = 81920
    fb_reserved_mib: int = 633
    fb_base_used_mib: int = 420  # CUDA context, driver
    idle_watts: float = 58.0
    max_watts: float = 400.0
    sm_clock_idle: int = 210
    sm_clock_max: int = 1410
    sm_clock_throttled: int = 1005
    mem_clock: int = 1593
    idle_temp: int = 31
    max_temp: int = 72


@dataclass
class GpuAssignment:
    """One GPU and the pod it is assigned to (None: unallocated, no pod labels)."""

    replica: Workload | None = None
    model_memory_mib: int = 0
    container: str = "triton"


@dataclass
class Faults:
    fb_leak_mib_per_s: float = 0.0
    leaked_mib: float = 0.0
    xid: int = 0
    throttle_bits: int = 0


@dataclass
class GpuState:
    util: float = 0.0  # 0..1 duty cycle over the last sample interval
    energy_mj: float = 0.0
    last_busy_s: float | None = None
    last_t: float | None = None
    faults: Faults = field(default_factory=Faults)


@dataclass(frozen=True)
class GpuReadings:
    """The values of every exported field for one GPU at one instant."""

    values: dict[str, float | int]
    xid: int


def busy_seconds_from_stats(stats: dict[str, Any]) -> float:
    """Total time spent executing batches: the sum of `batch_stats[].compute_infer.ns` over models."""
    total_ns = 0
    for model in stats.get("model_stats", []):
        for batch in model.get("batch_stats", []) or []:
            infer = batch.get("compute_infer") or {}
            total_ns += int(infer.get("ns", 0) or 0)  # gRPC-as-JSON writes numbers as strings
    return total_ns / 1e9


def read_busy_seconds(workload: Workload) -> float | None:
    """Cumulative busy seconds of a live replica, None when it cannot be read."""
    try:
        resp = httpx.get(f"{workload.http_url}/v2/models/stats", timeout=2.0)
        resp.raise_for_status()
        return busy_seconds_from_stats(resp.json())
    except (httpx.HTTPError, ValueError):
        return None


def derive_readings(util: float, energy_mj: float, fb_used_mib: float, faults: Faults, board: GpuModel,
                    pcie_replays: int = 0) -> GpuReadings:
    """Every field from the duty cycle and fault state (pure, so tests can pin the physics)."""
    util = min(max(util, 0.0), 1.0)
    throttled = bool(faults.throttle_bits & THROTTLING_BITS)
    busy_clock = board.sm_clock_throttled if throttled else board.sm_clock_max
    sm_clock = board.sm_clock_idle if util <= 0.0 else busy_clock
    reasons = faults.throttle_bits | (CLOCKS_GPU_IDLE if util <= 0.0 else 0)
    used = min(fb_used_mib, board.fb_total_mib - board.fb_reserved_mib)
    # Work done per busy cycle: SMs are not all busy while the engine is, tensor cores less so.
    values: dict[str, float | int] = {
        "DCGM_FI_DEV_SM_CLOCK": sm_clock,
        "DCGM_FI_DEV_MEM_CLOCK": board.mem_clock,
        "DCGM_FI_DEV_MEMORY_TEMP": round(board.idle_temp + 3 + (board.max_temp - board.idle_temp) * util * 0.9),
        "DCGM_FI_DEV_GPU_TEMP": round(board.idle_temp + (board.max_temp - board.idle_temp) * util),
        "DCGM_FI_DEV_POWER_USAGE": board.idle_watts + (board.max_watts - board.idle_watts) * util
        * (0.75 if throttled else 1.0),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(energy_mj),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": pcie_replays,
        "DCGM_FI_DEV_GPU_UTIL": round(util * 100),
        "DCGM_FI_DEV_XID_ERRORS": faults.xid,
        "DCGM_FI_DEV_FB_FREE": int(board.fb_total_mib - board.fb_reserved_mib - used),
        "DCGM_FI_DEV_FB_USED": int(used),
        "DCGM_FI_DEV_FB_RESERVED": board.fb_reserved_mib,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": reasons,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": util * 0.97,
        "DCGM_FI_PROF_SM_ACTIVE": util * 0.72,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": util * 0.38,
        "DCGM_FI_PROF_DRAM_ACTIVE": util * 0.31,
    }
    return GpuReadings(values, faults.xid)


def format_dcgm_value(name: str, value: float | int) -> str:
    """dcgm-exporter prints doubles with %f (`67.692000`) and integers plainly."""
    return f"{float(value):f}" if name in FLOAT_FIELDS else str(int(value))


def parse_fault_request(body: bytes, gpu_count: int) -> dict[str, Any]:
    """Validate a `POST /faults` body; UsageError naming the problem."""
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise UsageError(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError("body must be a JSON object")
    allowed = {"gpu", "fb_leak_mib_per_s", "xid", "throttle_bits", "clear"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise UsageError(f"unknown fields {unknown}; allowed: {sorted(allowed)}")
    data = {k: v for k, v in data.items() if v is not None}  # null means "not given"
    gpu = data.get("gpu")
    if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool) or not 0 <= gpu < gpu_count):
        raise UsageError(f"gpu must be an integer in 0..{gpu_count - 1}")
    leak = data.get("fb_leak_mib_per_s")
    if leak is not None and (isinstance(leak, bool) or not isinstance(leak, int | float) or not 0 <= leak <= 1e6):
        raise UsageError("fb_leak_mib_per_s must be a number in 0..1e6")
    xid = data.get("xid")
    if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int) or not 0 <= xid <= 65535):
        raise UsageError("xid must be an integer in 0..65535")
    bits = data.get("throttle_bits")
    if bits is not None and (isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= MAX_REASON_BITS):
        raise UsageError(f"throttle_bits must be an integer in 0..{MAX_REASON_BITS}")
    clear = data.get("clear", False)
    if not isinstance(clear, bool):
        raise UsageError("clear must be true or false")
    return data


class SimulatedGpuNode(ServesHttp):
    """One node's GPUs and its dcgm-exporter endpoint."""

    def __init__(self, hostname: str, gpus: Sequence[GpuAssignment], port: int | None = None,
                 model_name: str = "NVIDIA A100-SXM4-80GB", *, driver_version: str = "550.90.07",
                 poll_interval: float = 1.0, busy_reader: BusyReader = read_busy_seconds,
                 token: str | None = None, clock: Callable[[], float] = time.monotonic,
                 host: str = LOOPBACK, dcgm_version: str = "4.x") -> None:
        if not gpus:
            raise UsageError(f"node {hostname}: needs at least one GPU")
        if dcgm_version not in DCGM_VERSIONS:
            raise UsageError(f"dcgm-exporter version must be one of {', '.join(DCGM_VERSIONS)}, got {dcgm_version!r}")
        if poll_interval <= 0:
            raise UsageError("poll interval must be > 0 s")
        self.hostname = hostname
        self.gpus = list(gpus)
        self.board = GpuModel(name=model_name)
        self.driver_version = driver_version
        self.dcgm_version = dcgm_version
        self.poll_interval = poll_interval
        self.busy_reader = busy_reader
        self.fault_token = token or secrets.token_urlsafe(24)
        self.clock = clock
        self.states = [GpuState() for _ in self.gpus]
        self._lock = threading.Lock()
        self._server = LoopbackHttpServer(f"dcgm[{hostname}]", port, host)
        self._server.get_routes["/metrics"] = lambda: text_response(self.render())
        self._server.post_routes["/faults"] = self._post_faults
        self._sampler = Periodic(f"gpu-sampler[{hostname}]", poll_interval, self.sample)

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self, sample: bool = True) -> SimulatedGpuNode:
        """Serve /metrics; with *sample*, poll the assigned replicas every poll_interval seconds."""
        self._server.start()
        if sample:
            self._sampler.start()
        return self

    def stop(self) -> None:
        self._sampler.stop()
        self._server.stop()

    # --- simulation ------------------------------------------------------------------------------
    def gpu_uuid(self, index: int) -> str:
        return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{self.hostname}/gpu{index}')}"

    def assign(self, index: int, replica: Workload | None, model_memory_mib: int = 0) -> None:
        with self._lock:
            gpu = self.gpus[index]
            changed = gpu.replica is not replica
            if changed:
                self.states[index].last_busy_s = None  # a new pod: its counters start afresh
            gpu.replica, gpu.model_memory_mib = replica, model_memory_mib
        if changed and replica is not None and self.states[index].faults.throttle_bits & THROTTLING_BITS:
            self._apply_slowdown(index)

    def sample(self) -> None:
        """Advance every GPU to now: read busy time deltas, integrate energy and leaks."""
        with self._lock:
            assignments = [(g.replica, s) for g, s in zip(self.gpus, self.states, strict=True)]
        busy = [self.busy_reader(r) if r is not None and r.alive() else None for r, _ in assignments]
        now = self.clock()
        with self._lock:
            for (_, state), busy_s in zip(assignments, busy, strict=True):
                self._advance(state, busy_s, now)

    def _advance(self, state: GpuState, busy_s: float | None, now: float) -> None:
        dt = 0.0 if state.last_t is None else max(now - state.last_t, 0.0)
        if busy_s is None:
            state.util = 0.0
        elif state.last_busy_s is not None and dt > 0:
            state.util = min(max(busy_s - state.last_busy_s, 0.0) / dt, 1.0)  # counter reset → 0
        state.last_busy_s = busy_s
        state.faults.leaked_mib += state.faults.fb_leak_mib_per_s * dt
        power = derive_readings(state.util, 0, 0, state.faults, self.board).values["DCGM_FI_DEV_POWER_USAGE"]
        state.energy_mj += float(power) * dt * 1000.0
        state.last_t = now

    def readings(self, index: int) -> GpuReadings:
        gpu, state = self.gpus[index], self.states[index]
        loaded = gpu.replica is not None and gpu.replica.alive()
        fb_used = self.board.fb_base_used_mib + (gpu.model_memory_mib if loaded else 0) + state.faults.leaked_mib
        return derive_readings(state.util, state.energy_mj, fb_used, state.faults, self.board)

    # --- exposition ------------------------------------------------------------------------------
    def _labels(self, index: int, name: str, xid: int) -> list[tuple[str, str]]:
        gpu = self.gpus[index]
        v49 = self.dcgm_version == "4.9"
        labels = [
            ("gpu", str(index)), ("UUID", self.gpu_uuid(index)),
            ("pci_bus_id", f"00000000:{0x07 + 0x10 * index:02X}:00.0"),
            ("device", f"nvidia{index}"), ("modelName", self.board.name),
            ("hostname" if v49 else "Hostname", self.hostname),
            ("DCGM_FI_SYSTEM_DRIVER_VERSION" if v49 else "DCGM_FI_DRIVER_VERSION", self.driver_version),
        ]
        if name in XID_FIELDS:
            labels += [("err_code", str(xid)), ("err_msg", XID_MESSAGES.get(xid, "Unknown Error"))]
        if gpu.replica is not None:
            labels += [("container", gpu.container), ("namespace", gpu.replica.namespace),
                       ("pod", gpu.replica.pod), ("pod_uid", "")]
        return labels

    def render(self) -> str:
        """The node's `/metrics` page in dcgm-exporter's text format (4.x or 4.9 names and units)."""
        version = self.dcgm_version
        with self._lock:
            readings = [self.readings(i) for i in range(len(self.gpus))]
            parts = []
            for name in FIELDS:
                out = field_name(name, version)
                fam = catalog.get(out)
                samples = [(self._labels(i, out, r.xid),
                            format_dcgm_value(out, in_version_unit(name, r.values[name], version)))
                           for i, r in enumerate(readings)]
                parts.append(render_family(out, fam.type, fam.help, samples))
        return "".join(parts)

    # --- faults ----------------------------------------------------------------------------------
    def _targets(self, gpu: int | None) -> list[GpuState]:
        if gpu is None:
            return list(self.states)
        if not 0 <= gpu < len(self.states):
            raise UsageError(f"gpu must be in 0..{len(self.states) - 1}, got {gpu}")
        return [self.states[gpu]]

    def inject_fb_leak(self, mib_per_s: float, gpu: int | None = None) -> None:
        if mib_per_s < 0:
            raise UsageError("leak rate must be >= 0 MiB/s")
        with self._lock:
            for s in self._targets(gpu):
                s.faults.fb_leak_mib_per_s = mib_per_s

    def inject_xid(self, code: int, gpu: int | None = None) -> None:
        if not 0 <= code <= 65535:
            raise UsageError("xid must be in 0..65535")
        with self._lock:
            for s in self._targets(gpu):
                s.faults.xid = code

    def inject_throttle(self, reason_bits: int, gpu: int | None = None) -> None:
        """Set clock-event reason bits; slowdown reasons also stretch the pod's executions."""
        if not 0 <= reason_bits <= MAX_REASON_BITS:
            raise UsageError(f"reason bits must be in 0..{MAX_REASON_BITS}")
        with self._lock:
            for s in self._targets(gpu):
                s.faults.throttle_bits = reason_bits
        self._apply_slowdown(gpu)

    def clear_faults(self, gpu: int | None = None) -> None:
        with self._lock:
            for s in self._targets(gpu):
                s.faults = Faults()
        self._apply_slowdown(gpu)

    def _apply_slowdown(self, gpu: int | None) -> None:
        """Throttled clocks make the assigned replica's model executions slower, as on a real GPU."""
        indices = range(len(self.gpus)) if gpu is None else [gpu]
        for i in indices:
            replica = self.gpus[i].replica
            if replica is not None:
                throttled = self.states[i].faults.throttle_bits & THROTTLING_BITS
                replica.set_slowdown(self.board.sm_clock_max / self.board.sm_clock_throttled if throttled else 1.0)

    def _post_faults(self, headers: dict[str, str], body: bytes) -> Response:
        auth = headers.get("authorization", "")
        if not hmac.compare_digest(auth.encode(), f"Bearer {self.fault_token}".encode()):
            return json_response(401, {"detail": "missing or wrong bearer token"})
        try:
            req = parse_fault_request(body, len(self.gpus))
            gpu = req.get("gpu")
            if req.get("clear"):
                self.clear_faults(gpu)
            if "fb_leak_mib_per_s" in req:
                self.inject_fb_leak(float(req["fb_leak_mib_per_s"]), gpu)
            if "xid" in req:
                self.inject_xid(req["xid"], gpu)
            if "throttle_bits" in req:
                self.inject_throttle(req["throttle_bits"], gpu)
        except UsageError as exc:
            return json_response(400, {"detail": str(exc)})
        return json_response(200, {"status": "ok", "faults": [vars(s.faults) for s in self.states]})


def replica_memory_mib(models: Sequence[Any]) -> int:
    """GPU memory a replica's loaded models take (ModelSpec.gpu_memory_mib x instances)."""
    return sum(int(m.gpu_memory_mib) * int(m.instance_count) for m in models)
