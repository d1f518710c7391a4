"""End to end: real Triton (local fleet, simulated GPUs) → exporter → real Prometheus evaluating the
generated rules → real Alertmanager → the review service. A profile with a 30 % string-op share for one
model version must open exactly one review for it, with the exporter's report attached."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.unit.alerts.reviews_helpers import TOKEN as REVIEWS_TOKEN
from tests.waiting import wait_for
from tidescale.alerts.config import AlertsConfig
from tidescale.alerts.generate import rendered
from tidescale.contracts import recorded as names
from tidescale.devstack.demo.faults import string_heavy_trace_viewer
from tidescale.devstack.demo.summary import demo_summary
from tidescale.devstack.exporter import spawn_exporter
from tidescale.devstack.fleet.loadgen import LoadGenerator
from tidescale.devstack.fleet.running import running_stack
from tidescale.devstack.fleet.stack import FleetStack
from tidescale.devstack.ports import LOOPBACK, free_port
from tidescale.devstack.procs import ManagedProcess
from tidescale.devstack.promstack import AlertmanagerServer, PrometheusServer, ScrapeTarget
from tidescale.sim.traffic import scenario

pytestmark = pytest.mark.integration
EXPORTER_TOKEN = "e2e-exporter-token"
MODEL, VERSION = "ctr_ranker", "1"
T = TypeVar("T")


def start(name: str, argv: list[str], work: Path, env: dict[str, str], ready: str) -> ManagedProcess:
    proc = ManagedProcess(name, [sys.executable, "-m", "tidescale.cli", *argv], work / f"{name}.log",
                          env={**os.environ, **env}).start()
    try:
        proc.wait_http(ready, timeout=60)
    except BaseException:
        proc.stop()
        raise
    return proc


def fast_config(work: Path, reviews_url: str) -> AlertsConfig:
    """Production rules with short `for:`/intervals so the pipeline settles in well under a minute."""
    token_file = work / "reviews-token"
    token_file.write_text(REVIEWS_TOKEN)
    token_file.chmod(0o600)
    dead = f"http://{LOOPBACK}:9/alerts"  # pager and tickets go nowhere in this test
    return AlertsConfig.model_validate({
        "evaluation_interval": "1s",
        "for": {"model_review": "5s"},
        "alertmanager": {
            "reviews_url": f"{reviews_url}/api/v1/alertmanager", "reviews_token_file": str(token_file),
            "pager_url": dead, "tickets_url": dead,
            "group_wait": "1s", "group_interval": "2s", "repeat_interval": "1h",
        },
    })


def scrape_targets(stack: FleetStack, exporter_port: int) -> list[ScrapeTarget]:
    found = stack.targets()
    jobs = {"triton": found.triton, "dcgm-exporter": found.dcgm, "kube-state-metrics": found.kube_state_metrics}
    return [ScrapeTarget(job, address, labels) for job, items in jobs.items() for address, labels in items] + [
        ScrapeTarget("tidescale-exporter", f"{LOOPBACK}:{exporter_port}")]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("alerts-e2e")
    reviews_port, exporter_port = free_port(), free_port()
    reviews_url, exporter_url = f"http://{LOOPBACK}:{reviews_port}", f"http://{LOOPBACK}:{exporter_port}"
    procs: list[Any] = []
    try:
        with running_stack(work / "fleet", replicas=1, gpus_per_node=1) as stack:
            procs.append(spawn_exporter(work, token=EXPORTER_TOKEN, port=exporter_port,
                               env={"TIDESCALE_EXPORTER_POLL_INTERVAL_S": "1"},
                               args=[arg for url in stack.fleet.ready_urls() for arg in ("--triton", url)])[0])
            procs.append(start("reviews", [
                "reviews", "serve", "--port", str(reviews_port), "--database", f"sqlite:///{work / 'reviews.db'}",
                "--exporter-url", exporter_url], work, {"TIDESCALE_REVIEWS_TOKEN": REVIEWS_TOKEN},
                f"{reviews_url}/healthz"))
            files = rendered(fast_config(work, reviews_url))
            for name, content in files.items():
                (work / name).write_text(content)
            am = AlertmanagerServer(work / "am", work / "alertmanager.yaml").start()
            procs.append(am)
            prom = PrometheusServer(work / "prom", scrape_targets(stack, exporter_port),
                                    rule_files=[work / "tidescale-recording.yaml", work / "tidescale-alerts.yaml"],
                                    alertmanager_url=am.url).start()
            procs.append(prom)
            resp = httpx.post(f"{exporter_url}/v1/profiles", params={
                "model": MODEL, "version": VERSION, "filename": "string_heavy.trace_viewer.json"},
                content=string_heavy_trace_viewer(0.3), headers={"Authorization": f"Bearer {EXPORTER_TOKEN}"},
                timeout=30)
            assert resp.status_code == 200, resp.text
            load = LoadGenerator(scenario("steady", 20.0, 600.0), stack.fleet.ready_urls,
                                 ["resnet50", MODEL], seed=3).start()
            procs.append(load)
            yield {"prom": prom, "am": am, "reviews": reviews_url, "exporter": exporter_url, "stack": stack}
    finally:
        for proc in reversed(procs):
            proc.stop()


def reviews(url: str) -> list[dict[str, Any]]:
    return list(httpx.get(f"{url}/api/v1/reviews", timeout=10).json()["items"])


def test_string_heavy_profile_opens_exactly_one_review(pipeline: dict[str, Any]) -> None:
    prom: PrometheusServer = pipeline["prom"]
    share = prom.wait_for(
        f'namespace_model_version_op_class:tidescale_op_time_share:max{{model="{MODEL}", op_class="string"}}',
        timeout=60)
    assert abs(float(share[0]["value"][1]) - 0.3) < 0.01
    items = wait_for(lambda: reviews(pipeline["reviews"]), 90, "a review")
    time.sleep(5)  # further group notifications and re-sends must not add reviews
    items = reviews(pipeline["reviews"])
    assert [(r["model"], r["version"], r["reason"], r["state"]) for r in items] == [
        (MODEL, VERSION, "op_share_string", "open")]
    review = httpx.get(f"{pipeline['reviews']}/api/v1/reviews/{items[0]['id']}", timeout=10).json()
    assert review["labels"]["alertname"] == "TritonModelReviewRequired"
    assert abs(review["value"] - 0.3) < 0.01
    assert abs(review["profile"]["op_class_share"]["string"] - 0.3) < 0.01, review["profile_error"]
    am_alerts = pipeline["am"].alerts()
    assert any(a["labels"]["alertname"] == "TritonModelReviewRequired" and a["labels"]["model"] == MODEL
               for a in am_alerts)
    metrics = httpx.get(f"{pipeline['reviews']}/metrics", timeout=10).text
    assert 'tidescale_model_reviews{state="open"} 1.0' in metrics


@pytest.mark.parametrize(
    ("record", "labels"),
    [
        (f'{names.STAGE_AVG_SECONDS_RATE5M}{{stage="compute_infer"}}', {"namespace", "model", "stage"}),
        (names.ERROR_RATIO_RATE5M, {"namespace", "model"}),
        (names.INFERENCES_PER_EXEC_RATE5M, {"namespace", "model"}),
        (names.QUEUE_TO_COMPUTE_RATIO_RATE5M, {"namespace", "model"}),
        (names.DEPLOYMENT_QUEUE_DEPTH_PER_REPLICA, {"namespace", "deployment"}),
        (names.DEPLOYMENT_INFLIGHT_PER_REPLICA, {"namespace", "deployment"}),
        (names.POD_GPU_UTILIZATION, {"namespace", "pod"}),
        (names.MODEL_GPU_FB_USED_BYTES, {"namespace", "model"}),
        (names.MODEL_GPU_POWER_WATTS, {"namespace", "model"}),
    ],
)
def test_recording_rules_have_data_from_the_fleet(pipeline: dict[str, Any], record: str, labels: set[str]) -> None:
    """The joins hold on the fleet's real labels: Triton pods, simulated dcgm-exporter, Deployment names."""
    stack: FleetStack = pipeline["stack"]
    result = pipeline["prom"].wait_for(record, timeout=60)
    for series in result:
        assert labels <= set(series["metric"]), series
        assert series["metric"].get("deployment", stack.fleet.deployment) == stack.fleet.deployment
        assert series["metric"].get("pod", stack.fleet.replicas[0].pod) in {r.pod for r in stack.fleet.replicas}


def test_demo_summary_counts_alerts_and_reviews(pipeline: dict[str, Any]) -> None:
    wait_for(lambda: reviews(pipeline["reviews"]), 90, "a review")
    summary = demo_summary(pipeline["am"].url, pipeline["reviews"])
    assert summary["alerts_fired"].get("TritonModelReviewRequired") == 1
    assert "Watchdog" not in summary["alerts_fired"]
    assert [(r["model"], r["reason"]) for r in summary["reviews_opened"]] == [(MODEL, "op_share_string")]
