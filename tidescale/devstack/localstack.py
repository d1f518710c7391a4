"""The whole local stack in one object: the fleet of real Triton replicas with simulated GPUs and
kube-state-metrics, the tidescale exporter and review service, a real Prometheus loading the
project's rules, a real Alertmanager routing to local receivers, and the live autoscaler.

`tidescale demo` drives it; integration tests start it once per session. Everything it starts is
stopped by `stop()` (in parallel), also when start-up fails half-way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from tidescale.contracts.slo import SLO_LATENCY_THRESHOLD_S
from tidescale.devstack.fleet.httpserve import LoopbackHttpServer, json_response, text_response
from tidescale.devstack.fleet.model_repo import DEFAULT_MODELS, ModelSpec, sustainable_rps, with_load_seconds
from tidescale.devstack.fleet.periodic import Periodic
from tidescale.devstack.fleet.stack import FleetStack
from tidescale.devstack.fleet.triton import TraceSettings
from tidescale.devstack.ports import LOOPBACK, free_port
from tidescale.devstack.procs import ManagedProcess, stop_all
from tidescale.devstack.promstack import AlertmanagerServer, PrometheusServer, ScrapeTarget
from tidescale.devstack.rulecheck import filled_rule_files


@dataclass
class StackOptions:
    """What to start and how big; defaults fit a 2-core machine."""

    replicas: int = 1
    min_replicas: int = 1
    max_replicas: int = 4
    cold_start_s: float = 0.0
    # >1 slows every model's service curve: the demo's replicas then saturate at rates the
    # 2-core machine can generate, so scaling shows at tens of req/s instead of hundreds.
    curve_scale: float = 1.0
    models: Sequence[ModelSpec] = DEFAULT_MODELS
    namespace: str = "tidescale-demo"
    deployment: str = "triton"
    autoscale: bool = True
    autoscale_model: str = "resnet50"
    slo_latency_threshold_s: float = SLO_LATENCY_THRESHOLD_S
    capacity_rps: float | None = None  # per replica at the SLO; default from the model's curve
    trace_rate: int = 1
    scrape_interval: str = "1s"
    # The local stack scrapes every second and compresses a day into minutes: short rate windows
    # keep the recommender's view of the arrival rate as fresh as 1m/30s windows are on a cluster.
    autoscale_rate_window_s: float = 15.0
    autoscale_fast_window_s: float = 5.0
    rule_files: Sequence[Path] | None = None  # default: the chart's files/rules/*.yaml, at the stack's pace
    seed: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)


class NotificationSink:
    """Stands in for the pager and ticket gateways: records what Alertmanager sends them."""

    def __init__(self, host: str = LOOPBACK) -> None:
        # On the local cluster: the host's cluster address, which pods (Alertmanager) reach.
        self.server = LoopbackHttpServer("notification-sink", host=host)
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        for receiver in ("pager", "tickets"):
            self.server.post_routes[f"/{receiver}"] = self._handler(receiver)

    def _handler(self, receiver: str) -> Callable[[dict[str, str], bytes], tuple[int, str, bytes]]:
        def handle(_headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
            try:
                payload = json.loads(body)
            except ValueError:
                return json_response(400, {"detail": "body is not JSON"})
            with self._lock:
                self.received.append({"receiver": receiver, "payload": payload})
            return json_response(200, {"status": "ok"})

        return handle

    def url(self, receiver: str) -> str:
        return f"{self.server.url}/{receiver}"

    def alert_names(self) -> dict[str, list[str]]:
        out: dict[str, set[str]] = {}
        with self._lock:
            for item in self.received:
                for alert in item["payload"].get("alerts", []):
                    out.setdefault(item["receiver"], set()).add(alert.get("labels", {}).get("alertname", "?"))
        return {k: sorted(v) for k, v in out.items()}


class MetricsEndpoint:
    """Serves a prometheus_client registry on loopback (for in-process components like the autoscaler)."""

    def __init__(self, name: str, collector: Any) -> None:
        from prometheus_client import CollectorRegistry, generate_latest

        self.registry = CollectorRegistry()
        self.registry.register(collector)
        self.server = LoopbackHttpServer(name)
        self.server.get_routes["/metrics"] = lambda: text_response(generate_latest(self.registry).decode())

    @property
    def address(self) -> str:
        return self.server.address


class LocalStack:
    """Start, observe and stop the local stack."""

    def __init__(self, workdir: Path, options: StackOptions | None = None) -> None:
        self.workdir = workdir.resolve()
        self.opts = options or StackOptions()
        self.exporter_token = secrets.token_urlsafe(24)
        self.reviews_token = secrets.token_urlsafe(24)
        self.exporter_port = free_port()
        self.reviews_port = free_port()
        self.sink = NotificationSink()
        self.fleet_stack: FleetStack | None = None
        self.exporter: ManagedProcess | None = None
        self.reviews: ManagedProcess | None = None
        self.prometheus: PrometheusServer | None = None
        self.alertmanager: AlertmanagerServer | None = None
        self.autoscaler: Any = None
        self.autoscaler_metrics: MetricsEndpoint | None = None
        self._syncer: Periodic | None = None
        self._last_targets: tuple[Any, ...] = ()

    # --- addresses --------------------------------------------------------------------------------
    @property
    def exporter_url(self) -> str:
        return f"http://{LOOPBACK}:{self.exporter_port}"

    @property
    def reviews_url(self) -> str:
        return f"http://{LOOPBACK}:{self.reviews_port}"

    @property
    def targets_file(self) -> Path:
        return self.workdir / "exporter-targets.json"

    @property
    def fleet(self) -> Any:
        assert self.fleet_stack is not None
        return self.fleet_stack.fleet

    # --- start ------------------------------------------------------------------------------------
    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.opts.extra_env)
        env["TIDESCALE_EXPORTER_TOKEN"] = self.exporter_token
        env["TIDESCALE_REVIEWS_TOKEN"] = self.reviews_token
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _tidescale(self, name: str, *args: str) -> ManagedProcess:
        argv = [sys.executable, "-m", "tidescale.cli", *args]
        return ManagedProcess(name, argv, self.workdir / "logs" / f"{name}.log", env=self._child_env()).start()

    def _alertmanager_config(self) -> Path:
        from tidescale.alerts.config import AlertmanagerRouting, default_config
        from tidescale.alerts.render import alertmanager_yaml

        token_file = self.workdir / "secrets" / "reviews-token"
        token_file.parent.mkdir(parents=True, exist_ok=True)
        token_file.write_text(self.reviews_token)
        token_file.chmod(0o600)
        routing = AlertmanagerRouting(
            pager_url=self.sink.url("pager"), tickets_url=self.sink.url("tickets"),
            reviews_url=f"{self.reviews_url}/api/v1/alertmanager", reviews_token_file=str(token_file),
            # Local receivers answer at once: short group timers so a demo run sees its notifications.
            group_wait="2s", group_interval="10s",
        )
        cfg = default_config().model_copy(update={"alertmanager": routing})
        path = self.workdir / "alertmanager.yaml"
        path.write_text(alertmanager_yaml(cfg))
        return path

    def _rule_files(self) -> list[Path]:
        """The chart's rule files as the chart fills them, with every group evaluated at the stack's own
        pace: a run of a minute sees an alert that reads a recorded series (GPUXidErrors) within seconds,
        not two 30 s rounds."""
        if self.opts.rule_files is not None:
            return list(self.opts.rule_files)
        out = filled_rule_files(self.workdir / "rules")
        for path in out:
            doc = yaml.safe_load(path.read_text())
            for group in doc.get("groups", []):
                group["interval"] = self.opts.scrape_interval
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return out

    def start(self) -> LocalStack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        o = self.opts
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.sink.server.start()
        self._write_exporter_targets([])
        self.exporter = self._tidescale(
            "exporter", "exporter", "serve", "--port", str(self.exporter_port),
            "--targets-file", str(self.targets_file), "--trace-sample-rate", str(o.trace_rate),
        )
        self.reviews = self._tidescale(
            "reviews", "reviews", "serve", "--port", str(self.reviews_port),
            "--database", f"sqlite:///{self.workdir / 'reviews.db'}", "--exporter-url", self.exporter_url,
        )
        self.alertmanager = AlertmanagerServer(self.workdir / "alertmanager", self._alertmanager_config())
        self.alertmanager.start()
        trace = TraceSettings(mode="opentelemetry", rate=o.trace_rate, url=f"{self.exporter_url}/v1/traces",
                              headers=f"Authorization=Bearer {self.exporter_token}")
        self.fleet_stack = FleetStack(
            self.workdir / "fleet", self.models(), replicas=o.replicas,
            namespace=o.namespace, deployment=o.deployment, trace=trace, gpu_poll_interval=0.5, seed=o.seed,
        )
        self.fleet_stack.start()
        self.exporter.wait_http(f"{self.exporter_url}/healthz", timeout=60)
        self.reviews.wait_http(f"{self.reviews_url}/healthz", timeout=60)
        self.prometheus = PrometheusServer(
            self.workdir / "prometheus", self.scrape_targets(), rule_files=self._rule_files(),
            alertmanager_url=self.alertmanager.url, scrape_interval=o.scrape_interval,
            evaluation_interval=o.scrape_interval,
        )
        self.prometheus.start()
        if o.autoscale:
            self._start_autoscaler()
            assert self.prometheus is not None
            self.prometheus.set_targets(self.scrape_targets())
        self._syncer = Periodic("stack-target-sync", 1.0, self.sync_targets)
        self._syncer.start()

    def models(self) -> tuple[ModelSpec, ...]:
        """The models as served: cold start and curve scale applied."""
        specs = with_load_seconds(tuple(self.opts.models), self.opts.cold_start_s)
        if self.opts.curve_scale == 1.0:
            return specs
        return tuple(dataclasses.replace(m, curve=m.curve.scaled(self.opts.curve_scale)) for m in specs)

    def _capacity_rps(self) -> float:
        if self.opts.capacity_rps is not None:
            return self.opts.capacity_rps
        models = self.models()
        return sustainable_rps(next((m for m in models if m.name == self.opts.autoscale_model), models[0]))

    def _start_autoscaler(self) -> None:
        from tidescale.autoscaler.app import RecommenderCollector
        from tidescale.autoscaler.settings import RecommenderTuning
        from tidescale.devstack.live_autoscaler import LiveAutoscaler

        o = self.opts
        assert self.prometheus is not None and self.fleet_stack is not None
        fleet = self.fleet_stack.fleet
        self.autoscaler = LiveAutoscaler(
            self.prometheus.url, fleet.scale_to, lambda: fleet.spec_replicas, lambda: len(fleet.ready_replicas()),
            deployment=o.deployment, namespace=o.namespace, model=o.autoscale_model,
            min_replicas=o.min_replicas, max_replicas=o.max_replicas, capacity_rps=self._capacity_rps(),
            slo_latency_threshold_s=o.slo_latency_threshold_s, cold_start_s=max(o.cold_start_s, 1.0),
            tuning=RecommenderTuning(rate_window_s=o.autoscale_rate_window_s, fast_window_s=o.autoscale_fast_window_s),
        )
        self.autoscaler_metrics = MetricsEndpoint("recommender", RecommenderCollector(self.autoscaler.service))
        self.autoscaler_metrics.server.start()
        self.autoscaler.start()

    # --- targets ----------------------------------------------------------------------------------
    def scrape_targets(self) -> list[ScrapeTarget]:
        assert self.fleet_stack is not None
        st = self.fleet_stack.targets()
        out = [ScrapeTarget("triton", a, labels) for a, labels in st.triton]
        out += [ScrapeTarget("dcgm-exporter", a, labels) for a, labels in st.dcgm]
        out += [ScrapeTarget("kube-state-metrics", a, labels) for a, labels in st.kube_state_metrics]
        ns = {"namespace": "tidescale"}
        out.append(ScrapeTarget("tidescale-exporter", f"{LOOPBACK}:{self.exporter_port}",
                                {**ns, "pod": "tidescale-exporter-0"}))
        out.append(ScrapeTarget("tidescale-reviews", f"{LOOPBACK}:{self.reviews_port}",
                                {**ns, "pod": "tidescale-reviews-0"}))
        if self.autoscaler_metrics is not None:
            out.append(ScrapeTarget("tidescale-recommender", self.autoscaler_metrics.address,
                                    {**ns, "pod": "tidescale-recommender-0"}))
        return out

    def _write_exporter_targets(self, replicas: list[Any]) -> None:
        # Prometheus file_sd format: the exporter polls these HTTP endpoints' /v2/models/stats.
        items = [{"targets": [r.http_url.split("://", 1)[1]],
                  "labels": {"namespace": r.labels["namespace"], "pod": r.labels["pod"]}} for r in replicas]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(items, indent=1))
        os.replace(tmp, self.targets_file)

    def sync_targets(self) -> None:
        """Follow the fleet: Prometheus file_sd, the exporter's targets, the HPA status for kube-state-metrics."""
        if self.fleet_stack is None or self.prometheus is None:
            return
        try:
            self._sync_targets()
        except Exception as exc:  # keep syncing; one failed round is retried a second later
            print(f"[localstack] target sync failed: {type(exc).__name__}: {exc}", file=sys.stderr)

    def _sync_targets(self) -> None:
        assert self.fleet_stack is not None and self.prometheus is not None
        ready = self.fleet_stack.fleet.ready_replicas()
        pods = sorted(r.labels["pod"] for r in self.fleet_stack.fleet.replicas)
        key = (*pods, "|", *sorted(r.labels["pod"] for r in ready))
        if key != self._last_targets:
            self._last_targets = key
            self.prometheus.set_targets(self.scrape_targets())
            self._write_exporter_targets(ready)
        if self.autoscaler is not None:
            s = self.autoscaler.status()
            self.fleet_stack.kube.set_hpa(self.opts.deployment, s.min_replicas, s.max_replicas,
                                          s.current_replicas, s.desired_replicas)

    # --- observe ----------------------------------------------------------------------------------
    def post_profile(self, body: bytes, *, model: str, version: str, filename: str, content_type: str) -> Any:
        import httpx

        r = httpx.post(f"{self.exporter_url}/v1/profiles", params={"model": model, "version": version},
                       headers={"Authorization": f"Bearer {self.exporter_token}", "content-type": content_type,
                                "x-filename": filename},
                       content=body, timeout=30)
        r.raise_for_status()
        return r.json()

    # --- stop -------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop everything that was started, servers in parallel."""
        if self._syncer is not None:
            self._syncer.stop()
        if self.autoscaler is not None:
            with contextlib.suppress(Exception):
                self.autoscaler.stop()
        procs = [p for p in (self.exporter, self.reviews) if p is not None]
        procs += [s.proc for s in (self.prometheus, self.alertmanager) if s is not None and s.proc is not None]
        threads = []
        if self.fleet_stack is not None:
            threads.append(threading.Thread(target=self.fleet_stack.stop, daemon=True))
        for t in threads:
            t.start()
        stop_all(procs)
        for t in threads:
            t.join(60)
        for server in (self.sink.server, self.autoscaler_metrics.server if self.autoscaler_metrics else None):
            if server is not None:
                with contextlib.suppress(Exception):
                    server.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

