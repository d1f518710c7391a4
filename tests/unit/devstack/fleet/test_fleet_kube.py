"""Simulated kube-state-metrics: families, label keys and values."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
import pytest

from tidescale.contracts import catalog
from tidescale.contracts.errors import UsageError
from tidescale.devstack.fleet.exposition import parse
from tidescale.devstack.fleet.kube import KubeStateMetricsServer, check_hpa, pod_uid, render_kube_state
from tidescale.sim.hpa_controller import HpaStatus


@dataclass
class FakePod:
    pod: str
    ready: bool


@dataclass
class FakeFleet:
    replicas: list[FakePod]
    namespace: str = "tidescale-demo"
    deployment: str = "triton"
    restarts: dict[str, int] = field(default_factory=dict)


def test_deployment_and_pod_families() -> None:
    text = render_kube_state("ns", "triton", [("triton-h-aaaaa", True, 0), ("triton-h-bbbbb", False, 2)], {})
    fams = parse(text)
    for name, fam in fams.items():
        assert fam.type == catalog.get(name).type
        for s in fam.samples:
            assert set(catalog.get(name).labels) <= set(s.label_keys), name
    dep = {n: fams[n].samples[0] for n in ("kube_deployment_spec_replicas", "kube_deployment_status_replicas",
                                           "kube_deployment_status_replicas_ready")}
    assert dep["kube_deployment_spec_replicas"].label_keys == ("namespace", "deployment")
    assert [s.value for s in dep.values()] == [2, 2, 1]
    ready = {(s.label_dict["pod"], s.label_dict["condition"]): s.value for s in fams["kube_pod_status_ready"].samples}
    assert ready[("triton-h-aaaaa", "true")] == 1 and ready[("triton-h-aaaaa", "false")] == 0
    assert ready[("triton-h-bbbbb", "true")] == 0 and ready[("triton-h-bbbbb", "false")] == 1
    assert all(v == 0 for (_, cond), v in ready.items() if cond == "unknown")
    restarts = fams["kube_pod_container_status_restarts_total"].samples[1]
    assert restarts.label_keys == ("namespace", "pod", "uid", "container") and restarts.value == 2
    assert restarts.label_dict["uid"] == pod_uid("triton-h-bbbbb")
    owner = fams["kube_pod_owner"].samples[0].label_dict
    assert owner["owner_kind"] == "ReplicaSet" and owner["owner_name"] == "triton-h"
    assert "kube_horizontalpodautoscaler_spec_max_replicas" not in fams  # no HPA yet


def test_hpa_families_follow_set_hpa_and_server_serves_them() -> None:
    fleet = FakeFleet([FakePod("triton-h-aaaaa", True)], restarts={"triton-h-aaaaa": 1})
    ksm = KubeStateMetricsServer(fleet).start()  # type: ignore[arg-type]
    try:
        ksm.set_hpa("triton", 1, 10, 1, 4)
        fams = parse(httpx.get(ksm.metrics_url).text)
    finally:
        ksm.stop()
    values = {n: fams[n].samples[0].value for n in fams if n.startswith("kube_horizontalpodautoscaler_")}
    assert values == {"kube_horizontalpodautoscaler_info": 1,
                      "kube_horizontalpodautoscaler_spec_min_replicas": 1,
                      "kube_horizontalpodautoscaler_spec_max_replicas": 10,
                      "kube_horizontalpodautoscaler_status_current_replicas": 1,
                      "kube_horizontalpodautoscaler_status_desired_replicas": 4}
    key = fams["kube_horizontalpodautoscaler_status_desired_replicas"].samples[0]
    assert key.label_dict == {"namespace": "tidescale-demo", "horizontalpodautoscaler": "triton"}
    assert fams["kube_pod_container_status_restarts_total"].samples[0].value == 1


@pytest.mark.parametrize(("lo", "hi", "cur", "want"), [(0, 5, 1, 1), (6, 5, 1, 1), (1, 5, -1, 1), (1, 5, 1, -2)])
def test_invalid_hpa_status(lo: int, hi: int, cur: int, want: int) -> None:
    with pytest.raises(UsageError):
        check_hpa("h", HpaStatus(lo, hi, cur, want))
