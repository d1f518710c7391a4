"""`tidescale demo --on cluster`: the story on the local Kubernetes cluster, as users run tidescale.

The cluster (`tidescale cluster up`, two nodes) comes up with prometheus-operator, a Prometheus and an
Alertmanager resource and the simulated dcgm-exporter on every node. The demo then deploys real
`tritonserver` pods that trace to the exporter, `helm install`s deploy/helm/tidescale (KEDA mode, or
prometheus-adapter with `--mode adapter`) and plays traffic at the Triton Service's cluster address.
The replicas change because the real HPA changes them. The story, in phases of one run:

1. steady traffic, then a 3x surge that the autoscaler absorbs;
2. a model version whose profile spends 30 % of its op time in string ops: `TritonModelReviewRequired`
   opens a review in the review service (Alertmanager -> the chart's AlertmanagerConfig);
3. an XID error on a GPU a Triton pod holds, which pages;
4. traffic beyond what `maxReplicas` can serve: `TritonLatencyBudgetBurn` and
   `TritonAutoscalerMaxedOut` fire.

Alert windows are shortened through the chart's values (`defaultRules.overrides`), never by editing
rendered output. Pages and tickets go to a notification sink on the host, through the platform team's
own AlertmanagerConfig (the chart routes only model reviews).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.live import Live

from tidescale.autoscaler.queries import TargetQueries
from tidescale.autoscaler.settings import RecommenderTuning, TargetSettings
from tidescale.contracts import catalog
from tidescale.contracts.errors import TidescaleError
from tidescale.contracts.promql import selector, triton_sum, triton_sum_rate
from tidescale.devstack.cluster import addons, lifecycle
from tidescale.devstack.cluster.config import ClusterConfig
from tidescale.devstack.cluster.kubectl import kubectl
from tidescale.devstack.cluster.kubectl import wait_for as wait_until
from tidescale.devstack.cluster.serving import triton_deployment
from tidescale.devstack.demo.faults import string_heavy_trace_viewer
from tidescale.devstack.demo.plots import write_plots
from tidescale.devstack.demo.run import (
    build_scenario,
    error_breakdown,
    percentile,
    show,
    sigterm_as_interrupt,
)
from tidescale.devstack.demo.settings import DemoSettings
from tidescale.devstack.demo.summary import reviews_opened
from tidescale.devstack.demo.timeline import HostCpu, Sample, Timeline
from tidescale.devstack.fleet.model_repo import DEFAULT_MODELS, ModelSpec, sustainable_rps
from tidescale.devstack.localstack import NotificationSink
from tidescale.devstack.node.kubeapi import KubeApi
from tidescale.devstack.node.podspec import POD_RESOURCES, kubelet_root
from tidescale.devstack.tools import REPO_ROOT, helm
from tidescale.sim.traffic import Scenario

SERVING, RELEASE, RELEASE_NS, DEPLOYMENT = "inference", "tidescale", "tidescale", "triton"
AUTOSCALED_MODEL, REVIEW_MODEL, REVIEW_VERSION = "resnet50", "ctr_ranker", "1"
CHART = REPO_ROOT / "deploy" / "helm" / "tidescale"
NODES = 2
XID = 79  # "GPU has fallen off the bus"
PROFILE_AT, XID_AT = 0.3, 0.38  # fractions of the run: story parts 2 and 3, in the calm after the surge
# Long enough to see one evaluation, short enough for a six-minute story.
SHORT_WINDOWS = {name: {"for": "30s"} for name in
                 ("TritonModelReviewRequired", "TritonAutoscalerMaxedOut", "TritonLatencyBudgetBurn")}


@dataclass(frozen=True)
class Phase:
    name: str
    start: float  # fraction of the run
    factor: float  # times the base rate; the overload phase's rate is computed instead


# Clients that keep up to this many requests open: beyond maxReplicas the queues stay long (a smaller
# cap lets them drain between bursts, and the maxed-out alert's window restarts).
MAX_IN_FLIGHT = 1024

# The phases whose demand outruns the fleet at first, during which the HPA's desired replicas never fall.
OVERLOAD_PHASE = "beyond maxReplicas"
LOADED_PHASES = ("surge 3x", OVERLOAD_PHASE)


def share_within(counts: list[list[int]]) -> float | None:
    """Requests within the SLO over requests sent, summed over [sent, within] pairs."""
    sent = sum(c[0] for c in counts)
    return round(sum(c[1] for c in counts) / sent, 4) if sent else None


def autoscaled_by_phase(records: list[Any], s: DemoSettings) -> dict[str, dict[str, Any]]:
    """Per phase, what the autoscaled model's clients saw (requests, share within the SLO, P99 of those
    served): the figures `bench closed-loop` sets the simulator's replay of the story against."""
    mine = [r for r in records if r.model == AUTOSCALED_MODEL]
    out: dict[str, dict[str, Any]] = {}
    for p in story_phases():
        inside = [r for r in mine if phase_at(r.t_send, s.duration_s).name == p.name]
        served = [r.latency_s for r in inside if r.ok]
        out[p.name] = {"sent": len(inside), "errors": len(inside) - len(served),
                       "requests_within_slo": share_within([[len(inside), sum(
                           1 for v in served if v <= s.slo_latency_threshold_s)]]),
                       "latency_p99_s": round(percentile(served, 0.99), 4) if served else None}
    return out


def story_phases() -> tuple[Phase, ...]:
    # The overload phase is the longest: the HPA first climbs from minReplicas, and the maxed-out alert
    # needs its condition to hold through its window and an evaluation at maxReplicas.
    return (Phase("steady", 0.0, 1.0), Phase("surge 3x", 0.1, 3.0), Phase("calm", 0.3, 1.0),
            Phase(OVERLOAD_PHASE, 0.45, 0.0), Phase("recovery", 0.9, 1.0))


def phase_spans(duration_s: float) -> list[tuple[str, float, float]]:
    """Each phase of a story *duration_s* long: (name, start s, end s)."""
    phases = story_phases()
    ends = [p.start for p in phases[1:]] + [1.0]
    return [(p.name, p.start * duration_s, end * duration_s) for p, end in zip(phases, ends, strict=True)]


def phase_at(t: float, duration_s: float) -> Phase:
    phases = story_phases()
    return [p for p in phases if t >= p.start * duration_s][-1] if t >= 0 else phases[0]


def story(s: DemoSettings, overload_rps: float) -> Scenario:
    """The traffic of the four-part story: base rate, a 3x surge, and load beyond maxReplicas."""
    def rate(t: float) -> float:
        p = phase_at(t, s.duration_s)
        return overload_rps if p.factor == 0.0 else s.base_rps * p.factor

    return Scenario("cluster-story", s.duration_s, rate, "steady, 3x surge, calm, beyond maxReplicas, recovery",
                    peak_rps=max(overload_rps, 3 * s.base_rps))


def plays_other_traffic(s: DemoSettings) -> bool:
    """`--scenario` or `--trace-csv` replace the story's traffic (the faults stay)."""
    return s.trace_csv is not None or "scenario" in s.model_fields_set


def served_models(s: DemoSettings) -> tuple[ModelSpec, ...]:
    return tuple(dataclasses.replace(m, curve=m.curve.scaled(s.curve_scale)) for m in DEFAULT_MODELS)


def overload_rate(s: DemoSettings, models: tuple[ModelSpec, ...]) -> float:
    """Total req/s at which the autoscaled model needs 1.2x what maxReplicas replicas can serve at best."""
    spec = next(m for m in models if m.name == AUTOSCALED_MODEL)
    peak = spec.curve.throughput(spec.max_batch_size) * spec.instance_count
    share = s.model_mix.get(AUTOSCALED_MODEL, 1.0) / sum(s.model_mix.values())
    return 1.2 * s.max_replicas * peak / share


# The recommender's windows, shortened for a 5-minute story.
DEMO_TUNING: dict[str, float] = {"down_delay_s": 30, "rate_window_s": 30, "fast_window_s": 15}


def slow_share_query(s: DemoSettings) -> str:
    """The recommender's own `slow_share` query for the demo's target, to show what it read."""
    target = TargetSettings(deployment=DEPLOYMENT, namespace=SERVING, model=AUTOSCALED_MODEL,
                            min_replicas=s.min_replicas, max_replicas=s.max_replicas)
    tuning = RecommenderTuning.model_validate(DEMO_TUNING)
    return TargetQueries.for_target(target, tuning, slo_s=s.slo_latency_threshold_s).slow_share


def pod_rate_query() -> str:
    """Each Triton pod's completions of the autoscaled model over the last 15 s (three of the demo's scrapes)."""
    success = selector(catalog.get("nv_inference_request_success").name, namespace=SERVING, model=AUTOSCALED_MODEL)
    return triton_sum_rate(success, "pod", "15s")


def recommender_decision() -> str:
    """The recommender's decision series for the demo's target (one per reason, 1 for the current one)."""
    return selector(catalog.get("tidescale_recommender_decision").name, namespace=SERVING, deployment=DEPLOYMENT)


def chart_values(s: DemoSettings, mode: str, capacity_rps: float) -> dict[str, Any]:
    """The values the demo installs the chart with: a user's, with the alert windows shortened."""
    return {
        "serving": {"namespace": SERVING},
        "slo": {"latency": {"thresholdSeconds": s.slo_latency_threshold_s}},
        "recommender": {"settings": {"interval_s": 5, "tuning": DEMO_TUNING}},
        "autoscaling": {"mode": mode, "keda": {"pollingInterval": 5},
                        "targets": [{"deployment": DEPLOYMENT, "model": AUTOSCALED_MODEL,
                                     "minReplicas": s.min_replicas, "maxReplicas": s.max_replicas,
                                     "capacityRps": round(capacity_rps, 1)}]},
        # The review route is rendered wherever the operator's AlertmanagerConfig API is served (auto).
        # The reviewed model runs in the same Triton Deployment; its profile alert names no Deployment.
        "reviews": {"kubeEvents": {"modelDeployments": {REVIEW_MODEL: DEPLOYMENT}}},
        "defaultRules": {"overrides": SHORT_WINDOWS},
        # kube-prometheus-stack (release kps, at its defaults) loads monitors and rules with its release label.
        "monitoring": {"interval": "5s", "additionalLabels": addons.MONITORING_LABELS},
    }


def oncall_routes(sink: NotificationSink) -> dict[str, Any]:
    """The platform team's own routes (the chart routes only model reviews), as a kube-prometheus-stack
    user writes them in its `alertmanager.config`: pages and tickets to the sink, the Watchdog to null."""
    def receiver(name: str) -> dict[str, Any]:
        return {"name": name, "webhook_configs": [{"url": sink.url(name), "send_resolved": False}]}

    return {"global": {"resolve_timeout": "5m"},
            "route": {"receiver": "null", "group_by": ["alertname", "namespace"], "group_wait": "5s",
                      "group_interval": "30s", "repeat_interval": "1h",
                      "routes": [{"receiver": "null", "matchers": ['alertname = "Watchdog"']},
                                 {"receiver": "pager", "matchers": ['severity = "critical"']},
                                 {"receiver": "tickets", "matchers": ['severity = "warning"']}]},
            "receivers": [{"name": "null"}, receiver("pager"), receiver("tickets")]}


def use_oncall_routes(stack: ClusterStack, sink: NotificationSink) -> None:
    """Write the routes into kps's Alertmanager configuration Secret (as `helm upgrade kps` with its
    `alertmanager.config` would); the operator merges the chart's AlertmanagerConfig into it."""
    stack.api.patch_merge(f"/api/v1/namespaces/{addons.MONITORING_NS}/secrets/{addons.ALERTMANAGER_CONFIG_SECRET}",
                          {"stringData": {"alertmanager.yaml": yaml.safe_dump(oncall_routes(sink))}})


class ClusterStack:
    """The demo's handles on the cluster: API, Prometheus, Alertmanager, the release's Services."""

    def __init__(self, config: ClusterConfig, api: KubeApi) -> None:
        self.config, self.api = config, api

    def pod_ip(self, namespace: str, name: str) -> str:
        return str(self.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["status"]["podIP"])

    def service_url(self, namespace: str, name: str) -> str:
        spec = self.api.get(f"/api/v1/namespaces/{namespace}/services/{name}")["spec"]
        return f"http://{spec['clusterIP']}:{spec['ports'][0]['port']}"

    @property
    def prometheus_url(self) -> str:
        return f"http://{self.pod_ip(addons.MONITORING_NS, addons.PROMETHEUS_POD)}:9090"

    @property
    def alertmanager_url(self) -> str:
        return f"http://{self.pod_ip(addons.MONITORING_NS, addons.ALERTMANAGER_POD)}:9093"

    def query(self, promql: str) -> list[dict[str, Any]]:
        resp = httpx.get(f"{self.prometheus_url}/api/v1/query", params={"query": promql}, timeout=5)
        resp.raise_for_status()
        return list(resp.json()["data"]["result"])

    def secret(self, namespace: str, name: str, key: str) -> str:
        data = self.api.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")["data"]
        return base64.b64decode(data[key]).decode()

    def deployment(self) -> dict[str, Any]:
        return self.api.get(f"/apis/apps/v1/namespaces/{SERVING}/deployments/{DEPLOYMENT}")

    def hpa(self) -> dict[str, Any] | None:
        items = self.api.get(f"/apis/autoscaling/v2/namespaces/{SERVING}/horizontalpodautoscalers")["items"]
        return items[0] if items else None


def run_helm(config: ClusterConfig, *args: str) -> str:
    proc = subprocess.run([str(helm()), f"--kubeconfig={config.admin_kubeconfig}", *args],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"helm {args[0]} failed: {proc.stderr.strip()[-800:]}")
    return proc.stdout


def install(stack: ClusterStack, s: DemoSettings, mode: str, sink: NotificationSink, out: Path,
            say: Callable[[str], None]) -> None:
    config, api = stack.config, stack.api
    models = served_models(s)
    spec = next(m for m in models if m.name == AUTOSCALED_MODEL)
    say("Triton: a Deployment of real tritonserver pods, traced to the exporter")
    kubectl(config, "create", "namespace", SERVING, check=False)
    kubectl(config, "apply", "-f", "-", stdin=yaml.safe_dump_all(triton_deployment(
        SERVING, replicas=s.min_replicas, specs=models, load_seconds=s.cold_start_s,
        otlp_url=f"http://{RELEASE}-exporter.{RELEASE_NS}.svc:9105/v1/traces")))
    if mode == "keda":
        say("KEDA (operator and metrics API server)")
        addons.install_keda(config, api)
    values = out / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values(s, mode, sustainable_rps(spec))))
    say(f"helm install {RELEASE} deploy/helm/tidescale -n {RELEASE_NS} -f {values} ({mode} mode)")
    run_helm(config, "upgrade", "--install", RELEASE, str(CHART), "--namespace", RELEASE_NS, "--create-namespace",
             "-f", str(values), "--wait", "--timeout", "300s")
    if mode == "adapter":
        say("prometheus-adapter, reading the rules the chart rendered")
        addons.install_prometheus_adapter(config, api, f"{RELEASE}-prometheus-adapter")
    addons.use_external_metrics_from(config, api, "keda" if mode == "keda" else "adapter")
    use_oncall_routes(stack, sink)
    wait_until("the Triton Deployment", lambda: int(stack.deployment().get("status", {}).get(
        "readyReplicas") or 0) >= s.min_replicas, 180)
    wait_for_scrapes(stack, say)


def wait_for_scrapes(stack: ClusterStack, say: Callable[[str], None], timeout_s: float = 180.0) -> None:
    """Start the story once Prometheus scrapes the release's exporter and recommender (`up` of both,
    and the recommender's decision series). The operator loads new monitors on its own schedule:
    in stop 56's fresh-clone demo the recommender's series came 170 s into the story, its P99 read
    "unknown" until then, and the surge's scale-down came on the rates alone. Past *timeout_s* the
    story starts anyway, with a warning: the demo shows what it shows."""
    decision = recommender_decision()

    def scraped() -> bool:
        try:
            return bool(stack.query(decision)) and bool(stack.query(f'count(up{{namespace="{RELEASE_NS}"}} == 1) >= 2'))
        except httpx.HTTPError:
            return False  # Prometheus itself not answering yet

    say("waiting for Prometheus to scrape the exporter and the recommender")
    try:
        wait_until("Prometheus scraping the exporter and the recommender", scraped, timeout_s)
    except TidescaleError as e:
        say(f"warning: {e}; the story starts without them")


def inject_review_profile(stack: ClusterStack) -> dict[str, Any]:
    """Story part 2: a string-heavy profile of one model version, uploaded as a profiler job would."""
    token = stack.secret(RELEASE_NS, f"{RELEASE}-auth", "exporter-token")
    resp = httpx.post(f"{stack.service_url(RELEASE_NS, f'{RELEASE}-exporter')}/v1/profiles",
                      params={"model": REVIEW_MODEL, "version": REVIEW_VERSION},
                      headers={"Authorization": f"Bearer {token}", "content-type": "application/json",
                               "x-filename": "string_heavy.trace_viewer.json"},
                      content=string_heavy_trace_viewer(0.3), timeout=30)
    resp.raise_for_status()
    share = resp.json().get("op_class_share", {}).get("string")
    return {"model": REVIEW_MODEL, "version": REVIEW_VERSION, "string_share": share}


def inject_xid(stack: ClusterStack) -> dict[str, Any]:
    """Story part 3: XID 79 on the GPU that a Triton pod holds, through that node's dcgm-exporter."""
    pods = stack.api.get(f"/api/v1/namespaces/{SERVING}/pods", labelSelector="app.kubernetes.io/name=triton")["items"]
    node = pods[0]["spec"]["nodeName"]
    exporters = stack.api.get(f"/api/v1/namespaces/{addons.GPU_OPERATOR_NS}/pods",
                              labelSelector="app=nvidia-dcgm-exporter")["items"]
    dcgm = next(p for p in exporters if p["spec"]["nodeName"] == node)
    rows = json.loads((kubelet_root(stack.config.state_dir / "nodes" / node) / POD_RESOURCES).read_text())
    gpu = next(r["gpus"][0] for r in rows if r["pod"] == pods[0]["metadata"]["name"])
    resp = httpx.post(f"http://{dcgm['status']['podIP']}:9400/faults", json={"xid": XID, "gpu": gpu},
                      headers={"Authorization": f"Bearer {addons.dcgm_fault_token(stack.api)}"}, timeout=10)
    resp.raise_for_status()
    return {"node": node, "gpu": gpu, "code": XID, "pod": pods[0]["metadata"]["name"]}


class ClusterSampler:
    """Once a second: the client's view, the Deployment and HPA, Prometheus's queue depth and alerts."""

    def __init__(self, stack: ClusterStack, sc: Scenario, loadgen: Any, slow_share: str) -> None:
        self.stack, self.sc, self.loadgen = stack, sc, loadgen
        self._slow_share_query = slow_share
        self._queue: float | None = None
        self._slow_share: float | None = None
        self._decision: str | None = None
        self._firing: tuple[str, ...] = ()
        self._pod_rps: dict[str, float] | None = None
        self._cpu = HostCpu()
        self.alerts_seen: set[str] = set()
        self._n = 0

    def _prometheus(self) -> None:
        with contextlib.suppress(Exception):
            found = self.stack.query(triton_sum(selector("nv_inference_pending_request_count", namespace=SERVING)))
            self._queue = float(found[0]["value"][1]) if found else None
        with contextlib.suppress(Exception):
            found = self.stack.query(self._slow_share_query)
            self._slow_share = round(float(found[0]["value"][1]), 4) if found else None
        with contextlib.suppress(Exception):
            found = self.stack.query(f"{recommender_decision()} == 1")
            self._decision = found[0]["metric"].get("reason") if found else None
        with contextlib.suppress(Exception):
            found = self.stack.query(pod_rate_query())
            self._pod_rps = {r["metric"].get("pod", "?"): round(float(r["value"][1]), 2) for r in found}
        with contextlib.suppress(Exception):
            found = self.stack.query('ALERTS{alertstate="firing", alertname!="Watchdog"}')
            self._firing = tuple(sorted({r["metric"]["alertname"] for r in found}))
            self.alerts_seen |= set(self._firing)

    def sample(self, t: float) -> Sample:
        self._n += 1
        if self._n % 2 == 1:
            self._prometheus()
        stats = self.loadgen.stats(window_s=10.0)
        dep: dict[str, Any] = {}
        desired = None
        with contextlib.suppress(Exception):
            dep = self.stack.deployment()
            hpa = self.stack.hpa()
            desired = int(hpa["status"]["desiredReplicas"]) if hpa else None
        return Sample(
            t=t, offered_rps=float(self.sc.rate(min(t, self.sc.duration_s - 1e-6))),
            completed_rps=stats.completed_rps, p50_s=stats.p50_s, p95_s=stats.p95_s, p99_s=stats.p99_s,
            replicas_ready=int(dep.get("status", {}).get("readyReplicas") or 0),
            replicas_total=int(dep.get("spec", {}).get("replicas") or 0),
            replicas_desired=desired, queue_depth=self._queue, firing=self._firing,
            slow_share=self._slow_share, decision=self._decision, pod_rps=self._pod_rps,
            host_cpu_busy=self._cpu.busy())


def hpa_report(stack: ClusterStack) -> dict[str, Any]:
    """The real HPA's bounds and status, and its scale events as the controller recorded them."""
    hpa = stack.hpa() or {}
    events = stack.api.get(f"/api/v1/namespaces/{SERVING}/events")["items"]
    rescales = sorted((e for e in events if e.get("reason") == "SuccessfulRescale"
                       and e["involvedObject"].get("kind") == "HorizontalPodAutoscaler"),
                      key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    spec, status = hpa.get("spec", {}), hpa.get("status", {})
    return {"name": hpa.get("metadata", {}).get("name"), "min_replicas": spec.get("minReplicas"),
            "max_replicas": spec.get("maxReplicas"), "current_replicas": status.get("currentReplicas"),
            "desired_replicas": status.get("desiredReplicas"),
            "scale_events": [{"at": e.get("lastTimestamp") or e.get("eventTime"), "message": e.get("message"),
                              "count": e.get("count", 1)} for e in rescales]}


def summarise(stack: ClusterStack, s: DemoSettings, mode: str, sc: Scenario, timeline: Timeline,
              sampler: ClusterSampler, loadgen: Any, sink: NotificationSink, faults: dict[str, Any],
              elapsed: float) -> dict[str, Any]:
    records = loadgen.records()
    ok = [r.latency_s for r in records if r.ok]

    def pct(q: float) -> float | None:
        return percentile(ok, q) if ok else None

    within = sum(1 for v in ok if v <= s.slo_latency_threshold_s)
    by_phase: dict[str, list[int]] = {p.name: [0, 0] for p in story_phases()}
    for r in records:
        counts = by_phase[phase_at(r.t_send, s.duration_s).name]
        counts[0] += 1
        counts[1] += int(r.ok and r.latency_s <= s.slo_latency_threshold_s)
    status = json.loads(run_helm(stack.config, "status", RELEASE, "--namespace", RELEASE_NS, "-o", "json"))
    firing_now: set[str] = set()
    with contextlib.suppress(Exception):
        from tidescale.devstack.demo.summary import alerts_fired

        firing_now = set(alerts_fired(stack.alertmanager_url))
    summary: dict[str, Any] = {
        "on": "cluster", "autoscaling_mode": mode, "scenario": sc.name, "duration_s": round(elapsed, 1),
        "story": [{"phase": p.name, "from_s": round(p.start * s.duration_s)} for p in story_phases()],
        "kubernetes": {"server_version": stack.api.get("/version").get("gitVersion"), "nodes": NODES},
        "helm": {"release": {"name": status["name"], "namespace": status["namespace"],
                             "status": status["info"]["status"], "revision": status["version"]}},
        "hpa": {**hpa_report(stack), "replicas_seen": timeline.replicas_range(),
                # The HPA must never scale down while demand outruns the fleet (issue 43): each fall of its
                # desired replicas during the surge and the overload, expected empty.
                "desired_fell_under_load": {name: timeline.desired_falls(start, end)
                                            for name, start, end in phase_spans(s.duration_s)
                                            if name in LOADED_PHASES}},
        "latency_p50_s": pct(0.50), "latency_p95_s": pct(0.95), "latency_p99_s": pct(0.99),
        "requests": {"sent": len(records), "ok": len(ok), "errors": len(records) - len(ok),
                     "errors_by_status": error_breakdown(records)},
        # The headline: the share within the SLO while the load fits what maxReplicas can serve. The
        # overload phase offers more than that by design (it shows the maxed-out alert and the burn),
        # so it is reported apart rather than averaged into the headline.
        "requests_within_slo_within_capacity": share_within(
            [c for name, c in by_phase.items() if name != OVERLOAD_PHASE]),
        "overload_by_design": {"phase": OVERLOAD_PHASE,
                               "requests_within_slo": share_within([by_phase[OVERLOAD_PHASE]])},
        "requests_within_slo": round(within / len(records), 4) if records else None,
        "requests_within_slo_by_phase": {name: round(good / sent, 4) if sent else None
                                         for name, (sent, good) in by_phase.items()},
        # Whether the Service spread the autoscaled model's requests over the Ready pods, per phase: the
        # busiest pod's share against 1/Ready (keep-alive clients stay on the pods they first reached).
        "load_spread": {name: timeline.load_spread(start, end) for name, start, end in phase_spans(s.duration_s)},
        # What a replay of this run needs (`tidescale bench closed-loop`): the demo's settings, and the
        # autoscaled model's own figures per phase (the simulator serves that model alone).
        "settings": s.model_dump(mode="json"), "load_generator": {"max_in_flight": MAX_IN_FLIGHT},
        "autoscaled_model": {"name": AUTOSCALED_MODEL, "by_phase": autoscaled_by_phase(records, s)},
        "slo_latency_threshold_s": s.slo_latency_threshold_s,
        "alerts_fired": sorted(sampler.alerts_seen | firing_now | set(timeline.alerts_seen())),
        "notifications": sink.alert_names(),
        "faults_injected": faults,
    }
    try:
        summary["reviews_opened"] = reviews_opened(stack.service_url(RELEASE_NS, f"{RELEASE}-reviews"))
    except Exception as exc:
        summary["reviews_opened"], summary["reviews_error"] = [], f"{type(exc).__name__}: {exc}"
    summary["review_events"] = [{"deployment": e["deployment"], "message": e["message"]}
                                for e in deployment_events(stack, "ModelReviewOpened")]
    # The recommender's decision path: each change of the count it published, with why and the numbers.
    summary["recommendations"] = deployment_events(stack, "TidescaleRecommendation")
    return summary


def deployment_events(stack: ClusterStack, reason: str) -> list[dict[str, Any]]:
    """The Kubernetes Events of *reason* that tidescale posted on the serving Deployments (what
    `kubectl describe deployment` shows), oldest first."""
    items = stack.api.get(f"/api/v1/namespaces/{SERVING}/events").get("items", [])
    found = [e for e in items if e.get("reason") == reason and e.get("involvedObject", {}).get("kind") == "Deployment"]
    found.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [{"at": e.get("lastTimestamp") or e.get("eventTime"), "deployment": e["involvedObject"].get("name"),
             "count": e.get("count") or (e.get("series") or {}).get("count") or 1,
             "message": e.get("message", "")} for e in found]


def run_cluster_demo(s: DemoSettings, out: Path, mode: str = "keda") -> dict[str, Any]:
    from tidescale.devstack.fleet.loadgen import LoadGenerator

    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    if not console.is_terminal:
        console.width = 120  # logs and CI: the table's columns, not 80-column wrapping

    def say(text: str) -> None:
        console.print(f"[bold]demo[/] {text}")

    config = ClusterConfig(nodes=NODES)
    was_up = lifecycle.is_up(config)
    models = served_models(s)
    # The story, unless a scenario or trace is asked for (validated here, before anything starts).
    told = not plays_other_traffic(s)
    sc = story(s, overload_rate(s, models)) if told else build_scenario(s)
    timeline = Timeline()
    sink = NotificationSink(host=str(config.host_ip))
    with sigterm_as_interrupt():
        try:
            lifecycle.up(config, progress=lambda text: say(f"cluster: {text}"))
            api = KubeApi(config.admin_kubeconfig)
            stack = ClusterStack(config, api)
            sink.server.start()
            install(stack, s, mode, sink, out, say)
            url = stack.service_url(SERVING, DEPLOYMENT)
            say(f"traffic to the Triton Service at {url} for {s.duration_s:.0f} s; "
                f"export KUBECONFIG={config.admin_kubeconfig} to watch")
            loadgen = LoadGenerator(sc, lambda: [url], s.model_mix, seed=s.seed, max_in_flight=MAX_IN_FLIGHT).start()
            sampler = ClusterSampler(stack, sc, loadgen, slow_share_query(s))
            faults: dict[str, Any] = {}
            start = time.monotonic()
            live_ctx: Any = Live(console=console, refresh_per_second=2, transient=False) if (
                s.live and console.is_terminal) else contextlib.nullcontext()
            with live_ctx as live:
                while (t := time.monotonic() - start) < sc.duration_s and loadgen.running:
                    if s.inject_faults and "profile" not in faults and t >= PROFILE_AT * s.duration_s:
                        faults["profile"] = _attempt(lambda: inject_review_profile(stack), t)
                    if s.inject_faults and "xid" not in faults and t >= XID_AT * s.duration_s:
                        faults["xid"] = _attempt(lambda: inject_xid(stack), t)
                    sample = sampler.sample(t)
                    timeline.add(sample)
                    title = f"{sc.name}: {phase_at(t, s.duration_s).name}" if told else sc.name
                    show(console, live, sample, sc.duration_s, title)
                    time.sleep(max(0.0, 1.0 - (time.monotonic() - start - t)))
            loadgen.stop()
            elapsed = time.monotonic() - start
            time.sleep(10)  # one more scrape, evaluation and notification
            sampler.sample(elapsed)
            summary = summarise(stack, s, mode, sc, timeline, sampler, loadgen, sink, faults, elapsed)
            summary["plots"] = [p.name for p in write_plots(timeline, out, s.slo_latency_threshold_s)]
            (out / "timeline.json").write_text(json.dumps(timeline.to_rows(), indent=1))
            (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
            return summary
        finally:
            with contextlib.suppress(Exception):
                sink.server.stop()
            if not was_up:
                say("stopping the cluster …")
                lifecycle.down(config)


def _attempt(inject: Callable[[], dict[str, Any]], t: float) -> dict[str, Any]:
    """A fault that cannot be injected is reported in the summary, and the story goes on."""
    try:
        return {**inject(), "at_s": round(t, 1)}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "at_s": round(t, 1)}
