"""Real tritonserver replicas: inference, /metrics and stats like real 2.51 output, batching, scaling,
trace files, the simulated GPU node and kube-state-metrics following the fleet, and the snapshot CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fleets import fleet_fixture
from tests.paths import FIXTURES
from tidescale.devstack.fleet.exposition import parse
from tidescale.devstack.fleet.loadgen import LoadGenerator
from tidescale.devstack.fleet.running import running_fleet
from tidescale.devstack.fleet.stack import FleetStack
from tidescale.devstack.fleet.triton import TraceSettings
from tidescale.sim.traffic import scenario

pytestmark = pytest.mark.integration
REAL = FIXTURES / "triton" / "real-2.51"


# The one-line fixture other areas use: a FleetStack started once for this module.
stack = fleet_fixture(replicas=2, scope="module", stack=True, gpus_per_node=4, trace=TraceSettings(rate=1))


@pytest.fixture(scope="module")
def played(stack: FleetStack) -> LoadGenerator:
    """A short burst well above one instance's batch-1 capacity (58 req/s for resnet50) on replica 0."""
    first = stack.fleet.replicas[0].http_url
    gen = LoadGenerator(scenario("steady", 150.0, 2.0), lambda: [first], ["resnet50"], seed=3).start()
    assert gen.wait(60)
    # and a few requests for both models on every replica
    mixed = LoadGenerator(scenario("steady", 20.0, 1.0), stack.fleet.ready_urls, ["resnet50", "ctr_ranker"]).start()
    assert mixed.wait(60)
    return gen


def test_replicas_are_ready_with_pod_labels_and_version(stack: FleetStack) -> None:
    fleet = stack.fleet
    assert len(fleet.ready_replicas()) == 2
    assert fleet.replicas[0].server_version().startswith("2.51")
    targets = fleet.scrape_targets()
    assert [t[1]["pod"] for t in targets] == [r.pod for r in fleet.replicas]
    assert all(t[0].startswith("127.0.0.1:") and t[1]["deployment"] == "triton" for t in targets)


def test_inference_succeeds_and_dynamic_batching_forms_batches(stack: FleetStack, played: LoadGenerator) -> None:
    records = played.records()
    assert records and all(r.ok for r in records)
    stats = stack.fleet.replicas[0].model_stats()
    resnet = next(m for m in stats["model_stats"] if m["name"] == "resnet50")
    sizes = {b["batch_size"] for b in resnet["batch_stats"]}
    assert max(sizes) > 1, sizes
    assert resnet["execution_count"] < resnet["inference_count"]


def test_metrics_have_the_families_types_and_labels_of_real_triton_2_51(stack: FleetStack,
                                                                         played: LoadGenerator) -> None:
    real = parse((REAL / "metrics_during_load.txt").read_text())
    ours = parse(stack.fleet.replicas[0].metrics_text())
    always = {n for n in real if "summary" not in n}
    assert always <= set(ours)
    for name in always:
        assert ours[name].type == real[name].type
        assert {s.label_keys for s in ours[name].samples} == {s.label_keys for s in real[name].samples}, name
    count = {s.label_dict["model"]: s.value for s in ours["nv_inference_count"].samples}
    execs = {s.label_dict["model"]: s.value for s in ours["nv_inference_exec_count"].samples}
    assert count["resnet50"] > execs["resnet50"] > 0


def test_stats_have_the_shape_of_real_triton_2_51(stack: FleetStack, played: LoadGenerator) -> None:
    real = json.loads((REAL / "stats.json").read_text())["model_stats"][0]
    ours = next(m for m in stack.fleet.replicas[0].model_stats()["model_stats"] if m["name"] == "resnet50")
    assert set(real) <= set(ours)
    assert set(real["inference_stats"]) == set(ours["inference_stats"])
    assert set(real["batch_stats"][0]) == set(ours["batch_stats"][0])


def test_gpu_node_and_kube_state_follow_the_fleet(stack: FleetStack, played: LoadGenerator) -> None:
    fleet = stack.fleet
    url = fleet.ready_urls()[-1]
    pod = fleet.replicas[-1].pod
    gen = LoadGenerator(scenario("steady", 60.0, 3.0), lambda: [url], ["resnet50"]).start()
    peak = 0.0
    while gen.running:  # the GPU node samples every 0.5 s on its own; watch it like a scraper would
        dcgm = parse(httpx.get(stack.gpus.nodes[0].metrics_url).text)
        util = {s.label_dict.get("pod"): s.value for s in dcgm["DCGM_FI_DEV_GPU_UTIL"].samples}
        peak = max(peak, util.get(pod, 0.0))
        time.sleep(0.25)
    assert set(util) - {None} == {r.pod for r in fleet.replicas}
    assert 0 < peak <= 100
    fb = {s.label_dict.get("pod"): s.value for s in dcgm["DCGM_FI_DEV_FB_USED"].samples}
    assert all(fb[r.pod] > fb[None] for r in fleet.replicas)  # models loaded on assigned GPUs
    ksm = parse(httpx.get(stack.kube.metrics_url).text)
    assert ksm["kube_deployment_status_replicas_ready"].samples[0].value == 2

    # Throttling the pod's GPU from outside (POST /faults) stretches that replica's executions.
    placed = stack.gpus.node_of(pod)
    assert placed is not None
    node, index = placed
    auth = {"Authorization": f"Bearer {node.fault_token}"}
    resp = httpx.post(f"{node.url}/faults", json={"gpu": index, "throttle_bits": 0x8}, headers=auth)
    assert resp.status_code == 200
    assert float(fleet.replicas[-1].slowdown_file.read_text()) > 1.0
    httpx.post(f"{node.url}/faults", json={"gpu": index, "clear": True}, headers=auth)
    assert float(fleet.replicas[-1].slowdown_file.read_text()) == 1.0


def test_trace_file_records_request_timestamps(stack: FleetStack, played: LoadGenerator) -> None:
    """Runs last in this module: it stops replica 0 so Triton completes its trace file."""
    replica = stack.fleet.replicas[0]
    replica.stop()
    path = next(replica.workdir.glob("trace.json*"))
    events = json.loads(path.read_text())
    names = {t["name"] for e in events for t in e.get("timestamps", [])}
    assert {"REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_END", "REQUEST_END"} <= names
    assert any(e.get("model_name") == "resnet50" for e in events)
    assert not replica.ready and replica.pod not in {r.pod for r in stack.fleet.ready_replicas()}


def test_scale_up_down_and_crash_restart(tmp_path: Path) -> None:
    with running_fleet(tmp_path, replicas=1, load_seconds=1.5) as fleet:
        first = fleet.replicas[0].pod
        fleet.scale_to(3)
        assert fleet.spec_replicas == 3
        assert len(fleet.ready_replicas()) == 1  # the new pods are still loading their models
        fleet.wait_ready(3, timeout=60)
        assert len(fleet.ready_urls()) == 3
        newest = fleet.replicas[-1]
        fleet.scale_to(1)
        assert [r.pod for r in fleet.replicas] == [first]
        assert not newest.ready
        deadline = time.monotonic() + 30
        while newest.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not newest.alive()

        # A crashed pod is restarted (after back-off and its cold start) and the restart is counted.
        fleet.kill_replica(first)
        deadline = time.monotonic() + 60
        while (fleet.restarts[first] == 0 or not fleet.ready_replicas()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert fleet.restarts[first] == 1
        assert [r.pod for r in fleet.ready_replicas()] == [first]
        assert newest.pod not in fleet.restarts or fleet.restarts[newest.pod] == 0  # scaled down ≠ crashed
        # Recorded as kubectl would show lastState.terminated after an OOM kill: SIGKILL, exit code 137.
        assert [(c.pod, c.signal, c.exit_code) for c in fleet.crashes()] == [(first, 9, 137)]


def test_snapshot_cli_prints_triton_stats() -> None:
    out = subprocess.run([sys.executable, "-m", "tidescale.cli", "fleet", "snapshot", "--what", "triton-stats",
                          "--rps", "20", "--burst-seconds", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert {m["name"] for m in stats["model_stats"]} == {"resnet50", "ctr_ranker"}
    assert sum(m["inference_count"] for m in stats["model_stats"]) > 0


def test_opentelemetry_trace_mode_posts_otlp_json(tmp_path: Path) -> None:
    from tidescale.devstack.fleet.httpserve import LoopbackHttpServer, Response, json_response

    bodies: list[bytes] = []

    def receive(headers: dict[str, str], body: bytes) -> Response:
        bodies.append(body)
        return json_response(200, {})

    receiver = LoopbackHttpServer("otlp-receiver")
    receiver.post_routes["/v1/traces"] = receive
    receiver.start()
    try:
        trace = TraceSettings(mode="opentelemetry", url=f"{receiver.url}/v1/traces")
        with running_fleet(tmp_path, replicas=1, trace=trace) as fleet:
            gen = LoadGenerator(scenario("steady", 10.0, 1.0), fleet.ready_urls, ["ctr_ranker"]).start()
            gen.wait(30)
            deadline = time.monotonic() + 15
            while "ctr_ranker" not in _span_names(bodies) and time.monotonic() < deadline:
                time.sleep(0.2)  # a request's spans may arrive in separate bodies
    finally:
        receiver.stop()
    assert "ctr_ranker" in _span_names(bodies)


def _span_names(bodies: list[bytes]) -> set[str]:
    return {s["name"] for b in list(bodies) for rs in json.loads(b)["resourceSpans"]
            for ss in rs["scopeSpans"] for s in ss["spans"]}
