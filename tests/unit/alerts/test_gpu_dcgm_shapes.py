"""The GPU recording rules and alerts give the same numbers for every shape dcgm-exporter reaches
Prometheus in: 4.x names, 4.9 names and units, and either scraped by two jobs at once (the tidescale
chart's ServiceMonitor with honorLabels: true and the GPU Operator's with honorLabels: false, whose
pod-mapped labels arrive as exported_*). Each shape is one promtool unit test over the committed rules
with the same expectations, so a rule that reads one name only, forgets a unit or counts a GPU twice
fails in that shape."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.paths import REPO
from tidescale.alerts.generate import ALERTING, RECORDING
from tidescale.contracts import catalog
from tidescale.contracts import recorded as n
from tidescale.devstack import rulecheck

MINUTES = 70
EXPORTER_NS = "gpu-operator"
SERVICE = "nvidia-dcgm-exporter"
RUNBOOKS = "https://github.com/tidescale/tidescale/blob/main/docs/runbooks"
ABCDE, FGHIJ = "triton-ranker-6f7d8c9b5-abcde", "triton-ranker-6f7d8c9b5-fghij"
MIB = 1048576


@dataclass(frozen=True)
class Node:
    name: str
    exporter_pod: str
    ip: str


NODES = (Node("gpu-node-1", "nvidia-dcgm-exporter-x7k2p", "10.0.1.5"),
         Node("gpu-node-2", "nvidia-dcgm-exporter-b2n8v", "10.0.2.5"))


@dataclass(frozen=True)
class Gpu:
    """One GPU and its readings in 4.x units, each `(start, step per minute)`."""

    node: Node
    index: int
    uuid: str
    pod: str | None  # the Triton pod it is mapped to, None: no pod holds it
    readings: dict[str, tuple[float, float]]


def readings(util: float, fb_used: tuple[float, float], fb_total: float, temp: float, power: float, sm: float,
             tensor: float, xid: float, reasons: float) -> dict[str, tuple[float, float]]:
    return {
        "DCGM_FI_DEV_GPU_UTIL": (util, 0), "DCGM_FI_DEV_FB_USED": fb_used,
        "DCGM_FI_DEV_FB_FREE": (fb_total - fb_used[0], -fb_used[1]), "DCGM_FI_DEV_GPU_TEMP": (temp, 0),
        "DCGM_FI_DEV_POWER_USAGE": (power, 0), "DCGM_FI_PROF_SM_ACTIVE": (sm, 0),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (tensor, 0), "DCGM_FI_DEV_XID_ERRORS": (xid, 0),
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": (reasons, 0),
    }


GPUS = (
    # Busy, leaking 300 MiB a minute, thermally throttled (SW_THERMAL 0x20).
    Gpu(NODES[0], 0, "GPU-5fd4a1e2", ABCDE, readings(80, (1000, 300), 80000, 71, 300, 0.6, 0.4, 0, 32)),
    # Nearly idle while its pod queues, with Xid 79.
    Gpu(NODES[1], 1, "GPU-0c9e77b3", FGHIJ, readings(2, (2048, 0), 80000, 40, 80, 0.01, 0, 79, 0)),
    # No pod holds it: only the dcgm-exporter pod's own target labels, idle clocks (GPU_IDLE 0x1).
    Gpu(NODES[1], 2, "GPU-77aa01c2", None, readings(0, (420, 0), 80000, 30, 60, 0, 0, 0, 1)),
)


@dataclass(frozen=True)
class Job:
    name: str
    honor_labels: bool


@dataclass(frozen=True)
class Shape:
    id: str
    version: str  # "4.x" or "4.9"
    jobs: tuple[Job, ...]


SHAPES = (
    Shape("4.x-one-job", "4.x", (Job(SERVICE, True),)),
    Shape("4.x-gpu-operator-honorlabels-false", "4.x", (Job(SERVICE, False),)),
    Shape("4.9-one-job", "4.9", (Job(SERVICE, True),)),
    Shape("4.x-two-jobs", "4.x", (Job("tidescale-dcgm-exporter", True), Job(SERVICE, False))),
    Shape("4.9-two-jobs", "4.9", (Job("tidescale-dcgm-exporter", True), Job(SERVICE, False))),
)


def target_labels(node: Node, job: Job) -> dict[str, str]:
    """What prometheus-operator attaches to a ServiceMonitor target: the dcgm-exporter pod's own."""
    return {"container": SERVICE, "endpoint": "gpu-metrics", "instance": f"{node.ip}:9400", "job": job.name,
            "namespace": EXPORTER_NS, "pod": node.exporter_pod, "service": SERVICE}


def exposed_labels(gpu: Gpu, version: str, name: str, value: float) -> dict[str, str]:
    """The labels dcgm-exporter writes: 4.x before 4.8.3 on node 1 (`Hostname`), `hostname` otherwise."""
    host = "Hostname" if version == "4.x" and gpu.node is NODES[0] else "hostname"
    driver = "DCGM_FI_DRIVER_VERSION" if version == "4.x" else "DCGM_FI_SYSTEM_DRIVER_VERSION"
    labels = {"gpu": str(gpu.index), "UUID": gpu.uuid, "pci_bus_id": f"00000000:{0x53 + gpu.index:02X}:00.0",
              "device": f"nvidia{gpu.index}", "modelName": "NVIDIA H100 80GB HBM3", host: gpu.node.name,
              driver: "580.105.08"}
    if name == "DCGM_FI_DEV_XID_ERRORS":
        labels |= {"err_code": str(int(value)), "err_msg": "GPU has fallen off the bus" if value else "No Error"}
    if gpu.pod is not None:
        labels |= {"container": "triton", "namespace": "ml", "pod": gpu.pod}
    return labels


def scraped(exposed: dict[str, str], target: dict[str, str], honor_labels: bool) -> dict[str, str]:
    """Prometheus's merge of exposed and target labels: honor_labels keeps the exposed value on a clash,
    otherwise the exposed one is kept as exported_<name>."""
    out = dict(target)
    for key, value in exposed.items():
        if key in target and not honor_labels:
            out[f"exported_{key}"] = value
        elif key not in target or honor_labels:
            out[key] = value
    return out


def in_unit(value: float, factor: float) -> float:
    return value / (1 / factor) if factor < 1 else value * factor


def series_values(start: float, step: float) -> str:
    return f"{start!r}{step:+}x{MINUTES}" if step else f"{start!r}x{MINUTES}"


def selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def input_series(shape: Shape) -> list[dict[str, str]]:
    out = []
    for gpu in GPUS:
        for name, (start, step) in gpu.readings.items():
            rename = catalog.dcgm_rename(name)
            if shape.version == "4.9" and rename is not None:
                name, start, step = rename.current, in_unit(start, rename.factor), in_unit(step, rename.factor)
            exposed = exposed_labels(gpu, shape.version, name if shape.version == "4.x" else
                                     ("DCGM_FI_DEV_XID_ERRORS" if name == "DCGM_FI_DEV_XID_ERROR" else name), start)
            for job in shape.jobs:
                labels = scraped(exposed, target_labels(gpu.node, job), job.honor_labels)
                out.append({"series": selector(name, labels), "values": series_values(start, step)})
    for node in NODES:
        for job in shape.jobs:
            out.append({"series": selector("up", target_labels(node, job)), "values": f"1x{MINUTES}"})
    # Triton's own pods: their `up` must not be taken for an exporter's, nor the rest for GPUs.
    for pod, ip, queued in ((ABCDE, "10.0.3.7", 0), (FGHIJ, "10.0.3.8", 3)):
        triton = {"job": "triton", "instance": f"{ip}:8002", "namespace": "ml", "pod": pod}
        out.append({"series": selector("up", triton), "values": f"1x{MINUTES}"})
        model = {"namespace": "ml", "pod": pod, "model": "ranker", "version": "1"}
        out.append({"series": selector("nv_inference_request_success", model), "values": f"0+100x{MINUTES}"})
        out.append({"series": selector("nv_inference_pending_request_count", model), "values": f"{queued}x{MINUTES}"})
    return out


def gpu_key(gpu: Gpu) -> dict[str, str]:
    pod = {"namespace": "ml", "pod": gpu.pod} if gpu.pod else {}
    return {**pod, "hostname": gpu.node.name, "gpu": str(gpu.index), "UUID": gpu.uuid}


def per_gpu(name: str, values: list[float]) -> dict[str, Any]:
    samples = [{"labels": selector(name, gpu_key(g)), "value": v} for g, v in zip(GPUS, values, strict=True)]
    return {"expr": name, "eval_time": "15m", "exp_samples": samples}


def per_pod(name: str, abcde: float, fghij: float) -> dict[str, Any]:
    return {"expr": name, "eval_time": "15m", "exp_samples": [
        {"labels": selector(name, {"namespace": "ml", "pod": ABCDE}), "value": abcde},
        {"labels": selector(name, {"namespace": "ml", "pod": FGHIJ}), "value": fghij}]}


def per_model(name: str, value: float) -> dict[str, Any]:
    return {"expr": name, "eval_time": "15m",
            "exp_samples": [{"labels": selector(name, {"namespace": "ml", "model": "ranker"}), "value": value}]}


def fleet(expr: str, value: float) -> dict[str, Any]:
    return {"expr": expr, "eval_time": "15m", "exp_samples": [{"labels": "{}", "value": value}]}


# At 15 minutes GPU 0 has leaked 4500 MiB: 5500 MiB used.
USED = [5500 * MIB, 2048 * MIB, 420 * MIB]
FREE = [74500 * MIB, 77952 * MIB, 79580 * MIB]
EXPECTED_SAMPLES = [
    per_gpu(n.GPU_UTILIZATION, [0.8, 0.02, 0]),
    per_gpu(n.GPU_FB_USED_BYTES, USED),
    per_gpu(n.GPU_FB_FREE_BYTES, FREE),
    per_gpu(n.GPU_TEMP_CELSIUS, [71, 40, 30]),
    per_gpu(n.GPU_XID_ERRORS, [0, 79, 0]),
    per_gpu(n.GPU_CLOCKS_EVENT_REASONS, [32, 0, 1]),
    per_pod(n.POD_GPU_UTILIZATION, 0.8, 0.02),
    per_pod(n.POD_GPU_SM_ACTIVE, 0.6, 0.01),
    per_pod(n.POD_GPU_TENSOR_ACTIVE, 0.4, 0),
    per_pod(n.POD_GPU_FB_USED_BYTES, USED[0], USED[1]),
    per_pod(n.POD_GPU_FB_FREE_BYTES, FREE[0], FREE[1]),
    per_pod(n.POD_GPU_POWER_WATTS, 300, 80),
    per_model(n.MODEL_GPU_UTILIZATION, (0.8 + 0.02) / 2),
    per_model(n.MODEL_GPU_SM_ACTIVE, (0.6 + 0.01) / 2),
    per_model(n.MODEL_GPU_TENSOR_ACTIVE, 0.2),
    per_model(n.MODEL_GPU_FB_USED_BYTES, USED[0] + USED[1]),
    per_model(n.MODEL_GPU_POWER_WATTS, 380),
    # Fleet totals: three GPUs, each counted once.
    fleet(f"count({n.GPU_UTILIZATION})", 3),
    fleet(f"sum({n.GPU_FB_USED_BYTES})", sum(USED)),
    fleet(f"sum({n.GPU_FB_USED_BYTES} + {n.GPU_FB_FREE_BYTES})", 3 * 80000 * MIB),
]


def alert(name: str, labels: dict[str, str], summary: str, description: str) -> dict[str, Any]:
    return {"exp_labels": labels, "exp_annotations": {
        "summary": summary, "description": description, "runbook_url": f"{RUNBOOKS}/{name.lower()}.md"}}


G0, G1 = gpu_key(GPUS[0]), gpu_key(GPUS[1])
EXPECTED_ALERTS = [
    {"eval_time": "2m", "alertname": "GPUXidErrors", "exp_alerts": [alert(
        "GPUXidErrors", {"severity": "critical", **G1}, "GPU 1 reported Xid error 79.",
        "GPU 1 (GPU-0c9e77b3) reported Xid 79 in the last 10 minutes (host gpu-node-2).")]},
    {"eval_time": "9m", "alertname": "GPUThrottling"},
    {"eval_time": "12m", "alertname": "GPUThrottling", "exp_alerts": [alert(
        "GPUThrottling", {"severity": "warning", "reason": "thermal", **G0}, "GPU 0 clocks are throttled (thermal).",
        "GPU 0 (GPU-5fd4a1e2) has been clock-throttled for thermal reasons; clock event reasons bitmask 32.")]},
    {"eval_time": "12m", "alertname": "GPUIdleWhileQueueing", "exp_alerts": [alert(
        "GPUIdleWhileQueueing", {"severity": "warning", "namespace": "ml", "pod": FGHIJ},
        f"GPU of pod {FGHIJ} is idle while requests queue.",
        f"Pod ml/{FGHIJ} GPU utilisation is 2% while requests wait in its queue: the server or model is stuck, "
        "not short of capacity.")]},
    {"eval_time": "40m", "alertname": "GPUMemoryLeak"},
    # 19000 MiB used at 60m plus 4h x 300 MiB/min = 91000 MiB, beyond the 80000 MiB; the fit over the
    # rule's 30 s samples of 1-minute scrapes (a staircase) lands 79 MiB lower: 90921 MiB = 88.79 GiB.
    {"eval_time": "60m", "alertname": "GPUMemoryLeak", "exp_alerts": [alert(
        "GPUMemoryLeak", {"severity": "warning", **G0}, "GPU 0 on gpu-node-1 will run out of memory.",
        f"Framebuffer use of GPU 0 (GPU-5fd4a1e2) serving pod ml/{ABCDE} trends to 88.79GiB within 4h, "
        "beyond the GPU's memory (linear fit over 6h).")]},
]


def promtool_test(shape: Shape) -> dict[str, Any]:
    order = [g["name"] for rel in (RECORDING, ALERTING) for g in yaml.safe_load((REPO / rel).read_text())["groups"]]
    return {
        "rule_files": [str(REPO / RECORDING), str(REPO / ALERTING)],
        "evaluation_interval": "30s",
        "group_eval_order": order,  # recording groups first, as at steady state
        "tests": [{"name": shape.id, "interval": "1m", "input_series": input_series(shape),
                   "promql_expr_test": EXPECTED_SAMPLES, "alert_rule_test": EXPECTED_ALERTS}],
    }


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_gpu_rules_and_alerts_read_the_same_in_every_dcgm_exporter_shape(shape: Shape, tmp_path: Path) -> None:
    path = tmp_path / f"{shape.id}.yaml"
    path.write_text(yaml.safe_dump(promtool_test(shape), sort_keys=False))
    run = rulecheck.test_rules([path])
    assert run.ok and "SUCCESS" in run.output, run.output


def test_the_shapes_differ_where_the_rules_must_fold_them() -> None:
    """The inputs really are the four shapes: 4.9 names and units, and exported_* behind honorLabels: false."""
    x = {s["series"].split("{")[0] for s in input_series(SHAPES[0])}
    v49 = {s["series"].split("{")[0] for s in input_series(SHAPES[2])}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"} <= x and not x & {"DCGM_FI_DEV_GPU_UTIL_RATIO"}
    assert {"DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_FB_USED_BYTES", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"} <= v49
    assert not v49 & {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS"}
    util49 = [s for s in input_series(SHAPES[2]) if s["series"].startswith("DCGM_FI_DEV_GPU_UTIL_RATIO{")]
    assert util49[0]["values"].startswith("0.8x")
    twice = [s["series"] for s in input_series(SHAPES[3]) if s["series"].startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(twice) == 2 * len(GPUS)
    assert sum('exported_pod="' in s for s in twice) == 2  # the two mapped GPUs, via the GPU Operator's job
