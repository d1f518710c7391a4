"""Simulated dcgm-exporter: format against real fixtures, duty-cycle physics, faults over HTTP."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.clocks import ManualClock
from tests.paths import FIXTURES
from tidescale.contracts import catalog
from tidescale.contracts.errors import UsageError
from tidescale.devstack.fleet.exposition import parse
from tidescale.devstack.fleet.gpus import (
    CLOCKS_GPU_IDLE,
    CLOCKS_HW_SLOWDOWN,
    FIELDS,
    Faults,
    GpuAssignment,
    GpuModel,
    SimulatedGpuNode,
    busy_seconds_from_stats,
    derive_readings,
    parse_fault_request,
)
from tidescale.devstack.fleet.nodes import place

A100 = FIXTURES / "dcgm" / "metrics_grid_a100_vgpu_dcgm_exporter_4.x.txt"
H100 = FIXTURES / "dcgm" / "metrics_h100_eks_gpu_operator_pod_mapped_excerpt.txt"


@dataclass
class FakeReplica:
    pod: str = "triton-abcde-x7k2q"
    namespace: str = "tidescale-demo"
    http_url: str = "http://127.0.0.1:1"
    up: bool = True
    slowdowns: list[float] = field(default_factory=list)

    def alive(self) -> bool:
        return self.up

    def set_slowdown(self, factor: float) -> None:
        self.slowdowns.append(factor)


def make_node(busy: list[float], clock: ManualClock, **kwargs: object) -> SimulatedGpuNode:
    return SimulatedGpuNode("node-a", [GpuAssignment(FakeReplica(), model_memory_mib=4096), GpuAssignment()],
                            busy_reader=lambda _: busy[0], clock=clock, **kwargs)  # type: ignore[arg-type]


def test_families_types_and_label_keys_match_real_dcgm_exporter() -> None:
    ours = parse(make_node([0.0], ManualClock()).render())
    real = parse(A100.read_text())
    assert set(ours) == set(FIELDS)
    shared = set(ours) & set(real)
    assert {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS"} <= shared
    for name in shared:
        assert ours[name].type == real[name].type, name
        assert ours[name].help == real[name].help, name
        # GPU 1 carries no pod: exactly the unmapped key order of the real exporter.
        assert ours[name].samples[1].label_keys == real[name].samples[0].label_keys, name
    for name, fam in ours.items():
        assert fam.type == catalog.get(name).type and fam.help == catalog.get(name).help


def test_pod_mapped_gpu_has_the_label_order_of_the_real_pod_mapped_exporter() -> None:
    real = parse(H100.read_text())["DCGM_FI_DEV_GPU_TEMP"].samples[1]
    ours = parse(make_node([0.0], ManualClock()).render())["DCGM_FI_DEV_GPU_TEMP"].samples[0]
    assert ours.label_keys == real.label_keys
    assert ours.label_dict["pod"] == "triton-abcde-x7k2q" and ours.label_dict["namespace"] == "tidescale-demo"


def test_value_formatting_follows_dcgm_exporter() -> None:
    text = make_node([0.0], ManualClock()).render()
    power = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_POWER_USAGE{"))
    util = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    assert power.rsplit(" ", 1)[1] == "58.000000"  # %f like the H100 fixture's 67.692000
    assert util.rsplit(" ", 1)[1] == "0"


def gpu0(node: SimulatedGpuNode) -> dict[str, float]:
    fams = parse(node.render())
    return {name: fam.samples[0].value for name, fam in fams.items()}


def test_utilisation_is_the_duty_cycle_of_busy_time() -> None:
    busy, clock = [10.0], ManualClock()
    node = make_node(busy, clock)
    node.sample()
    clock.now, busy[0] = 2.0, 11.5  # 1.5 s busy in 2 s
    node.sample()
    values = gpu0(node)
    assert values["DCGM_FI_DEV_GPU_UTIL"] == 75
    assert values["DCGM_FI_PROF_SM_ACTIVE"] < 0.75 and values["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] < 0.75
    assert values["DCGM_FI_DEV_POWER_USAGE"] > 58 and values["DCGM_FI_DEV_GPU_TEMP"] > 31
    assert values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] > 0
    assert values["DCGM_FI_DEV_FB_USED"] == GpuModel().fb_base_used_mib + 4096
    total = GpuModel().fb_total_mib
    assert values["DCGM_FI_DEV_FB_USED"] + values["DCGM_FI_DEV_FB_FREE"] + values["DCGM_FI_DEV_FB_RESERVED"] == total
    clock.now, busy[0] = 3.0, 0.0  # counters reset (model reload): no negative utilisation
    node.sample()
    assert gpu0(node)["DCGM_FI_DEV_GPU_UTIL"] == 0


def test_idle_gpu_reports_idle_clock_reason_and_no_model_memory_when_pod_is_gone() -> None:
    clock = ManualClock()
    node = make_node([0.0], clock)
    node.assign(0, None)
    node.sample()
    values = gpu0(node)
    assert int(values["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]) & CLOCKS_GPU_IDLE
    assert values["DCGM_FI_DEV_FB_USED"] == GpuModel().fb_base_used_mib
    assert "pod" not in parse(node.render())["DCGM_FI_DEV_GPU_UTIL"].samples[0].label_dict


def test_faults_leak_xid_throttle_and_clear() -> None:
    busy, clock = [0.0], ManualClock()
    node = make_node(busy, clock)
    node.sample()
    node.inject_fb_leak(100.0, gpu=0)
    node.inject_xid(79, gpu=0)
    node.inject_throttle(CLOCKS_HW_SLOWDOWN, gpu=0)
    clock.now, busy[0] = 10.0, 5.0
    node.sample()
    values = gpu0(node)
    assert values["DCGM_FI_DEV_FB_USED"] == GpuModel().fb_base_used_mib + 4096 + 1000
    assert values["DCGM_FI_DEV_XID_ERRORS"] == 79
    assert values["DCGM_FI_DEV_SM_CLOCK"] == GpuModel().sm_clock_throttled
    xid = parse(node.render())["DCGM_FI_DEV_XID_ERRORS"].samples[0].label_dict
    assert xid["err_code"] == "79" and xid["err_msg"] == "GPU has fallen off the bus"
    assert gpu0(node)["DCGM_FI_DEV_XID_ERRORS"] == 79
    assert parse(node.render())["DCGM_FI_DEV_XID_ERRORS"].samples[1].value == 0  # only GPU 0
    node.clear_faults()
    assert gpu0(node)["DCGM_FI_DEV_XID_ERRORS"] == 0
    with pytest.raises(UsageError):
        node.inject_xid(5, gpu=7)


def test_leak_cannot_exceed_the_framebuffer() -> None:
    board = GpuModel()
    r = derive_readings(0.5, 0, 10 * board.fb_total_mib, Faults(), board)
    assert r.values["DCGM_FI_DEV_FB_FREE"] == 0


def test_busy_seconds_sum_batch_executions_not_requests() -> None:
    stats = json.loads((FIXTURES / "triton" / "real-2.51" / "stats.json").read_text())
    expected = sum(int(b["compute_infer"]["ns"]) for m in stats["model_stats"] for b in m.get("batch_stats", []))
    assert busy_seconds_from_stats(stats) == pytest.approx(expected / 1e9)
    per_request = sum(int(m["inference_stats"]["compute_infer"]["ns"]) for m in stats["model_stats"])
    assert busy_seconds_from_stats(stats) < per_request / 1e9
    # gRPC-as-JSON: numbers as strings, zero objects as {}
    grpc = {"model_stats": [{"batch_stats": [{"compute_infer": {"count": "2", "ns": "3000000000"}},
                                             {"compute_infer": {}}]}]}
    assert busy_seconds_from_stats(grpc) == 3.0


@pytest.mark.parametrize(("body", "what"), [
    (b"not json", "JSON"), (b"[]", "object"), (b'{"bogus": 1}', "unknown"), (b'{"gpu": 9}', "gpu"),
    (b'{"gpu": true}', "gpu"), (b'{"xid": -1}', "xid"), (b'{"throttle_bits": 4096}', "throttle_bits"),
    (b'{"fb_leak_mib_per_s": "fast"}', "fb_leak"), (b'{"clear": 1}', "clear"),
])
def test_fault_requests_are_validated(body: bytes, what: str) -> None:
    with pytest.raises(UsageError, match=what):
        parse_fault_request(body, gpu_count=2)


def test_http_endpoint_serves_metrics_and_guards_faults_with_a_token() -> None:
    node = make_node([0.0], ManualClock(), token="s3cret").start(sample=False)
    try:
        resp = httpx.get(node.metrics_url)
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert "DCGM_FI_DEV_GPU_UTIL" in resp.text
        denied = httpx.post(f"{node.url}/faults", json={"xid": 43})
        assert denied.status_code == 401 and "s3cret" not in denied.text
        auth = {"Authorization": "Bearer s3cret"}
        bad = httpx.post(f"{node.url}/faults", json={"xid": "x"}, headers=auth)
        assert bad.status_code == 400 and "xid" in bad.json()["detail"]
        ok = httpx.post(f"{node.url}/faults", json={"xid": 43, "gpu": 1}, headers=auth)
        assert ok.status_code == 200
        assert parse(httpx.get(node.metrics_url).text)["DCGM_FI_DEV_XID_ERRORS"].samples[1].value == 43
        httpx.post(f"{node.url}/faults", json={"clear": True}, headers=auth)
        assert parse(httpx.get(node.metrics_url).text)["DCGM_FI_DEV_XID_ERRORS"].samples[1].value == 0
        assert httpx.get(f"{node.url}/nope").status_code == 404
    finally:
        node.stop()


def test_placement_keeps_slots_and_reuses_freed_ones() -> None:
    slots = place([None, None, None], ["a", "b"])
    assert slots == ["a", "b", None]
    slots = place(slots, ["b", "c", "d"])  # a left, c takes its slot, d the free one
    assert slots == ["c", "b", "d"]
    assert place(["x"], ["y", "z"]) == ["y"]  # more pods than GPUs


def test_throttling_slows_the_assigned_pod_and_clearing_restores_it() -> None:
    node = make_node([0.0], ManualClock())
    pod = node.gpus[0].replica
    assert isinstance(pod, FakeReplica)
    node.inject_throttle(CLOCKS_HW_SLOWDOWN, gpu=0)
    board = GpuModel()
    assert pod.slowdowns == [pytest.approx(board.sm_clock_max / board.sm_clock_throttled)]
    node.inject_throttle(0x2, gpu=0)  # a clocks-setting reason is not a slowdown
    node.clear_faults(gpu=0)
    assert pod.slowdowns[1:] == [1.0, 1.0]
    node.inject_throttle(CLOCKS_HW_SLOWDOWN, gpu=1)  # an unassigned GPU has nobody to slow down
    late = FakeReplica(pod="late-pod")
    node.assign(1, late)
    assert late.slowdowns and late.slowdowns[0] > 1.0


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                         max_size=3), max_leaves=8)
fault_keys = st.sampled_from(["gpu", "fb_leak_mib_per_s", "xid", "throttle_bits", "clear", "other"])


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.binary(max_size=40), st.dictionaries(fault_keys, json_values, max_size=4).map(
    lambda d: json.dumps(d).encode())))
def test_fault_request_parser_fuzz(body: bytes) -> None:
    try:
        req = parse_fault_request(body, gpu_count=2)
    except UsageError:
        return
    node = make_node([0.0], ManualClock())
    status, _, _ = node._post_faults({"authorization": f"Bearer {node.fault_token}"}, body)
    assert status == 200, req
