"""`tidescale bench cardinality`'s pieces: the fleet's shape, what each source's page holds, and the
synthetic exporters Prometheus scrapes (the measurement itself runs a real Prometheus: a benchmark)."""

from __future__ import annotations

import math

import httpx
import pytest

from tidescale.benches import cardinality as card
from tidescale.devstack.fleet.exposition import parse


def test_a_fleet_has_ten_pods_per_deployment_and_eight_gpus_per_node() -> None:
    fleet = card.Fleet(25)
    assert len(fleet.deployments()) == 3 and len(fleet.all_pods()) == 25
    assert [len(fleet.pods_of(d)) for d in fleet.deployments()] == [10, 10, 5]
    bodies = card.build_bodies(fleet)
    nodes = math.ceil(25 / 8)
    assert len(bodies["triton"]) == 25 and len(bodies["dcgm-exporter"]) == len(bodies[card.EXPORTER]) == nodes
    assert len({p for _, p in fleet.all_pods()}) == 25


def test_each_deployment_serves_its_own_models_in_the_captured_format() -> None:
    body = card.triton_body("triton-0007")
    families = parse(body.render().decode())
    models = {s.label_dict["model"] for f in families.values() for s in f.samples if "model" in s.label_dict}
    assert models == {"batcher_triton_0007", "echo_triton_0007"}


def test_counters_grow_at_every_scrape_and_gauges_do_not() -> None:
    body = card.as_body("# TYPE c_total counter\nc_total 2\n# TYPE g gauge\ng 1\n")
    first, second = (dict(line.rsplit(" ", 1) for line in body.render().decode().splitlines()) for _ in range(2))
    assert float(second["c_total"]) > float(first["c_total"]) and first["g"] == second["g"] == "1"


def test_the_exporter_costs_a_histogram_per_pod_model_version_and_stage_and_fewer_buckets_cost_less() -> None:
    unit = card.per_unit()
    assert unit["triton_per_model_version"] * 2 + unit["triton_per_pod_without_models"] == unit["triton_per_pod"]
    full = unit["exporter_per_pod_and_model_version"]
    lean = [unit[f"exporter_per_pod_and_model_version_at_max_buckets_{n}"] for n in card.LEAN_BUCKETS]
    assert full > lean[0] > lean[1] > 0
    assert full > 5 * unit["triton_per_model_version"]  # the per-pod histogram is the cost to know about


def test_the_synthetic_exporters_serve_each_page_at_its_path_and_refuse_others() -> None:
    fleet = card.Fleet(3)
    with card.SyntheticExporters(card.build_bodies(fleet)) as exporters:
        targets = exporters.targets(fleet)
        assert len(targets) == 3 + 1 + 1 + 1  # pods, one node's dcgm-exporter and exporter, kube-state-metrics
        for t in targets:
            response = httpx.get(f"http://{t.address}{t.labels['__metrics_path__']}")
            assert response.status_code == 200 and parse(response.text)
        assert httpx.get(f"http://{exporters.address}/triton/99").status_code == 404
        assert httpx.get(f"http://{exporters.address}/nothing").status_code == 404


@pytest.mark.parametrize("pods", [1, 9])
def test_extrapolation_scales_every_source_with_the_fleet(pods: int) -> None:
    point = {"pods": pods, "series": {"triton": 81.0 * pods}, "head_series": 100.0 * pods,
             "prometheus_rss_bytes": 1e6 * pods, "rule_evaluation_s_sum": 0.01 * pods}
    big = card.extrapolate(point, 10_000)
    assert big["series"]["triton"] == 810_000 and big["extrapolated_from"] == pods
