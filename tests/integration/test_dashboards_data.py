"""Every dashboard panel returns data against the local stack: real Triton replicas sending OTLP traces
to the real exporter, simulated GPUs (dcgm-exporter) and kube-state-metrics, the recommender and the
review service, a real Prometheus with the generated rules, a profile upload (its string-op share
makes TritonModelReviewRequired pending) and an injected XID fault (so GPUXidErrors fires).

Queries whose producer is not part of this stack are listed in NOT_IN_THIS_STACK with the reason;
the test fails if such a query returns data after all (the list is stale) or if any other query
returns nothing. The previews are rendered too, one PNG per dashboard.
"""

from __future__ import annotations

import gzip
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml

from tests.paths import FIXTURES
from tidescale.devstack import preview, rulecheck
from tidescale.devstack.exporter import spawn_exporter
from tidescale.devstack.fleet.loadgen import LoadGenerator
from tidescale.devstack.fleet.running import running_stack
from tidescale.devstack.fleet.stack import FleetStack
from tidescale.devstack.fleet.triton import TraceSettings
from tidescale.devstack.ports import free_port
from tidescale.devstack.procs import ManagedProcess, stop_all
from tidescale.devstack.promstack import PrometheusServer, ScrapeTarget
from tidescale.sim.traffic import scenario

pytestmark = pytest.mark.integration

TOKEN = "dashboards-test-token"
NAMESPACE = "tidescale-demo"
DEPLOYMENT = "triton"
MODELS = ["resnet50", "ctr_ranker"]
# (dashboard uid, panel title) -> why its queries may be empty here: the metric's producer is not
# started by this test (the recommender and review service are separate services; cold-start
# time comes from the demo's autoscaling loop).
# The local fleet's Triton replicas send their spans from one address (127.0.0.1) and set no
# `k8s.deployment.name` resource attribute, so the exporter attributes no span to a Deployment here: the
# per-Deployment P99 and SLO threshold (what the recommender holds each target to, with the model's
# P99 as its fallback) are recorded on a cluster, where each pod sends from its own IP.
PER_DEPLOYMENT_LATENCY = "spans carry no Deployment in the local fleet (one address, no resource attribute)"
NOT_IN_THIS_STACK: dict[tuple[str, str], str] = {
    ("tidescale-autoscaling", "P99 the recommender holds each target to"): PER_DEPLOYMENT_LATENCY,
}
# Single queries inside panels that otherwise have data: (uid, panel title, query index) -> why.
QUERIES_NOT_IN_THIS_STACK: dict[tuple[str, str, int], str] = {}


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("dashboards")
    exporter_port = free_port()
    trace = TraceSettings(mode="opentelemetry", url=f"http://127.0.0.1:{exporter_port}/v1/traces")
    with running_stack(work / "fleet", replicas=2, gpus_per_node=2, trace=trace, namespace=NAMESPACE,
                       deployment=DEPLOYMENT) as stack:
        exporter = _start_exporter(work, exporter_port, stack)
        prom = PrometheusServer(work / "prom", rule_files=rulecheck.filled_rule_files(work / "rules"))
        services = {"tidescale-recommender": free_port(), "tidescale-reviews": free_port()}
        prom.set_targets(_targets(stack, exporter_port, services))
        load: LoadGenerator | None = None
        procs = [exporter]
        try:
            prom.start()
            procs.append(_start_recommender(work, services["tidescale-recommender"], prom.url))
            procs.append(_start_reviews(work, services["tidescale-reviews"]))
            stack.kube.set_hpa(DEPLOYMENT, 1, 4, current=2, desired=2)
            _upload_profile(exporter_port)
            node, gpu = stack.gpus.node_of(stack.fleet.replicas[0].pod) or (stack.gpus.nodes[0], 0)
            node.inject_xid(79, gpu)
            load = LoadGenerator(scenario("steady", 40.0, 600.0), stack.fleet.ready_urls, MODELS, seed=1).start()
            prom.wait_for_targets_up(count=2 + len(stack.gpus.nodes) + 4, timeout=60)
            # Recording-rule groups run every 30 s, and the GPU group joins what the requests group
            # records: wait until every recorded series a panel reads exists, and the XID alert.
            for name in recorded_series_read_by_panels():
                prom.wait_for(name, timeout=120)
            prom.wait_for('ALERTS{alertname="GPUXidErrors", alertstate="firing"}', timeout=120)
            # The review alert has `for: 15m`; once it is pending, deliver it as Alertmanager would.
            [pending] = prom.wait_for('ALERTS{alertname="TritonModelReviewRequired"}', timeout=120)
            _deliver_review(services["tidescale-reviews"], pending["metric"])
            prom.wait_for('tidescale_model_reviews{state="open"} > 0', timeout=30)
            prom.wait_for("tidescale_desired_replicas", timeout=60)
            yield prom.url
        finally:
            if load is not None:
                load.stop()
            prom.stop()
            stop_all(procs)


def _start_exporter(work: Path, port: int, stack: FleetStack) -> ManagedProcess:
    args = [arg for url in stack.fleet.ready_urls() for arg in ("--triton", url)]
    env = {"TIDESCALE_EXPORTER_TRACES_REQUIRE_TOKEN": "false", "TIDESCALE_EXPORTER_POLL_INTERVAL_S": "1"}
    return spawn_exporter(work, token=TOKEN, port=port, env=env, args=args)[0]


def _start_recommender(work: Path, port: int, prometheus_url: str) -> ManagedProcess:
    config = work / "recommender.yaml"
    config.write_text(yaml.safe_dump({"recommender": {"targets": [
        {"deployment": DEPLOYMENT, "namespace": NAMESPACE, "model": "resnet50", "max_replicas": 4}]}}))
    argv = [sys.executable, "-m", "tidescale.cli", "autoscale", "recommend", "--config", str(config),
            "--prometheus-url", prometheus_url, "--host", "127.0.0.1", "--port", str(port), "--interval", "2",
            "--capacity-rps", "50"]
    proc = ManagedProcess("recommender", argv, work / "recommender.log").start()
    proc.wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
    return proc


def _start_reviews(work: Path, port: int) -> ManagedProcess:
    argv = [sys.executable, "-m", "tidescale.cli", "reviews", "serve", "--port", str(port),
            "--database", f"sqlite:///{work / 'reviews.db'}"]
    proc = ManagedProcess("reviews", argv, work / "reviews.log",
                          env={**os.environ, "TIDESCALE_REVIEWS_TOKEN": TOKEN}).start()
    proc.wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
    return proc


def _deliver_review(port: int, labels: dict[str, str]) -> None:
    """The Alertmanager webhook notification (version 4) for the alert Prometheus holds."""
    alert_labels = {k: v for k, v in labels.items() if k not in ("__name__", "alertstate")}
    now = datetime.now(UTC).isoformat()
    payload = {"version": "4", "status": "firing", "receiver": "model-reviews", "groupKey": "{}:{}",
               "alerts": [{"status": "firing", "labels": alert_labels, "annotations": {}, "startsAt": now}]}
    resp = httpx.post(f"http://127.0.0.1:{port}/api/v1/alertmanager", json=payload,
                      headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert resp.status_code == 200, resp.text


def _targets(stack: FleetStack, exporter_port: int, services: dict[str, int]) -> list[ScrapeTarget]:
    targets = stack.targets()
    out = [ScrapeTarget("triton", address, labels) for address, labels in targets.triton]
    out += [ScrapeTarget("dcgm-exporter", address, labels) for address, labels in targets.dcgm]
    out += [ScrapeTarget("kube-state-metrics", address, labels) for address, labels in targets.kube_state_metrics]
    out.append(ScrapeTarget("tidescale-exporter", f"127.0.0.1:{exporter_port}"))
    out += [ScrapeTarget(job, f"127.0.0.1:{port}") for job, port in services.items()]
    return out


def _upload_profile(port: int) -> None:
    path = FIXTURES / "profiles" / "tensorflow" / "ctr_string_ops.trace_viewer.json.gz"
    resp = httpx.post(f"http://127.0.0.1:{port}/v1/profiles", params={
        "model": "ctr_ranker", "version": "1", "filename": path.name.removesuffix(".gz")},
        content=gzip.decompress(path.read_bytes()), headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert resp.status_code == 200, resp.text


@pytest.fixture(scope="module")
def collected(prometheus_url: str) -> dict[str, list[preview.PanelData]]:
    return preview.collect(prometheus_url, window_s=180, rate_interval="30s")


def test_every_panel_query_returns_data(collected: dict[str, list[preview.PanelData]]) -> None:
    empty, stale = [], []
    for uid, panels in collected.items():
        for panel in panels:
            whole_panel_excused = (uid, panel.title) in NOT_IN_THIS_STACK
            for i, result in enumerate(panel.results):
                excused = whole_panel_excused or (uid, panel.title, i) in QUERIES_NOT_IN_THIS_STACK
                if not result.series and not excused:
                    empty.append(f"{uid} / {panel.title} [{i}]: {result.error or 'no data'}: {result.expr[:160]}")
                elif result.series and excused:
                    stale.append(f"{uid} / {panel.title} [{i}] has data now: drop it from the exclusions")
    assert not empty, "panels without data:\n" + "\n".join(empty)
    assert not stale, "\n".join(stale)


def test_firing_alert_xid_and_review_are_visible(collected: dict[str, list[preview.PanelData]]) -> None:
    fleet = {p.title: p for p in collected["tidescale-fleet"]}
    alerts = {s.labels.get("alertname") for s in fleet["Firing alerts"].results[0].series}
    assert "GPUXidErrors" in alerts
    [reviews] = fleet["Open model reviews"].results[0].series
    assert reviews.values[-1] == 1
    gpu = {p.title: p for p in collected["tidescale-gpu"]}
    assert any(s.values and s.values[-1] == 79 for s in gpu["XID errors"].results[0].series)
    # GPU series are per serving pod (dcgm pod mapping joined to the Triton pods).
    pods = {s.labels.get("pod") for s in gpu["GPU utilisation"].results[0].series}
    assert pods and all(p and p.startswith(DEPLOYMENT) for p in pods)


def test_previews_render_one_png_per_dashboard(prometheus_url: str, tmp_path: Path) -> None:
    # TIDESCALE_PREVIEW_DIR keeps the PNGs (docs/dashboards/ holds a committed set).
    out = Path(os.environ.get("TIDESCALE_PREVIEW_DIR") or tmp_path)
    paths = preview.render_previews(prometheus_url, out, window_s=180)
    assert sorted(p.name for p in paths) == sorted(f"{uid}.png" for uid in preview_uids())
    for path in paths:
        assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 20_000


def recorded_series_read_by_panels() -> list[str]:
    from tidescale.contracts import recorded
    from tidescale.contracts.promql import metric_names
    from tidescale.dashboards.lint import targets
    from tidescale.dashboards.registry import build_all

    read = {name for board in build_all().values() for _, expr in targets(board) for name in metric_names(expr)}
    per_deployment = {recorded.TARGET_P99, recorded.DEPLOYMENT_SLO_LATENCY_THRESHOLD}  # PER_DEPLOYMENT_LATENCY
    return sorted(read & set(recorded.all_names()) - per_deployment)


def preview_uids() -> list[str]:
    from tidescale.dashboards.registry import build_all

    return list(build_all())
