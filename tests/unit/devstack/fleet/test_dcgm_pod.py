"""The simulated dcgm-exporter pod of the local cluster: GPUs follow the node agent's pod-resources file."""

from __future__ import annotations

import json
from pathlib import Path

from tests.paths import FIXTURES
from tidescale.devstack.cluster.dcgm import PodMappedGpuNode, PodWorkload, read_assignments
from tidescale.devstack.fleet.exposition import parse

H100 = FIXTURES / "dcgm" / "metrics_h100_eks_gpu_operator_pod_mapped_excerpt.txt"


def write(path: Path, rows: object) -> None:
    path.write_text(json.dumps(rows))


def test_assignments_map_each_gpu_to_its_container_and_skip_what_cannot_be_read(tmp_path: Path) -> None:
    path = tmp_path / "pod-resources.json"
    assert read_assignments(path) == {}  # not written yet
    path.write_text('[{"namespace": "inf')  # half-written
    assert read_assignments(path) == {}
    write(path, [{"namespace": "inference", "pod": "triton-a", "container": "triton", "ip": "10.244.0.7",
                  "gpus": [0, 2]}, {"pod": "no-namespace"}, "junk"])
    got = read_assignments(path)
    assert sorted(got) == [0, 2]
    assert got[0] == PodWorkload("inference", "triton-a", "triton", "10.244.0.7")
    assert got[0].http_url == "http://10.244.0.7:8000"


def test_series_carry_the_pod_that_holds_each_gpu_and_follow_it_as_pods_come_and_go(tmp_path: Path) -> None:
    path = tmp_path / "pod-resources.json"
    busy = {"10.244.0.7": 0.0}
    node = PodMappedGpuNode(path, "tsc-node-0", 2, host="127.0.0.1",
                            busy_reader=lambda w: busy.get(w.http_url.split("//")[1].split(":")[0]))
    write(path, [{"namespace": "inference", "pod": "triton-a", "container": "triton", "ip": "10.244.0.7",
                  "gpus": [1]}])
    node.sample()
    samples = parse(node.render())["DCGM_FI_DEV_GPU_UTIL"].samples
    free, held = samples
    assert "pod" not in free.label_dict
    assert (held.label_dict["namespace"], held.label_dict["pod"], held.label_dict["container"],
            held.label_dict["Hostname"]) == ("inference", "triton-a", "triton", "tsc-node-0")
    real = parse(H100.read_text())["DCGM_FI_DEV_GPU_UTIL"].samples[0]
    assert held.label_keys == real.label_keys
    write(path, [])  # the pod is gone: its GPU loses the labels
    node.sample()
    assert all("pod" not in s.label_dict for s in parse(node.render())["DCGM_FI_DEV_GPU_UTIL"].samples)


def test_the_pod_serves_dcgm_exporter_4_9_names_when_its_manifest_asks(tmp_path: Path) -> None:
    import string

    import yaml

    from tests.paths import REPO

    text = (REPO / "deploy/cluster/manifests/dcgm-exporter.yaml").read_text()
    docs = list(yaml.safe_load_all(string.Template(text).safe_substitute(NAMESPACE="gpu-operator")))
    container = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TIDESCALE_DCGM_EXPORTER_VERSION"] == "4.x"  # the default; the CLI reads this variable
    path = tmp_path / "pod-resources.json"
    write(path, [{"namespace": "inference", "pod": "triton-a", "container": "triton", "ip": "10.244.0.7",
                  "gpus": [0]}])
    node = PodMappedGpuNode(path, "tsc-node-0", 1, host="127.0.0.1", busy_reader=lambda _: 0.0, dcgm_version="4.9")
    node.sample()
    fams = parse(node.render())
    assert "DCGM_FI_DEV_GPU_UTIL" not in fams
    held = fams["DCGM_FI_DEV_GPU_UTIL_RATIO"].samples[0].label_dict
    assert (held["pod"], held["hostname"]) == ("triton-a", "tsc-node-0") and "Hostname" not in held
