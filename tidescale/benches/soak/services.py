"""The three services as the soak runs them, and the normal traffic each one gets.

Each service is its own process, started by its CLI as the chart starts it (`--port`, `--health-port`,
its token from the environment), with the limits its settings ship with: nothing about the server is
tuned for the bench. Its normal clients are what it meets in a cluster:

- exporter: Prometheus scraping `/metrics`, and Triton pods posting OTLP/JSON traces as Triton 2.51
  does (`bench ingest`'s Triton-shaped spans, 64 requests a body, fresh ids and times each post), with
  the exporter's token (the chart's Secret, 40 random characters);
- reviews: an Alertmanager pair posting webhook notifications (a steady set of 20 firing
  `TritonModelReviewRequired` alerts, five a post, re-sent as Alertmanager re-sends them), someone
  reading `GET /api/v1/reviews`, and Prometheus scraping `/metrics`; SQLite in the work directory;
- recommender: KEDA asking `GET /v1/desired/<namespace>/<deployment>` for each of two targets and
  Prometheus scraping `/metrics`; the recommender reads a fake Prometheus and fake Triton pods
  (`fakes.py`) with the values of a steady fleet.

Every normal client is a sequential agent with one keep-alive connection of its own, as Prometheus
keeps one per target and each Triton pod's exporter one to its collector.
"""

from __future__ import annotations

import json
import secrets
import string
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tidescale.benches.soak.attacks import Target
from tidescale.devstack.ports import LOOPBACK, free_ports
from tidescale.devstack.procs import ManagedProcess

SERVICES = ("exporter", "reviews", "recommender")
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.2,"
                     "*/*;q=0.1")
REQUESTS_PER_POST = 64
REVIEW_ALERTS = 20
ALERTS_PER_POST = 5
RECOMMENDER_TARGETS = ("triton", "ranker")
READY_TIMEOUT_S = 90.0

Body = Callable[[int], bytes]  # the n-th request's body


@dataclass(frozen=True)
class Agent:
    """One normal client: a request every interval on its own keep-alive connection."""

    name: str
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: Body | None = None

    @property
    def route(self) -> str:
        return f"{self.method} {self.path}"


@dataclass
class Started:
    """A running service: its process, what the attacks aim at, its probe port, its normal clients."""

    name: str
    proc: ManagedProcess
    target: Target
    health_port: int
    agents: list[Agent]
    limits: dict[str, float | int]
    helpers: list[ManagedProcess] = field(default_factory=list)

    def stop(self) -> None:
        for p in [self.proc, *self.helpers]:
            p.stop()


def chart_token() -> str:
    """A token as the chart makes one (`randAlphaNum 40`)."""
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(40))


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tidescale.cli", *args]


def _limits(settings: object, **more: float | int) -> dict[str, float | int]:
    names = ("max_connections", "header_timeout_s", "keep_alive_s", "max_header_bytes")
    return {**{n: getattr(settings, n) for n in names}, **more}


def _started(name: str, proc: ManagedProcess, health_port: int) -> ManagedProcess:
    proc.start()
    try:
        proc.wait_http(f"http://{LOOPBACK}:{health_port}/readyz", timeout=READY_TIMEOUT_S)
    except BaseException:
        proc.stop()
        raise
    return proc


# --- exporter ---------------------------------------------------------------------------------------

def trace_bodies(seed: int = 11) -> Body:
    """OTLP/JSON bodies shaped like Triton's posts, fresh ids and times each one."""
    from tidescale.benches.ingest import triton_request_spans
    from tidescale.benches.otlp_encode import encode_json
    from tidescale.exporters.otlp import Span

    rng = np.random.default_rng(seed)

    def body(_: int) -> bytes:
        t0 = datetime.now(UTC).timestamp()
        start = int(t0 * 1e9) - 5_000_000_000
        spans: list[Span] = []
        for i in range(REQUESTS_PER_POST):
            spans += triton_request_spans(rng, start + i * 70_000_000)
        return encode_json(spans)

    return body


def exporter(workdir: Path, pods: int = 4) -> Started:
    from tidescale.exporters.settings import ExporterSettings

    token = chart_token()
    port, health = free_ports(2)
    env = {"TIDESCALE_EXPORTER_TOKEN": token, "TIDESCALE_EXPORTER_TRACE_SAMPLE_RATE": "10"}
    proc = _started("exporter", ManagedProcess(
        "exporter", _cli("exporter", "serve", "--port", str(port), "--health-port", str(health)),
        workdir / "exporter.log", env=_child_env(env)), health)
    settings = ExporterSettings.model_construct()  # the defaults, not this environment's
    auth = {"Authorization": f"Bearer {token}"}
    bodies = trace_bodies()
    agents = [Agent("prometheus", "GET", "/metrics", {"Accept": PROMETHEUS_ACCEPT})]
    agents += [Agent(f"triton-pod-{i}", "POST", "/v1/traces", {**auth, "Content-Type": "application/json"}, bodies)
               for i in range(pods)]
    target = Target(LOOPBACK, port, token, (("POST", "/v1/traces"),), "/metrics", settings.max_body_bytes,
                    settings.header_timeout_s, settings.max_connections, small_body=bodies(0))
    return Started("exporter", proc, target, health, agents,
                   _limits(settings, max_body_bytes=settings.max_body_bytes))


# --- reviews ----------------------------------------------------------------------------------------

def webhook_bodies(started_at: str) -> Body:
    """Alertmanager's notifications of a steady set of firing review alerts, five a post in turn."""
    def alert(i: int) -> dict[str, object]:
        model, version = f"model-{i // 2:02d}", str(1 + i % 2)
        return {"status": "firing",
                "labels": {"alertname": "TritonModelReviewRequired", "severity": "info", "namespace": "ml",
                           "model": model, "version": version, "reason": "op_share_string", "op_class": "string"},
                "annotations": {"summary": f"{model} v{version} spends 30 % of its op time in string ops",
                                "value": "0.3"},
                "startsAt": started_at, "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus:9090/graph", "fingerprint": f"{i:016x}"}

    def body(n: int) -> bytes:
        first = (n * ALERTS_PER_POST) % REVIEW_ALERTS
        alerts = [alert((first + k) % REVIEW_ALERTS) for k in range(ALERTS_PER_POST)]
        return json.dumps({"version": "4", "status": "firing", "receiver": "model-reviews",
                           "groupKey": '{}/{alertname="TritonModelReviewRequired"}', "truncatedAlerts": 0,
                           "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                           "externalURL": "http://alertmanager:9093", "alerts": alerts}).encode()

    return body


def reviews(workdir: Path) -> Started:
    from tidescale.alerts.reviews.settings import ReviewsSettings

    token = chart_token()
    port, health = free_ports(2)
    database = f"sqlite:///{workdir / 'reviews.db'}"
    proc = _started("reviews", ManagedProcess(
        "reviews", _cli("reviews", "serve", "--port", str(port), "--health-port", str(health),
                        "--database", database),
        workdir / "reviews.log", env=_child_env({"TIDESCALE_REVIEWS_TOKEN": token})), health)
    settings = ReviewsSettings.model_construct()
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    bodies = webhook_bodies(datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"))
    agents = [Agent(f"alertmanager-{i}", "POST", "/api/v1/alertmanager", auth, bodies) for i in range(2)]
    agents += [Agent("reviews-ui", "GET", "/api/v1/reviews"),
               Agent("prometheus", "GET", "/metrics", {"Accept": PROMETHEUS_ACCEPT})]
    writes = (("POST", "/api/v1/alertmanager"), ("PATCH", "/api/v1/reviews/1"))
    target = Target(LOOPBACK, port, token, writes, "/api/v1/reviews", settings.max_body_bytes,
                    settings.header_timeout_s, settings.max_connections, small_body=bodies(0))
    return Started("reviews", proc, target, health, agents, _limits(settings, max_body_bytes=settings.max_body_bytes))


# --- recommender ------------------------------------------------------------------------------------

def recommender_config(prometheus_url: str) -> dict[str, object]:
    return {"recommender": {
        "prometheus_url": prometheus_url, "capacity_rps": 100.0,
        "targets": [{"deployment": d, "namespace": "ml", "model": "batcher", "min_replicas": 1, "max_replicas": 20}
                    for d in RECOMMENDER_TARGETS]}}


def recommender(workdir: Path) -> Started:
    import yaml

    from tidescale.autoscaler.manifests import DESIRED_PATH
    from tidescale.autoscaler.settings import RecommenderSettings

    fake_port, port, health = free_ports(3)
    fake = ManagedProcess("fake-prometheus", [sys.executable, "-m", "tidescale.benches.soak.fakes", str(fake_port)],
                          workdir / "fake-prometheus.log", env=_child_env({})).start()
    try:
        fake.wait_http(f"http://{LOOPBACK}:{fake_port}/metrics", timeout=READY_TIMEOUT_S)
        config = workdir / "recommender.yaml"
        config.write_text(yaml.safe_dump(recommender_config(f"http://{LOOPBACK}:{fake_port}")))
        proc = _started("recommender", ManagedProcess(
            "recommender", _cli("autoscale", "recommend", "--config", str(config), "--host", LOOPBACK,
                                "--port", str(port), "--health-port", str(health)),
            workdir / "recommender.log", env=_child_env({})), health)
    except BaseException:
        fake.stop()
        raise
    settings = RecommenderSettings.model_construct()
    desired = [f"{DESIRED_PATH}/ml/{d}" for d in RECOMMENDER_TARGETS]
    agents = [Agent(f"keda-{d}", "GET", path) for d, path in zip(RECOMMENDER_TARGETS, desired, strict=True)]
    agents.append(Agent("prometheus", "GET", "/metrics", {"Accept": PROMETHEUS_ACCEPT}))
    target = Target(LOOPBACK, port, None, (), desired[0], 0, settings.header_timeout_s, settings.max_connections)
    return Started("recommender", proc, target, health, agents, _limits(settings), helpers=[fake])


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    """This environment less any setting of the three services (the soak runs them as they ship), plus *extra*."""
    import os

    prefixes = ("TIDESCALE_EXPORTER_", "TIDESCALE_REVIEWS_", "TIDESCALE_RECOMMENDER_", "OTEL_EXPORTER_OTLP_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(prefixes)}, **extra}


STARTERS: dict[str, Callable[[Path], Started]] = {"exporter": exporter, "reviews": reviews,
                                                  "recommender": recommender}
