"""The recommender service: queries, export, and the fail-safe (hold, never scale down on bad data)."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.clocks import ManualClock
from tests.kube_events import FakeEventApi
from tidescale.autoscaler import events as events_module
from tidescale.autoscaler.app import RecommenderCollector, answer_for, make_app
from tidescale.autoscaler.events import event_twin_window_s
from tidescale.autoscaler.fastpath import PodCounters
from tidescale.autoscaler.manifests import DESIRED_FIELD
from tidescale.autoscaler.queries import TargetQueries, peak_read_late_s
from tidescale.autoscaler.service import RecommenderService
from tidescale.autoscaler.settings import ForecastSettings, RecommenderSettings, RecommenderTuning, TargetSettings
from tidescale.contracts.errors import UsageError
from tidescale.contracts.prometheus import PrometheusClient, PrometheusUnavailable
from tidescale.contracts.settings import load_settings


class FakeProm:
    """Answers by query shape; `down` makes every query fail like a dead Prometheus."""

    def __init__(self) -> None:
        self.values: dict[str, float | None] = {"horizontalpodautoscaler_status_current": None,
                                                "horizontalpodautoscaler_status_desired": None,
                                                "kube_pod_status_ready_time": None,
                                                "tidescale_request_duration_seconds:p99": None,
                                                "nv_inference_request_failure": None,
                                                "tidescale_request_duration_seconds_bucket": None,  # slow share
                                                "rate(": 450.0,  # first match
                                                "version) (nv_inference_pending": 0.0, "sum by (pod)": 0.0,
                                                "time()": 5.0,
                                                "spec_replicas": 5.0, "replicas_ready": 5.0,
                                                "nv_model_load_duration_secs": None,
                                                "kube_pod_status_unschedulable": None,
                                                "kube_pod_container_status_waiting_reason": None}
        self.down = False
        self.queries: list[str] = []
        self.pods: dict[str, str] = {}  # what the fast path's discovery finds: pod -> instance
        self.pod_times: dict[str, tuple[float, float | None]] = {}  # pod -> (start, Ready) (kube-state-metrics)

    def query(self, expr: str) -> list[dict[str, object]]:
        self.queries.append(expr)
        if self.down:
            raise PrometheusUnavailable("connection refused")
        for name, index in (("kube_pod_start_time", 0), ("kube_pod_status_ready_time", 1)):
            if expr.startswith(f"max by (namespace, pod) ({name}{{"):
                return [{"metric": {"namespace": "ml", "pod": pod}, "value": [0.0, str(times[index])]}
                        for pod, times in self.pod_times.items() if times[index] is not None]
        assert expr.startswith("group by (pod, instance)"), expr
        return [{"metric": {"pod": pod, "instance": address}, "value": [0.0, "1"]}
                for pod, address in self.pods.items()]

    def instant(self, expr: str) -> list[tuple[float, float]]:
        self.queries.append(expr)
        if self.down:
            raise PrometheusUnavailable("connection refused")
        for key, value in self.values.items():
            if key in expr:
                return [] if value is None else [(0.0, value)]
        raise AssertionError(f"unexpected query {expr}")

    def close(self) -> None:
        pass


def make(**kw: object) -> tuple[RecommenderService, FakeProm]:
    target = TargetSettings(deployment="triton", namespace="ml", model='re"snet', min_replicas=1, max_replicas=50)
    settings = RecommenderSettings(targets=[target], capacity_rps=100.0, **kw)  # type: ignore[arg-type]
    fake = FakeProm()
    return RecommenderService(settings, fake), fake  # type: ignore[arg-type]


def exported(svc: RecommenderService) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RecommenderCollector(svc))
    out = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def desired(svc: RecommenderService) -> float:
    return exported(svc)[("tidescale_desired_replicas", (("deployment", "triton"), ("namespace", "ml")))]


def failsafe(svc: RecommenderService) -> dict[str, float]:
    return {dict(k[1])["reason"]: v for k, v in exported(svc).items() if k[0] == "tidescale_recommender_failsafe"}


def test_queries_escape_labels_and_sum_before_dividing() -> None:
    q = TargetQueries.for_target(TargetSettings(deployment="d", namespace="n", model='a"b\\c'))
    assert 'model="a\\"b\\\\c"' in q.completions
    # Each Triton series once per pod and label set (a second scrape job adds a copy), then summed.
    once = "sum(max by (namespace, pod, model, version, gpu_uuid) (rate("
    assert q.completions.startswith(once)
    assert q.rejections.startswith(once.replace("gpu_uuid", "reason, gpu_uuid") + "nv_inference_request_failure{")
    assert 'reason="REJECTED"' in q.rejections


def test_queries_read_only_the_target_deployments_pods() -> None:
    """Two Deployments serving one model (a canary, another GPU pool) are sized apart: the Triton
    series are those of `<deployment>-<hash>-<suffix>` pods (a `.` in the name is literal), and the
    P99 is the model's on the Deployment's own pods, else the model's across Deployments."""
    q = TargetQueries.for_target(TargetSettings(deployment="triton.a100", namespace="ml", model="resnet"))
    pods = 'pod=~"triton\\\\.a100-[a-z0-9]+-[a-z0-9]+"'
    for expr in (q.completions, q.fast_completions, q.rejections, q.queue, q.max_pod_queue, q.queue_age,
                 q.model_load, q.pending):
        assert pods in expr and 'model="resnet"' in expr, expr
    own, fallback = q.p99.split(" or ")
    assert own == ('max(namespace_deployment_model:tidescale_request_duration_seconds:p99'
                   '{namespace="ml",deployment="triton.a100",model="resnet"})')  # the recorded series
    assert fallback == ('max(namespace_model:tidescale_request_duration_seconds:p99'
                        '{namespace="ml",model="resnet",stage="request"})')


@pytest.mark.parametrize(("slo_s", "le"), [(0.5, '"0.5"'), (1.0, '"1.0"'), (0.15, '"0.15"')])
def test_the_slow_share_reads_the_slo_s_bucket_of_the_target_s_own_spans(slo_s: float, le: str) -> None:
    """The share of the last minute's requests beyond the SLO: the traces' histogram (whose buckets
    hold the SLO as an exact boundary, `le` as prometheus_client writes it), the Deployment's spans."""
    q = TargetQueries.for_target(TargetSettings(deployment="triton", namespace="ml", model="resnet"), slo_s=slo_s)
    labels = 'namespace="ml",deployment="triton",model="resnet",stage="request"'
    assert q.slow_share == (f"1 - sum(rate(tidescale_request_duration_seconds_bucket{{{labels},le={le}}}[60s]))"
                            f" / sum(rate(tidescale_request_duration_seconds_count{{{labels}}}[60s]))")


def test_series_matchers_scope_every_selector_to_one_cluster() -> None:
    """A Prometheus API holding several clusters: every selector of every query carries the matcher
    (escaped), so another cluster's Deployment of the same name is not read as demand."""
    q = TargetQueries.for_target(TargetSettings(deployment="triton", namespace="ml", model="resnet"), None,
                                 {"cluster": 'eu"1'}, forecast=ForecastSettings())
    assert q.seasons
    for expr in q.expressions().values():
        assert expr.count("{") == expr.count('cluster="eu\\"1"') > 0, expr
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet")
    for bad, message in [({"namespace": "x"}, "set themselves"), ({"1cluster": "x"}, "not a Prometheus label"),
                         ({"cluster": ""}, "1..256")]:
        with pytest.raises(ValueError, match=message):
            RecommenderSettings(targets=[target], capacity_rps=100.0, series_matchers=bad)
    svc, fake = make(series_matchers={"cluster": "eu-1"})
    svc.evaluate(1000.0)
    assert fake.queries and all('cluster="eu-1"' in expr for expr in fake.queries)


def test_queue_policy_rejections_count_as_demand() -> None:
    """Requests Triton's queue timeout rejected never complete: without them a shedding fleet would
    look exactly as loaded as it can serve, and never grow."""
    svc, fake = make()
    fake.values["nv_inference_request_failure"] = 90.0
    svc.evaluate(1000.0)
    assert desired(svc) == 6  # ceil((450 + 90) / 90)


def test_headroom_provisions_for_a_multiple_of_the_load() -> None:
    svc, _ = make(headroom=2.0)
    svc.evaluate(1000.0)
    assert desired(svc) == 10  # ceil(2 x 450 / 90)
    with pytest.raises(ValueError, match="headroom"):
        make(headroom=0.5)


def test_evaluates_and_exports() -> None:
    svc, _ = make()
    svc.evaluate(1000.0)
    assert desired(svc) == 5  # ceil(450 / 90)
    assert set(failsafe(svc).values()) == {0.0}
    metrics = exported(svc)
    assert metrics[("tidescale_recommender_capacity_rps", (("deployment", "triton"), ("namespace", "ml")))] == 100
    assert metrics[("tidescale_recommender_last_success_timestamp_seconds",
                    (("deployment", "triton"), ("namespace", "ml")))] == 1000.0


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda f: setattr(f, "down", True), "prometheus_down"),
    (lambda f: f.values.update({"rate(": None}), "missing"),
    (lambda f: f.values.update({"rate(": float("nan")}), "nan"),
    (lambda f: f.values.update({"time()": 600.0}), "stale"),
])
def test_fail_safe_holds_the_last_good_value(mutate, reason: str) -> None:  # type: ignore[no-untyped-def]
    svc, fake = make()
    fake.values["rate("] = 1800.0
    svc.evaluate(0.0)
    assert desired(svc) == 20
    fake.values["rate("] = 10.0  # the load fell... and then the data went bad
    mutate(fake)
    for t in range(15, 1000, 15):
        svc.evaluate(float(t))
    assert desired(svc) == 20  # held: never a scale-down on missing data
    assert failsafe(svc)[reason] == 1.0
    assert sum(failsafe(svc).values()) == 1.0
    last = exported(svc)[("tidescale_recommender_last_success_timestamp_seconds",
                          (("deployment", "triton"), ("namespace", "ml")))]
    assert last == 0.0


def test_recovers_after_failsafe() -> None:
    svc, fake = make()
    svc.evaluate(0.0)
    fake.down = True
    svc.evaluate(15.0)
    assert failsafe(svc)["prometheus_down"] == 1.0
    fake.down = False
    svc.evaluate(30.0)
    assert sum(failsafe(svc).values()) == 0.0


def test_no_desired_series_before_the_first_success() -> None:
    svc, fake = make()
    fake.down = True
    svc.evaluate(0.0)
    assert not [k for k in exported(svc) if k[0] == "tidescale_desired_replicas"]


def test_tolerance_rounding_for_legacy_clusters() -> None:
    svc, fake = make(hpa_tolerance_rounding=True)
    fake.values.update({"spec_replicas": 10.0, "replicas_ready": 10.0, "rate(": 950.0})  # needs 11
    svc.evaluate(0.0)
    assert desired(svc) == 12


def test_http_endpoints() -> None:
    svc, fake = make()
    svc.evaluate(0.0)
    client = TestClient(make_app(svc))
    body = client.get("/metrics").text
    assert 'tidescale_desired_replicas{deployment="triton",namespace="ml"} 5.0' in body
    assert client.get("/healthz").json() == {"status": "ok", "targets": 1, "failsafe": {}}
    fake.down = True
    svc.evaluate(15.0)
    assert client.get("/healthz").json()["failsafe"] == {"ml/triton": "prometheus_down"}


def test_the_answer_keda_reads_is_the_exported_one_held_through_an_outage_and_absent_before_the_first() -> None:
    """`/v1/desired/NS/DEPLOYMENT` (KEDA's metrics-api trigger): the value `/metrics` exports, 503
    before the first good evaluation (KEDA: an error, the HPA holds), the held value in fail-safe."""
    svc, fake = make()
    client = TestClient(make_app(svc), raise_server_exceptions=False)
    fake.down = True
    svc.evaluate(0.0)
    early = client.get("/v1/desired/ml/triton")
    assert early.status_code == 503 and "no recommendation for ml/triton yet" in early.json()["detail"]
    fake.down = False
    svc.evaluate(15.0)
    answer = client.get("/v1/desired/ml/triton").json()
    assert answer[DESIRED_FIELD] == desired(svc) == 5 and answer["failsafe"] is None  # what KEDA reads
    assert answer["last_success"] is not None
    fake.down = True
    svc.evaluate(30.0)
    held = client.get("/v1/desired/ml/triton").json()
    assert held[DESIRED_FIELD] == 5 and held["failsafe"] == "prometheus_down"
    assert held["decision"] == "hold_missing_data"


@pytest.mark.parametrize(("path", "status", "says"), [
    ("/v1/desired/ml/other", 404, "ml/other is not one of this recommender's targets"),
    ("/v1/desired/ML/triton", 422, "namespace"),
    ("/v1/desired/ml/" + "a" * 300, 422, "deployment"),
    ("/v1/desired/ml", 404, "Not Found"),
])
def test_the_answer_for_an_unknown_or_malformed_target_says_what_is_wrong(path: str, status: int, says: str) -> None:
    svc, _ = make()
    svc.evaluate(0.0)
    response = TestClient(make_app(svc), raise_server_exceptions=False).get(path)
    assert response.status_code == status and says in response.text


def test_settings_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("recommender:\n  targets:\n  - {deployment: a, namespace: b, model: m, min_replicas: 5, "
                   "max_replicas: 2}\n")
    with pytest.raises(UsageError, match="must not exceed"):
        load_settings(RecommenderSettings, cfg)
    with pytest.raises(UsageError, match="at least one target"):
        RecommenderService(RecommenderSettings(capacity_rps=1.0), FakeProm())  # type: ignore[arg-type]
    t = TargetSettings(deployment="a", namespace="b", model="m")
    with pytest.raises(UsageError, match="capacity_rps or a profile"):
        RecommenderService(RecommenderSettings(targets=[t]), FakeProm())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="listed twice"):
        RecommenderService(RecommenderSettings(targets=[t, t], capacity_rps=1.0), FakeProm())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="zero"):
        prof = tmp_path / "p.csv"
        prof.write_text("Concurrency,Inferences/Second,p99 latency\n1,0,10\n")
        RecommenderService(RecommenderSettings(targets=[t], profile=prof), FakeProm())  # type: ignore[arg-type]


def test_a_profile_measured_on_several_replicas_sizes_each_for_its_share(tmp_path: Path) -> None:
    prof = tmp_path / "p.csv"
    prof.write_text("Concurrency,Inferences/Second,p99 latency\n8,1200,90000\n16,1500,900000\n")
    t = TargetSettings(deployment="a", namespace="b", model="m")
    assert RecommenderSettings(targets=[t], profile=prof).capacity_for(t) == pytest.approx(1200.0)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"recommender:\n  profile: {prof}\n  profile_replicas: 4\n  targets:\n"
                   "  - {deployment: a, namespace: b, model: m}\n")
    assert load_settings(RecommenderSettings, cfg).capacity_for(t) == pytest.approx(300.0)
    cfg.write_text(f"recommender:\n  profile: {prof}\n  profile_replicas: 0\n")
    with pytest.raises(UsageError, match="profile_replicas"):
        load_settings(RecommenderSettings, cfg)


def client_answering(status: int, content: bytes) -> PrometheusClient:
    transport = httpx.MockTransport(lambda _req: httpx.Response(status, content=content))
    return PrometheusClient("http://prom", transport=transport)


def test_prom_client_reads_vectors() -> None:
    body = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[12.5,"3.5"]}]}}'
    assert client_answering(200, body).instant("up") == [(12.5, 3.5)]


@pytest.mark.parametrize(("status", "content"), [
    (503, b"unavailable"),
    (400, b'{"status":"error","error":"parse error"}'),
    (200, b'{"status":"success","data":{"result":[{}]}}'),
    (200, b'{"status":"success","data":{"result":[{"value":[1,"x"]}]}}'),
    (200, b"[]"),
])
def test_prom_client_bad_answers_are_unavailable(status: int, content: bytes) -> None:
    with pytest.raises(PrometheusUnavailable):
        client_answering(status, content).instant("up")


@given(st.binary(max_size=300), st.sampled_from([200, 400, 500]))
@settings(max_examples=150, deadline=None)
def test_prom_client_fuzz(content: bytes, status: int) -> None:
    try:
        rows = client_answering(status, content).instant("up")
    except PrometheusUnavailable:
        return
    assert all(isinstance(t, float) and isinstance(v, float) for t, v in rows)


@given(st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
                    max_leaves=12))
@settings(max_examples=150, deadline=None)
def test_prom_client_fuzz_json_shapes(data: object) -> None:
    """Whatever the result's shape: a list of float pairs or PrometheusUnavailable, nothing else."""
    body = json.dumps({"status": "success", "data": {"result": data}}).encode()
    try:
        rows = client_answering(200, body).instant("up")
    except PrometheusUnavailable:
        return
    assert all(isinstance(t, float) and isinstance(v, float) for t, v in rows)


def test_the_cold_start_is_learned_from_tritons_model_load_time_and_exported() -> None:
    """Triton 24.11+ reports nv_model_load_duration_secs: cold start = that + the pod start overhead;
    without it, the configured value (and the source label says which)."""
    svc, fake = make(cold_start_s=60.0, pod_start_overhead_s=15.0)
    state = svc.states[("ml", "triton")]
    svc.evaluate(1000.0)
    key = ("tidescale_recommender_cold_start_seconds",
           (("deployment", "triton"), ("namespace", "ml"), ("source", "configured")))
    assert exported(svc)[key] == 60.0 and state.recommender.config.cold_start_s == 60.0
    fake.values["nv_model_load_duration_secs"] = 42.0
    svc.evaluate(1015.0)
    learned = ("tidescale_recommender_cold_start_seconds",
               (("deployment", "triton"), ("namespace", "ml"), ("source", "model_load")))
    assert exported(svc)[learned] == 57.0 and state.recommender.config.cold_start_s == 57.0
    assert any('nv_model_load_duration_secs{namespace="ml",pod=~"triton-[a-z0-9]+-[a-z0-9]+",model="re\\"snet"}' in q
               for q in fake.queries)
    # kube-state-metrics' start-to-Ready times of the pods, where they exist, are the cold start itself.
    fake.pod_times = {"triton-abc-1": (900.0, 938.5)}
    svc.evaluate(1030.0)
    measured = ("tidescale_recommender_cold_start_seconds",
                (("deployment", "triton"), ("namespace", "ml"), ("source", "pod_ready")))
    assert exported(svc)[measured] == 38.5 and state.recommender.config.cold_start_s == 38.5
    assert 'max by (namespace, pod) (kube_pod_status_ready_time{namespace="ml",pod=~"triton-[a-z0-9]+-[a-z0-9]+"})' \
        in fake.queries


def test_the_forecast_looks_ahead_by_the_cold_start_learned() -> None:
    """A model that loads in 5 minutes where the chart says 60 s: the forecast's reads a day ago cover
    the next 330 s once the cold start is learned (a replica asked 90 s before a known peak would
    serve it 3.5 minutes late). An explicit `forecast.ahead_s` stays as set."""
    svc, fake = make(cold_start_s=60.0, cold_start_max_s=900.0)
    state = svc.states[("ml", "triton")]
    margin, late = ForecastSettings().margin_s, peak_read_late_s(RecommenderTuning().rate_window_s)
    assert [s.peak_window_s for s in state.queries.seasons] == [60 + 30 + 2 * margin + late] * 2
    fake.pod_times = {"triton-abc-1": (900.0, 1200.0)}
    svc.evaluate(1300.0)
    assert state.recommender.config.cold_start_s == 300.0
    assert [s.peak_window_s for s in state.queries.seasons] == [300 + 30 + 2 * margin + late] * 2
    svc.evaluate(1315.0)
    assert any(state.queries.seasons[0].peak in q for q in fake.queries)  # the new reads are the ones asked
    pinned, fake = make(cold_start_s=60.0, cold_start_max_s=900.0, forecast=ForecastSettings(ahead_s=120.0))
    fake.pod_times = {"triton-abc-1": (900.0, 1200.0)}
    pinned.evaluate(1300.0)
    [st] = pinned.states.values()
    assert st.recommender.config.cold_start_s == 300.0
    assert [s.peak_window_s for s in st.queries.seasons] == [120 + 2 * margin + late] * 2


def decisions(svc: RecommenderService) -> dict[str, float]:
    return {dict(k[1])["reason"]: v for k, v in exported(svc).items() if k[0] == "tidescale_recommender_decision"}


def test_every_evaluation_exports_one_decision_and_a_change_posts_an_event_saying_why() -> None:
    events = FakeEventApi()
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake = FakeProm()
    svc = RecommenderService(RecommenderSettings(targets=[target], capacity_rps=100.0), fake,  # type: ignore[arg-type]
                             events=events)
    svc.evaluate(0.0)  # 450 req/s on 5 replicas: steady; the first answer is no change to announce
    assert decisions(svc)["hold_steady"] == 1.0 and sum(decisions(svc).values()) == 1.0
    assert events.posted == []
    fake.values["rate("] = 900.0
    svc.evaluate(15.0)
    up = desired(svc)
    assert up > 5  # the doubled rate, and its trend projected over the cold start
    [(namespace, body)] = events.posted
    assert namespace == "ml" and body["involvedObject"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                           "name": "triton", "namespace": "ml"}
    assert body["reason"] == "TidescaleRecommendation"
    assert body["message"].startswith(f"tidescale recommends {up:.0f} replicas (was 5): scale_up_")
    # The count beside the rate it was sized for: the jump's trend projected over the cold start.
    projected = svc.states[("ml", "triton")].recommender.last.projected_rps  # type: ignore[union-attr]
    assert projected > 900.0 and f"arrival 900.0 req/s (projected {projected:.1f} req/s ahead)" in body["message"]
    assert sum(decisions(svc).values()) == 1.0 and decisions(svc)[body["message"].split(": ")[1].split(";")[0]] == 1
    fake.down = True
    svc.evaluate(30.0)
    assert decisions(svc)["hold_missing_data"] == 1.0 and sum(decisions(svc).values()) == 1.0
    assert len(events.posted) == 1  # holding is no change


def test_a_peak_a_day_ago_scales_ahead_of_it_and_the_event_says_so() -> None:
    """The seasonal forecast through the service: Prometheus' history says the demand peaked at 900
    req/s within the lookahead a day ago (a week ago it holds nothing), at the level of today."""
    events = FakeEventApi()
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake = FakeProm()
    svc = RecommenderService(RecommenderSettings(targets=[target], capacity_rps=100.0), fake,  # type: ignore[arg-type]
                             events=events)
    svc.evaluate(0.0)
    assert desired(svc) == 5
    fake.values = {"kube_pod_container_status_waiting_reason": None, "offset 604": None,  # before max_over_time
                   "max_over_time(": 900.0, "quantile_over_time(": 450.0, **fake.values}
    svc.evaluate(15.0)
    assert desired(svc) == 10 and decisions(svc)["scale_up_forecast"] == 1.0
    [(_, body)] = events.posted
    assert "scale_up_forecast" in body["message"]
    assert "forecast 900.0 req/s (1d ago peaked at 900.0 req/s, x1.00 today's level)" in body["message"]
    off = RecommenderService(RecommenderSettings(targets=[target], capacity_rps=100.0,  # type: ignore[arg-type]
                                                 forecast={"enabled": False}), fake)  # type: ignore[arg-type]
    off.evaluate(15.0)
    forecast_reads = [q for q in fake.queries[-20:] if "over_time" in q and "waiting_reason" not in q]
    assert desired(off) == 5 and not forecast_reads  # (the crash loop's window is no forecast)


def test_the_event_names_the_cluster_whose_series_it_read() -> None:
    """Issue 46: behind a shared query layer the recommender reads one cluster's series; its Events say so."""
    events = FakeEventApi()
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake = FakeProm()
    svc = RecommenderService(RecommenderSettings(targets=[target], capacity_rps=100.0,  # type: ignore[arg-type]
                                                 series_matchers={"k8s_cluster": "west"}), fake, events=events)
    svc.evaluate(0.0)
    fake.values["rate("] = 900.0
    svc.evaluate(15.0)
    [(_, body)] = events.posted
    assert body["message"].endswith('; read from the series of k8s_cluster="west"')
    assert all('k8s_cluster="west"' in q for q in fake.queries if "{" in q)


def test_two_replicas_that_see_the_same_change_leave_one_event() -> None:
    """HA: both recommenders compute the same answer; the second one's post meets the first's Event."""
    events = FakeEventApi()
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fakes = [FakeProm(), FakeProm()]
    replicas = [RecommenderService(RecommenderSettings(targets=[target], capacity_rps=100.0, kube_events=True),
                                   fake, events=events) for fake in fakes]  # type: ignore[arg-type]
    for svc in replicas:
        svc.evaluate(0.0)
    for fake in fakes:
        fake.values["rate("] = 900.0
    for svc in replicas:
        svc.evaluate(15.0)
    assert desired(replicas[0]) == desired(replicas[1]) > 5
    [(_, body)] = events.posted
    assert body["metadata"]["name"].startswith("triton.tidescale-recommendation-")
    assert next(iter(events.events.values()))["count"] == 1


@pytest.mark.parametrize(("interval_s", "down_delay_s", "window_s"), [
    (2.0, 60.0, 60.0),   # the defaults: a minute
    (2.0, 20.0, 22.0),   # a quicker scale-down: a repeat can come after 20 s and a round
    (45.0, 120.0, 90.0),  # slow rounds: two of them, to cover the replicas' skew
    (2.0, 0.0, 2.0),     # no delay at all: one round
])
def test_the_event_twin_window_ends_before_a_real_repeat_can_come(
        interval_s: float, down_delay_s: float, window_s: float) -> None:
    assert event_twin_window_s(interval_s, down_delay_s) == window_s


def test_the_service_posts_with_the_twin_window_of_its_tuning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a 10 s scale-down delay the same change can come again 12 s later, a real repeat: the
    post must not take the minute-long window that would call it another replica's twin."""
    windows: list[float] = []
    monkeypatch.setattr(events_module, "post_event_once",
                        lambda api, body, now, twin_window_s: windows.append(twin_window_s) or "created")
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake = FakeProm()
    settings = RecommenderSettings(targets=[target], capacity_rps=100.0, interval_s=2.0,
                                   tuning=RecommenderTuning(down_delay_s=10.0))
    svc = RecommenderService(settings, fake, events=FakeEventApi())  # type: ignore[arg-type]
    svc.evaluate(0.0)
    fake.values["rate("] = 900.0
    svc.evaluate(15.0)
    assert windows == [12.0]


def test_a_failing_event_post_never_stops_the_recommendation() -> None:
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet")
    fake = FakeProm()
    svc = RecommenderService(RecommenderSettings(targets=[target], capacity_rps=100.0), fake,  # type: ignore[arg-type]
                             events=FakeEventApi(fail_with=OSError("connection refused")))
    svc.evaluate(0.0)
    fake.values["rate("] = 900.0
    svc.evaluate(15.0)
    assert desired(svc) > 5


# --- the fast path ---------------------------------------------------------------------------------

class FakeReader:
    """Pods' counters by name; a pod listed in `silent` does not answer."""

    def __init__(self) -> None:
        self.counters: dict[str, PodCounters] = {}
        self.silent: set[str] = set()
        self.rounds: list[dict[str, str]] = []

    def read(self, pods: dict[str, str], model: str) -> dict[str, PodCounters | None]:
        self.rounds.append(dict(pods))
        return {p: None if p in self.silent else self.counters[p] for p in pods}

    def served(self, rps_per_pod: float, t: float) -> None:
        self.counters = {p: PodCounters(rps_per_pod * t, 0.0, 0.0) for p in self.counters}


def fast_service(events: FakeEventApi | None = None, **kw: object) -> tuple[RecommenderService, FakeProm, FakeReader]:
    """A service with the fast path on five pods; *kw* are more `RecommenderSettings` (or `scaler`)."""
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake, reader = FakeProm(), FakeReader()
    fake.pods = {f"triton-abc-{k}": f"10.0.0.{k}:8002" for k in range(5)}
    reader.counters = {p: PodCounters(0.0, 0.0, 0.0) for p in fake.pods}
    scaler = kw.pop("scaler", None)
    settings = RecommenderSettings(targets=[target], capacity_rps=100.0, **kw)  # type: ignore[arg-type]
    svc = RecommenderService(settings, fake, events=events, reader=reader, scaler=scaler)  # type: ignore[arg-type]
    return svc, fake, reader


def test_the_fast_path_reads_the_pods_prometheus_scrapes_and_panics_between_evaluations() -> None:
    events = FakeEventApi()
    svc, fake, reader = fast_service(events)
    svc.evaluate_fast(0.0)
    assert reader.rounds == []  # no pods known before the first evaluation's discovery
    svc.evaluate(0.0)  # 450 req/s on 5 replicas: steady
    assert desired(svc) == 5
    assert any(q.startswith('group by (pod, instance) (nv_inference_pending_request_count{') for q in fake.queries)
    for k in range(4):  # 90 req/s per pod, then a flash crowd of 400 per pod
        reader.served(90.0, 2.0 * k)
        svc.evaluate_fast(2.0 * k)
    assert desired(svc) == 5
    reader.counters = {p: PodCounters(90.0 * 6 + 400.0 * 2, 0.0, 0.0) for p in reader.counters}
    svc.evaluate_fast(8.0)
    up = desired(svc)
    # 967 req/s over the 6 s window (the flash crowd is 2 s old) decides to panic; the newest read
    # (2,000 req/s, the flash crowd itself) sizes it, projected at most 2x: 45 replicas at 0.9 x
    # 100 req/s, at once, with no Prometheus query
    assert up == 45
    assert decisions(svc)["scale_up_panic"] == 1.0 and sum(decisions(svc).values()) == 1.0
    [(_, body)] = events.posted
    assert body["message"].startswith(f"tidescale recommends {up:.0f} replicas (was 5): scale_up_panic")
    assert "966.7 req/s read from 5 pod(s) over the last 6 s (2000.0 req/s over the newest read)" in body["message"]
    svc.evaluate(15.0)  # the slow path still reads 450 req/s: it keeps the panic's count
    assert desired(svc) == up


@pytest.mark.parametrize("mode", ["hpa", "direct"])
def test_the_fast_path_takes_back_a_scale_down_the_hpa_has_not_applied_when_the_load_comes_back(mode: str) -> None:
    """Stop 61's demo: a scale-down decided a second before an overload, applied by the HPA's sync ten
    seconds into it. Until the HPA applies it, the Deployment still reads 5 replicas. In direct mode
    the service has written the scale-down itself: nothing is pending, the pods are draining."""
    events = FakeEventApi()
    scaler = FakeScaler()
    svc, fake, reader = fast_service(events, scale_mode=mode, scaler=scaler if mode == "direct" else None)
    svc.evaluate(0.0)
    fake.values["rate("] = 100.0  # calm: 2 replicas carry it at 0.8
    for t in range(15, 91, 15):
        svc.evaluate(float(t))
    assert desired(svc) == 2 and decisions(svc)["scale_down"] == 1.0
    for t in (92.0, 94.0, 96.0, 98.0):  # 20 req/s per pod: the smaller fleet carries it, nothing changes
        reader.served(20.0, t)
        svc.evaluate_fast(t)
    assert desired(svc) == 2
    for t in (100.0, 102.0):  # 80 req/s per pod: 400 req/s, more than 2 x 100 x 0.8, less than a panic's 450
        reader.counters = {p: PodCounters(20.0 * 98 + 80.0 * (t - 98), 0.0, 0.0) for p in reader.counters}
        svc.evaluate_fast(t)
    if mode == "direct":
        assert desired(svc) == 2 and set(scaler.writes) == {("ml", "triton", 2)}  # never written back up
        return
    assert desired(svc) == 5 and decisions(svc)["hold_scale_down_withdrawn"] == 1.0
    assert events.posted[-1][1]["message"].startswith("tidescale recommends 5 replicas (was 2): "
                                                      "hold_scale_down_withdrawn; arrival ")
    svc.evaluate(105.0)  # the slow path still reads the calm minute: the down delay starts again
    assert desired(svc) == 5 and decisions(svc)["hold_down_delay"] == 1.0


def test_a_scale_down_the_hpa_has_applied_is_not_taken_back_on_the_pods_it_removed() -> None:
    """The replicas read lag the HPA: once it removed pods, they stop answering (their last rate still
    in the window) or are no longer found, and the pods left serve their share: the window over-reads.
    Found in the benchmark: after a flash crowd every scale-down to 3 of 9 was taken back, 90 s apart."""
    svc, fake, reader = fast_service()
    svc.evaluate(0.0)
    fake.values["rate("] = 100.0
    for t in range(15, 91, 15):
        svc.evaluate(float(t))
    assert desired(svc) == 2  # the Deployment still reads 5
    state = next(iter(svc.states.values()))
    for t in (92.0, 94.0, 96.0, 98.0):  # 150 req/s: 2 x 100 x 0.8 carries it
        reader.served(30.0, t)
        svc.evaluate_fast(t)
    gone = sorted(reader.counters)[2:]
    reader.silent = set(gone)  # the HPA removed three pods
    for t in (100.0, 102.0, 104.0):  # the two left take the fleet's 150 req/s; the window still counts the three
        reader.counters = {p: PodCounters(30.0 * 98 + 75.0 * (t - 98), 0.0, 0.0) if p not in gone else c
                           for p, c in reader.counters.items()}
        svc.evaluate_fast(t)
    assert state.fast_reading is not None and state.fast_reading.arrival_rps > 160.0  # over-read ...
    assert desired(svc) == 2  # ... and nothing taken back
    fake.pods = {p: a for p, a in fake.pods.items() if p not in gone}  # discovery no longer finds them
    state.pods = {p: a for p, a in state.pods.items() if p not in gone}
    reader.silent = set()
    reader.counters = {p: c for p, c in reader.counters.items() if p not in gone}
    for t in (106.0, 108.0):
        reader.counters = {p: PodCounters(30.0 * 98 + 75.0 * (t - 98) + 60.0 * (t - 104), 0.0, 0.0)
                           for p in reader.counters}
        svc.evaluate_fast(t)
    assert desired(svc) == 2  # 270 req/s on two pods read where five are counted: applied (a panic judges it)


def test_a_pod_that_does_not_answer_blocks_scale_down_and_says_so() -> None:
    svc, fake, reader = fast_service()
    svc.evaluate(0.0)
    fake.values["rate("] = 50.0  # the load is gone: 1 replica would do
    reader.silent = {"triton-abc-3"}
    svc.evaluate_fast(2.0)
    svc.evaluate_fast(4.0)
    for t in range(15, 400, 15):
        svc.evaluate(float(t))
    assert desired(svc) == 5  # held: the silent pod may be the one with the load
    assert decisions(svc)["hold_missing_data"] == 1.0 and failsafe(svc)["missing"] == 1.0
    pods = {dict(k[1])["state"]: v for k, v in exported(svc).items() if k[0] == "tidescale_recommender_fast_path_pods"}
    assert pods == {"answered": 4.0, "missing": 1.0}
    reader.silent = set()
    svc.evaluate_fast(402.0)
    for t in range(405, 800, 15):
        svc.evaluate(float(t))
    assert desired(svc) < 5  # every pod answers again: the scale-down goes ahead


def test_discovery_failing_keeps_the_known_pods() -> None:
    svc, fake, _reader = fast_service()
    svc.evaluate(0.0)
    state = next(iter(svc.states.values()))
    known = dict(state.pods)
    assert len(known) == 5
    original = fake.query

    def broken(expr: str) -> list[dict[str, object]]:
        raise PrometheusUnavailable("timeout")

    fake.query = broken  # type: ignore[method-assign]
    svc.evaluate(15.0)
    assert state.pods == known
    fake.query = original  # type: ignore[method-assign]


def test_the_fast_path_can_be_turned_off() -> None:
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet")
    settings = RecommenderSettings(targets=[target], capacity_rps=100.0, fast_path={"enabled": False})
    svc = RecommenderService(settings, FakeProm())  # type: ignore[arg-type]
    assert svc.reader is None
    svc.evaluate_fast(0.0)  # nothing to do, nothing raised
    with pytest.raises(ValueError, match="interval_s"):
        RecommenderSettings(targets=[target], capacity_rps=100.0, fast_path={"interval_s": 0.01})
    with pytest.raises(ValueError, match="scheme"):
        RecommenderSettings(targets=[target], capacity_rps=100.0, fast_path={"scheme": "file"})


class FakeScaler:
    """The scale subresource. With *replicas* None its read is refused (as without RBAC's `get`), and
    the service reads kube-state-metrics' count (FakeProm's `spec_replicas`); else the read answers
    `replicas`, which a write sets (what `kubectl scale` would set, a test sets)."""

    def __init__(self, replicas: int | None = None) -> None:
        self.writes: list[tuple[str, str, int]] = []
        self.fail = False
        self.replicas = replicas
        self.reads = 0

    def read_namespaced_deployment_scale(self, name: str, namespace: str) -> dict[str, Any]:
        self.reads += 1
        if self.replicas is None:
            raise PermissionError("deployments.apps \"triton\" is forbidden: cannot get resource \"deployments/scale\"")
        return {"spec": {"replicas": self.replicas}} if self.replicas else {"spec": {}}  # omitempty, as the API

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: dict) -> None:
        if self.fail:
            raise OSError("forbidden")
        self.writes.append((namespace, name, body["spec"]["replicas"]))
        if self.replicas is not None:
            self.replicas = body["spec"]["replicas"]


def direct_service(scaler: FakeScaler, events: FakeEventApi | None = None
                   ) -> tuple[RecommenderService, FakeProm, FakeReader]:
    """A direct-mode service over 5 Triton pods at 450 req/s, evaluated once at t=0."""
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake, reader = FakeProm(), FakeReader()
    fake.pods = {f"triton-abc-{k}": f"10.0.0.{k}:8002" for k in range(5)}
    reader.counters = {p: PodCounters(0.0, 0.0, 0.0) for p in fake.pods}
    settings = RecommenderSettings(targets=[target], capacity_rps=100.0, scale_mode="direct")
    svc = RecommenderService(settings, fake, reader=reader, scaler=scaler,  # type: ignore[arg-type]
                             events=events)
    svc.evaluate(0.0)
    return svc, fake, reader


def panic_at_8s(svc: RecommenderService, reader: FakeReader) -> None:
    """The fast path reads 90 req/s a pod for 6 s, then a jump to 400: a panic at t=8."""
    for k in range(4):
        reader.served(90.0, 2.0 * k)
        svc.evaluate_fast(2.0 * k)
    reader.counters = {p: PodCounters(90.0 * 6 + 400.0 * 2, 0.0, 0.0) for p in reader.counters}
    svc.evaluate_fast(8.0)


def test_direct_mode_writes_the_scale_subresource_at_once_and_retries_a_failed_write() -> None:
    scaler = FakeScaler()
    svc, fake, reader = direct_service(scaler)
    assert scaler.writes == []  # 5 wanted, 5 there: nothing to write
    failures = ("tidescale_recommender_scale_write_failures_total", (("deployment", "triton"), ("namespace", "ml")))
    assert exported(svc)[failures] == 0.0
    panic_at_8s(svc, reader)  # the panic is written by the fast path itself, no HPA sync to wait for
    assert scaler.writes == [("ml", "triton", 45)]
    scaler.fail = True
    fake.values["rate("] = 5000.0
    svc.evaluate(15.0)
    assert desired(svc) > 45 and len(scaler.writes) == 1  # the write failed: logged, kept for the retry
    assert exported(svc)[failures] == 1.0  # ... and counted, for TidescaleRecommenderCannotScale
    scaler.fail = False
    svc.evaluate(30.0)
    assert scaler.writes[-1] == ("ml", "triton", desired(svc))
    assert exported(svc)[failures] == 1.0


class EventsSeeingTheScale(FakeEventApi):
    """Events that note how many scale writes came before each post."""

    def __init__(self, scaler: FakeScaler) -> None:
        super().__init__()
        self.scaler = scaler
        self.writes_before: list[int] = []

    def create_namespaced_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes_before.append(len(self.scaler.writes))
        return super().create_namespaced_event(namespace, body)


def test_direct_mode_writes_the_scale_before_posting_the_event_that_reports_it() -> None:
    """An Event post that is slow (the API server away, a dropped connection until its deadline)
    must not hold back the scale-up it reports: slow evaluation and fast path alike."""
    scaler = FakeScaler()
    events = EventsSeeingTheScale(scaler)
    svc, fake, reader = direct_service(scaler, events)
    panic_at_8s(svc, reader)  # the fast path's panic
    assert len(scaler.writes) == 1 and events.writes_before == [1]
    fake.values["rate("] = 5000.0
    svc.evaluate(15.0)  # the slow evaluation's scale-up
    assert len(scaler.writes) == 2 and events.writes_before == [1, 2]


def test_hpa_mode_exports_no_scale_write_counter() -> None:
    svc, _ = make()
    svc.evaluate(0.0)
    assert ("tidescale_desired_replicas", (("deployment", "triton"), ("namespace", "ml"))) in exported(svc)
    assert not any(name.startswith("tidescale_recommender_scale_write") for name, _ in exported(svc))


def test_scale_mode_is_hpa_or_direct() -> None:
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet")
    with pytest.raises(ValueError, match="scale_mode"):
        RecommenderSettings(targets=[target], capacity_rps=100.0, scale_mode="kpa")


# --- issue 43 #3: no lock across Prometheus queries; a stuck evaluation is a visible fail-safe ----

class StallingProm(FakeProm):
    """A Prometheus that stops answering the query `stall_on` once `stall` is set, until `release`
    is (or 10 s have passed, so that a service that waits on it fails instead of hanging)."""

    def __init__(self) -> None:
        super().__init__()
        self.stall, self.stalled, self.release = threading.Event(), threading.Event(), threading.Event()
        self.stall_on = ""
        self.let_go = False  # set when the stalled query returns: by then, waiting was no proof of anything

    def instant(self, expr: str) -> list[tuple[float, float]]:
        if self.stall.is_set() and expr == self.stall_on:
            self.stalled.set()
            self.release.wait(timeout=10)
            self.let_go = True
        return super().instant(expr)


def stalling_service(clock: ManualClock) -> tuple[RecommenderService, StallingProm, FakeReader, threading.Thread]:
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake, reader = StallingProm(), FakeReader()
    fake.pods = {f"triton-abc-{k}": f"10.0.0.{k}:8002" for k in range(5)}
    reader.counters = {p: PodCounters(0.0, 0.0, 0.0) for p in fake.pods}
    svc = RecommenderService(RecommenderSettings(targets=[target], capacity_rps=100.0), fake,  # type: ignore[arg-type]
                             reader=reader, clock=clock)  # type: ignore[arg-type]
    svc.evaluate(clock())
    fake.stall_on = svc.states[("ml", "triton")].queries.completions
    fake.stall.set()
    slow = threading.Thread(target=svc.evaluate, daemon=True)
    slow.start()
    assert fake.stalled.wait(timeout=10)
    return svc, fake, reader, slow


def test_a_slow_prometheus_stalls_neither_the_answer_nor_metrics_nor_the_panic() -> None:
    """A Prometheus that trickles its answers held the evaluation's lock across its queries:
    `/v1/desired` and `/metrics` waited behind it, and so did the fast path's panic."""
    clock = ManualClock(1000.0)
    svc, fake, reader, slow = stalling_service(clock)
    try:
        client = TestClient(make_app(svc))
        assert client.get("/v1/desired/ml/triton").json()[DESIRED_FIELD] == 5
        assert desired(svc) == 5
        for k in range(4):  # 90 req/s per pod, then a flash crowd: the fast path panics meanwhile
            reader.served(90.0, 2.0 * k)
            svc.evaluate_fast(1000.0 + 2.0 * k)
        reader.counters = {p: PodCounters(90.0 * 6 + 400.0 * 2, 0.0, 0.0) for p in reader.counters}
        svc.evaluate_fast(1008.0)
        assert desired(svc) == 45
        answered_while_stalled = not fake.let_go
    finally:
        fake.release.set()
        slow.join(timeout=10)
    assert answered_while_stalled


def test_an_evaluation_that_does_not_end_is_held_as_stuck_and_says_so() -> None:
    clock = ManualClock(1000.0)
    svc, fake, _reader, slow = stalling_service(clock)
    try:
        clock.sleep(59.0)  # within 4 intervals (60 s): nothing to say yet
        assert sum(failsafe(svc).values()) == 0.0
        clock.sleep(2.0)
        assert failsafe(svc)["stuck"] == 1.0 and sum(failsafe(svc).values()) == 1.0
        assert decisions(svc)["hold_missing_data"] == 1.0
        answer = answer_for(svc, "ml", "triton")
        assert answer is not None and answer.failsafe == "stuck" and answer.desired_replicas == 5
        assert TestClient(make_app(svc)).get("/healthz").json()["failsafe"] == {"ml/triton": "stuck"}
    finally:
        fake.release.set()
        slow.join(timeout=10)
    fake.stall.clear()
    svc.evaluate(clock())
    assert sum(failsafe(svc).values()) == 0.0  # it ended, and the next one had good data


def test_the_stuck_limit_follows_the_interval_unless_set() -> None:
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet")
    assert RecommenderSettings(targets=[target], interval_s=30.0).stuck_after() == 120.0
    assert RecommenderSettings(targets=[target], interval_s=5.0).stuck_after() == 60.0
    assert RecommenderSettings(targets=[target], stuck_after_s=20.0).stuck_after() == 20.0


# --- tick: whichever pass is due --------------------------------------------------------------------

def test_tick_runs_the_fast_path_every_2_s_and_the_evaluation_every_interval() -> None:
    svc, _fake, reader = fast_service()
    ran: list[tuple[str, float]] = []
    real_fast, real_eval = svc.evaluate_fast, svc.evaluate
    svc._passes["fast"] = (lambda now: (ran.append(("fast", now)), real_fast(now)), 2.0, svc.fast_path_heartbeat)
    svc._passes["evaluation"] = (lambda now: (ran.append(("evaluation", now)), real_eval(now)), 15.0,
                                 svc.evaluation_heartbeat)
    assert svc.tick(0.0) == 2.0  # both due at the start, the panic check first
    assert ran == [("fast", 0.0), ("evaluation", 0.0)]
    assert svc.tick(1.0) == 2.0 and len(ran) == 2  # nothing due yet
    for t in (2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0):
        svc.tick(t)
    assert [name for name, _ in ran[2:]] == ["fast"] * 7
    svc.tick(16.0)
    assert ran[-2:] == [("fast", 16.0), ("evaluation", 16.0)]
    # One pass alone: when it is next due, on its grid (0, 15, 30: run at 16, it is not pushed to 31) ...
    assert svc.tick(17.0, passes=("evaluation",)) == 30.0
    assert desired(svc) == 5 and reader.rounds  # the real passes ran: published, pods read
    svc.tick(100.0, passes=("evaluation",))  # ... unless a whole interval was missed: then from now, once
    assert ran[-1] == ("evaluation", 100.0)
    assert svc.tick(100.5, passes=("evaluation",)) == 115.0 and ran[-1] == ("evaluation", 100.0)


def test_tick_runs_the_panic_users_run_and_a_failing_pass_leaves_its_heartbeat_unbeaten() -> None:
    svc, _fake, reader = fast_service()
    svc.tick(0.0)  # the evaluation discovers the pods: 450 req/s on 5 replicas
    for k in range(1, 4):
        reader.served(90.0, 2.0 * k)
        svc.tick(2.0 * k)
    reader.counters = {p: PodCounters(90.0 * 6 + 400.0 * 2, 0.0, 0.0) for p in reader.counters}
    svc.tick(8.0)
    assert desired(svc) == 45 and decisions(svc)["scale_up_panic"] == 1.0

    def broken(now: float) -> None:
        raise RuntimeError("a bug")

    heartbeat = svc.fast_path_heartbeat
    assert heartbeat is not None
    beats = heartbeat.beats
    svc._passes["fast"] = (broken, 2.0, heartbeat)
    svc.tick(10.0)  # logged, not raised
    assert heartbeat.beats == beats
    evaluations = svc.evaluation_heartbeat.beats
    svc.tick(16.0)  # the evaluation still runs when due
    assert svc.evaluation_heartbeat.beats == evaluations + 1
    assert desired(svc) == 45


def test_pods_a_scale_down_removed_do_not_hold_the_next_one() -> None:
    """After a scale-down the removed pods stop answering until the next discovery: as many answers
    as Ready replicas means every Ready pod answered, and the silent ones are gone."""
    svc, fake, reader = fast_service()
    svc.evaluate(0.0)
    fake.values["rate("] = 50.0  # the load is gone
    fake.values["replicas_ready"] = 3.0  # two of the five pods were removed ...
    reader.silent = {"triton-abc-3", "triton-abc-4"}  # ... and no longer answer
    svc.evaluate_fast(2.0)
    for t in range(15, 400, 15):
        svc.evaluate(float(t))
    assert desired(svc) < 5 and "hold_missing_data" not in {k for k, v in decisions(svc).items() if v}


def test_a_scale_down_not_yet_seen_through_does_not_hold_either() -> None:
    """Direct mode removes pods at once while kube-state-metrics still counts them Ready: as many
    answers as the Deployment's replicas is enough; a silent pod among those it keeps still holds."""
    svc, fake, reader = fast_service()
    svc.evaluate(0.0)
    fake.values["rate("] = 50.0
    fake.values["spec_replicas"] = 3.0  # scaled to 3; Ready still reads 5
    reader.silent = {"triton-abc-3", "triton-abc-4"}
    svc.evaluate_fast(2.0)
    for t in range(15, 400, 15):
        svc.evaluate(float(t))
    assert desired(svc) < 3 and failsafe(svc).get("missing", 0.0) == 0.0
    fake.values["spec_replicas"] = 5.0
    reader.silent = {"triton-abc-2", "triton-abc-3", "triton-abc-4"}  # 2 answers of 5 replicas: held
    svc.evaluate_fast(402.0)
    svc.evaluate(405.0)
    assert failsafe(svc)["missing"] == 1.0


def test_crash_looping_pods_are_replaced_and_the_event_says_so() -> None:
    """kube-state-metrics shows 2 of the 5 pods waiting in CrashLoopBackOff lately: as shipped
    (`replace_crash_looping`), 7 are asked for."""
    events = FakeEventApi()
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake = FakeProm()
    settings = RecommenderSettings(targets=[target], capacity_rps=100.0)  # type: ignore[arg-type]
    svc = RecommenderService(settings, fake, events=events)  # type: ignore[arg-type]
    svc.evaluate(0.0)  # 450 req/s on 5 replicas
    query = svc.states[("ml", "triton")].queries.crash_looping
    assert 'max_over_time(kube_pod_container_status_waiting_reason{namespace="ml",' in query
    assert 'reason="CrashLoopBackOff"}[300s]' in query and "and on (namespace, pod)" in query  # pods still there
    fake.values.update({"replicas_ready": 3.0, "kube_pod_container_status_waiting_reason": 2.0})
    svc.evaluate(15.0)
    assert desired(svc) == 7 and decisions(svc)["scale_up_replace"] == 1.0
    [(_, body)] = events.posted
    assert body["message"].startswith("tidescale recommends 7 replicas (was 5): scale_up_replace;")
    assert "3/5 replicas ready, 2 pod(s) crash-looping" in body["message"]


def test_pods_that_cannot_be_scheduled_are_said_once_in_an_event_and_the_count_still_goes_out() -> None:
    """No node with a free GPU: the count stands (a node autoscaler provisions for the Pending pods), the
    decision is wait_unschedulable and one Event says so, though the count did not change."""
    events = FakeEventApi()
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake = FakeProm()
    svc = RecommenderService(RecommenderSettings(targets=[target], capacity_rps=100.0), fake,  # type: ignore[arg-type]
                             events=events)
    svc.evaluate(0.0)  # 450 req/s on 5 replicas
    fake.values.update({"replicas_ready": 3.0, "kube_pod_status_unschedulable": 2.0})
    assert 'count(max by (namespace, pod) (kube_pod_status_unschedulable{namespace="ml"' in svc.states[
        ("ml", "triton")].queries.unschedulable
    svc.evaluate(15.0)
    assert desired(svc) == 5 and decisions(svc)["wait_unschedulable"] == 1.0
    [(_, body)] = events.posted
    assert body["message"].startswith("tidescale recommends 5 replicas (was 5): wait_unschedulable;")
    assert "3/5 replicas ready, 2 pod(s) cannot be scheduled" in body["message"]
    assert "(projected" not in body["message"]  # sized for the rate read: nothing projected to show
    svc.evaluate(30.0)
    assert len(events.posted) == 1  # said once
    fake.values["kube_pod_status_unschedulable"] = None  # placed at last
    svc.evaluate(45.0)
    assert decisions(svc)["wait_unschedulable"] == 0.0


def test_the_fast_path_finds_the_pods_again_between_evaluations() -> None:
    """A pod a scale-up added takes its share of the load off the pods already read: the fast path
    finds it every `discovery_interval_s` (a Prometheus query), not only at the next evaluation."""
    svc, fake, reader = fast_service()
    svc.evaluate(0.0)
    interval = svc.settings.fast_path.discovery_interval_s
    fake.pods["triton-abc-9"] = "10.0.0.9:8002"
    reader.counters["triton-abc-9"] = PodCounters(0.0, 0.0, 0.0)
    svc.evaluate_fast(interval / 2)
    assert "triton-abc-9" not in reader.rounds[-1]  # not due yet: the pods of the evaluation
    discoveries = sum(q.startswith("group by (pod, instance)") for q in fake.queries)
    svc.evaluate_fast(interval)
    assert "triton-abc-9" in reader.rounds[-1]
    svc.evaluate_fast(interval + 2.0)
    assert sum(q.startswith("group by (pod, instance)") for q in fake.queries) == discoveries + 1  # once per interval
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet")
    for bad in (0.0, -1.0, math.inf, 301.0):
        with pytest.raises(ValueError, match="discovery_interval_s"):
            RecommenderSettings(targets=[target], fast_path={"discovery_interval_s": bad})


def test_direct_mode_counts_the_pods_of_a_scale_down_until_it_reads_them_gone() -> None:
    """After its own write the service takes a scale-up's count at once, and a scale-down's only from
    an observation: the removed pods drain first, and a panic weighed against the smaller count would
    answer the drain's own transient with a scale-up (a flapping loop in the closed-loop bench)."""
    target = TargetSettings(deployment="triton", namespace="ml", model="resnet", min_replicas=1, max_replicas=50)
    fake, scaler = FakeProm(), FakeScaler()
    settings = RecommenderSettings(targets=[target], capacity_rps=100.0, scale_mode="direct",
                                   tuning={"down_delay_s": 0.0})
    svc = RecommenderService(settings, fake, scaler=scaler)  # type: ignore[arg-type]
    [state] = svc.states.values()
    svc.evaluate(0.0)
    fake.values["rate("] = 50.0
    for t in range(15, 200, 15):
        svc.evaluate(float(t))
        if scaler.writes:
            break
    assert scaler.writes and scaler.writes[-1][2] < 5
    assert state.current == 5  # the Deployment still reports 5 (spec_replicas): written, not yet read gone
    fake.values["rate("] = 5000.0
    svc.evaluate(300.0)
    assert scaler.writes[-1][2] > 5 and state.current == scaler.writes[-1][2]  # a scale-up's count at once
