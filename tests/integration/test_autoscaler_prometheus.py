"""The recommender against a real Prometheus: it recommends from scraped Triton counters (queue
timeouts count as demand, model errors do not), and when Prometheus stops mid-run the
recommendation holds and the fail-safe metric says why."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tidescale.autoscaler.app import make_app
from tidescale.autoscaler.service import RecommenderService
from tidescale.autoscaler.settings import RecommenderSettings, RecommenderTuning, TargetSettings
from tidescale.devstack.ports import LOOPBACK
from tidescale.devstack.promstack import PrometheusServer, ScrapeTarget

pytestmark = pytest.mark.integration
RATE = 405.0  # requests/s the fake Triton reports completing
# and rejecting by queue timeout: demand too, so ceil((405 + 90) / 90) == 6; 495 req/s sits 10 % from both
# edges (450 and 540), far beyond what scrape-time jitter moves a 10 s rate (the CI run of 2026-12-01 read
# 7 with 430 + 90, 4 % under the upper edge)
REJECTED = 90.0
BACKEND_ERRORS = 200.0  # failures of the model itself are not demand the fleet failed to serve


class FakeTriton(BaseHTTPRequestHandler):
    """Triton's always-on counters (success, failures by reason since 24.08) and an empty queue."""

    started = time.time()

    def do_GET(self) -> None:
        elapsed = time.time() - self.started
        body = (
            "# TYPE nv_inference_request_success counter\n"
            f'nv_inference_request_success{{model="resnet",version="1"}} {RATE * elapsed:.1f}\n'
            "# TYPE nv_inference_request_failure counter\n"
            f'nv_inference_request_failure{{model="resnet",reason="REJECTED",version="1"}} {REJECTED * elapsed:.1f}\n'
            f'nv_inference_request_failure{{model="resnet",reason="BACKEND",version="1"}} '
            f"{BACKEND_ERRORS * elapsed:.1f}\n"
            "# TYPE nv_inference_pending_request_count gauge\n"
            'nv_inference_pending_request_count{model="resnet",version="1"} 0\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


POD, CANARY_POD = "triton-7d9f8c6b5-x2x4q", "triton-canary-6c9d4f7b8-k2j7w"  # as a ReplicaSet names them


@pytest.fixture(scope="module")
def triton_metrics() -> Iterator[str]:
    server = ThreadingHTTPServer((LOOPBACK, 0), FakeTriton)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"{LOOPBACK}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


MAX_START_SECOND = 25  # Prometheus up and scraping 35 s before the next whole minute, even on a loaded CI


def sleep_until_second_of_minute(latest: int) -> None:
    """Wait, if need be, for the next minute's start, so that now is at most *latest* s into a minute."""
    second = time.time() % 60
    if second > latest:
        time.sleep(60 - second + 0.5)


def recommender_of(prom: PrometheusServer) -> RecommenderService:
    """The service for the fake Triton's model on 3 replicas, reading *prom* over 10 s / 5 s windows."""
    settings = RecommenderSettings(
        prometheus_url=prom.url, capacity_rps=100.0, query_timeout_s=2.0,
        tuning=RecommenderTuning(rate_window_s=10, fast_window_s=5),
        targets=[TargetSettings(deployment="triton", namespace="ml", model="resnet", max_replicas=20)])
    return RecommenderService(settings, replicas_fn=lambda _t: (3, 3))


def test_prometheus_stops_mid_run_recommendation_holds(tmp_path: Path, triton_metrics: str) -> None:
    # A canary Deployment serves the same model in the same namespace: its pod's requests are not the
    # target's demand (read together, the answer would double).
    prom = PrometheusServer(tmp_path, [ScrapeTarget("triton", triton_metrics, {"namespace": "ml", "pod": POD}),
                                       ScrapeTarget("triton", triton_metrics, {"namespace": "ml", "pod": CANARY_POD})])
    prom.start()
    try:
        prom.wait_for_targets_up()
        prom.wait_for(f'sum(rate(nv_inference_request_success{{namespace="ml"}}[10s])) > {1.9 * RATE}', timeout=40)
        # the 10 s window full of 1 s scrapes: a rate over its first two or three samples swings by more
        prom.wait_for(f'count_over_time(nv_inference_request_success{{pod="{POD}"}}[10s]) >= 9', timeout=40)
        service = recommender_of(prom)
        client = TestClient(make_app(service))
        (state,) = service.evaluate().values()
        assert state.failsafe is None, state.detail
        assert state.published == 6  # ceil((405 + 90) / (100 * 0.9))
        assert 'tidescale_desired_replicas{deployment="triton",namespace="ml"} 6.0' in client.get("/metrics").text
    finally:
        prom.stop()
    (state,) = service.evaluate().values()
    assert state.published == 6
    assert state.failsafe == "prometheus_down"
    body = client.get("/metrics").text
    assert 'tidescale_desired_replicas{deployment="triton",namespace="ml"} 6.0' in body
    assert 'tidescale_recommender_failsafe{deployment="triton",namespace="ml",reason="prometheus_down"} 1.0' in body
    assert client.get("/healthz").json()["failsafe"] == {"ml/triton": "prometheus_down"}


def test_the_fast_path_finds_the_pod_prometheus_scrapes_and_reads_its_counters(tmp_path: Path,
                                                                                 triton_metrics: str) -> None:
    prom = PrometheusServer(tmp_path, [ScrapeTarget("triton", triton_metrics, {"namespace": "ml", "pod": POD})])
    prom.start()
    try:
        prom.wait_for_targets_up()
        service = recommender_of(prom)
        prom.wait_for(f'sum(rate(nv_inference_request_success{{namespace="ml"}}[10s])) > {0.9 * RATE}', timeout=40)
        (state,) = service.evaluate().values()
        assert state.pods == {POD: triton_metrics}  # the `pod` and `instance` labels of the scraped series
        service.evaluate_fast()
        time.sleep(1.5)
        service.evaluate_fast()
        reading = state.fast_reading
        assert reading is not None and reading.pods == 1 and reading.missing == ()
        # completions + queue-policy rejections, read from the pod itself (model errors are not demand)
        assert reading.arrival_rps == pytest.approx(RATE + REJECTED, rel=0.05)
        body = TestClient(make_app(service)).get("/metrics").text
        assert 'tidescale_recommender_fast_path_pods{deployment="triton",namespace="ml",state="answered"} 1.0' in body
    finally:
        prom.stop()
        service.close()


def test_prometheus_evaluates_the_seasonal_forecasts_reads(tmp_path: Path, triton_metrics: str) -> None:
    """The forecast's subqueries are PromQL a real Prometheus runs: a day and a week back it holds
    nothing yet (no forecast, no error), and the demand level now is completions + queue-policy
    rejections (model errors are not demand) at the subquery's minute steps."""
    # rate() divides by its whole window: at a minute step that falls in the series' first 10 s, the
    # rate covers a few scrapes and reads low, and the median over [low, full] stays under the bar
    # until a third step (the CI run of 2026-12-04 timed out so). Started early in a minute, the first
    # step with a value is the next minute's, over a full window.
    sleep_until_second_of_minute(MAX_START_SECOND)
    prom = PrometheusServer(tmp_path, [ScrapeTarget("triton", triton_metrics, {"namespace": "ml", "pod": POD})])
    prom.start()
    try:
        prom.wait_for_targets_up()
        service = recommender_of(prom)
        (state,) = service.states.values()
        assert state.queries.demand_level is not None and len(state.queries.seasons) == 2
        for season in state.queries.seasons:
            assert service.client.instant(season.peak) == [] and service.client.instant(season.level) == []
        # The level's steps fall on whole minutes: the first one over a full rate window has a value.
        prom.wait_for(f"({state.queries.demand_level}) > {0.95 * (RATE + REJECTED)}", timeout=90)
        [(_, level)] = service.client.instant(state.queries.demand_level)
        assert level == pytest.approx(RATE + REJECTED, rel=0.05)
        (state,) = service.evaluate().values()
        assert state.failsafe is None, state.detail
    finally:
        prom.stop()
        service.close()
