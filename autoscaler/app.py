"""The recommender's HTTP side: `/metrics` (`RecommenderCollector`), the probes, each target's answer, `serve`.

The probes are coroutines on the event loop that read one attribute per target, never the
evaluation's lock nor a worker thread: requests waiting on the lock (a slow Prometheus round) can
hold every worker thread, and a probe queued behind them restarted the pod. `/healthz` fails when
the evaluation or the fast path has not finished a round for `stall_after_s` (their heartbeats).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, HTTPException, Path
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel

from tidescale.autoscaler.decisions import DECISIONS, FAILSAFE_REASONS
from tidescale.autoscaler.manifests import DESIRED_PATH, DNS_LABEL
from tidescale.autoscaler.service import RecommenderService
from tidescale.contracts import catalog
from tidescale.contracts.heartbeat import stalled
from tidescale.contracts.http import install_error_boundary

log = logging.getLogger(__name__)


def make_app(service: RecommenderService) -> FastAPI:
    """FastAPI app: `/metrics` (the service's collector only), `/healthz`, `/readyz` and each target's answer."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RecommenderCollector(service))
    app = FastAPI(title="tidescale recommender")
    registry.register(install_error_boundary(app, "recommender", log))

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        held = {f"{ns}/{dep}": st.failsafe for (ns, dep), st in service.states.items() if st.failsafe}
        body: dict[str, Any] = {"status": "ok", "targets": len(service.states), "failsafe": held}
        stuck = stalled(service.heartbeats)
        if stuck:
            return JSONResponse({**body, "status": "failing", "detail": f"stalled: {', '.join(stuck)}"}, 503)
        return JSONResponse(body)

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Ready once every target has an answer: KEDA asks only Ready recommenders, so a restarted
        replica with no good data yet is left out of the max instead of making it an error. Read
        without the evaluation's lock (one attribute per target), so a slow round cannot stall it."""
        waiting = sorted(f"{ns}/{dep}" for (ns, dep), st in service.states.items() if st.published is None)
        if waiting:
            return JSONResponse({"status": "not ready", "detail": "no good evaluation yet for " + ", ".join(waiting)},
                                503)
        return JSONResponse({"status": "ready"})

    def name() -> Any:  # what a target's namespace and Deployment are (manifests.Target)
        return Path(min_length=1, max_length=63, pattern=DNS_LABEL.pattern)

    @app.get(DESIRED_PATH + "/{namespace}/{deployment}", response_model=DesiredAnswer)
    def desired(namespace: str = name(), deployment: str = name()) -> DesiredAnswer:
        try:
            answer = answer_for(service, namespace, deployment)
        except KeyError:
            raise HTTPException(404, f"{namespace}/{deployment} is not one of this recommender's targets") from None
        if answer is None:  # KEDA counts it as an error; with none answering, the HPA holds
            raise HTTPException(503, f"no recommendation for {namespace}/{deployment} yet: no evaluation has had "
                                     "good data since this recommender started")
        return answer

    return app


class DesiredAnswer(BaseModel):
    """One target's answer, what KEDA's metrics-api trigger reads (`desired_replicas`)."""

    namespace: str
    deployment: str
    desired_replicas: int
    decision: str
    failsafe: str | None  # the reason the last good answer is held, if it is
    last_success: float | None  # Unix time of the last evaluation with good data


def answer_for(service: RecommenderService, namespace: str, deployment: str) -> DesiredAnswer | None:
    """What `/metrics` exports for one target, for KEDA's metrics-api trigger; None before the
    first good evaluation (KeyError: not a target)."""
    with service.snapshot() as states:
        st = states[(namespace, deployment)]
        st.hpa_reads.observe(service.clock())  # KEDA asks at the HPA's sync: when it reads (`hpaclock`)
        if st.published is None:
            return None
        return DesiredAnswer(namespace=namespace, deployment=deployment, desired_replicas=st.published,
                             decision=st.decision, failsafe=st.failsafe, last_success=st.last_success)


class RecommenderCollector(Collector):
    """Every target's state as the recommender's own metric families (client_python's custom collector)."""

    def __init__(self, service: RecommenderService) -> None:
        self.service = service

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        def family(name: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            fam = catalog.get(name)
            return GaugeMetricFamily(fam.name, fam.help, labels=["namespace", "deployment", *extra])

        def counter(name: str) -> CounterMetricFamily:
            fam = catalog.get(name)
            return CounterMetricFamily(fam.name.removesuffix("_total"), fam.help, labels=["namespace", "deployment"])

        desired = family("tidescale_desired_replicas")
        failsafe = family("tidescale_recommender_failsafe", ("reason",))
        capacity = family("tidescale_recommender_capacity_rps")
        success = family("tidescale_recommender_last_success_timestamp_seconds")
        cold = family("tidescale_recommender_cold_start_seconds", ("source",))
        decided = family("tidescale_recommender_decision", ("reason",))
        fast_rate = family("tidescale_recommender_fast_path_arrival_rps")
        fast_pods = family("tidescale_recommender_fast_path_pods", ("state",))
        failed_writes = counter("tidescale_recommender_scale_write_failures_total")
        disagreements = counter("tidescale_recommender_replica_disagreements_total")
        direct = self.service.scaler is not None
        with self.service.snapshot() as states:
            for (ns, dep), st in states.items():
                if st.published is not None:
                    desired.add_metric([ns, dep], float(st.published))
                for reason in FAILSAFE_REASONS:
                    failsafe.add_metric([ns, dep, reason], 1.0 if st.failsafe == reason else 0.0)
                capacity.add_metric([ns, dep], st.recommender.capacity_rps)
                cold.add_metric([ns, dep, st.cold_start_source], st.recommender.config.cold_start_s)
                for reason in DECISIONS:
                    decided.add_metric([ns, dep, reason], 1.0 if st.decision == reason else 0.0)
                if st.last_success is not None:
                    success.add_metric([ns, dep], st.last_success)
                if direct:
                    failed_writes.add_metric([ns, dep], float(st.scale_write_failures))
                disagreements.add_metric([ns, dep], float(st.replica_disagreements))
                reading = st.fast_reading
                if reading is not None:
                    if reading.arrival_rps is not None:
                        fast_rate.add_metric([ns, dep], reading.arrival_rps)
                    fast_pods.add_metric([ns, dep, "answered"], float(reading.pods - len(reading.missing)))
                    fast_pods.add_metric([ns, dep, "missing"], float(len(reading.missing)))
        yield from (desired, failsafe, capacity, success, cold, decided, fast_rate, fast_pods, disagreements)
        if direct:
            yield failed_writes


def serve(service: RecommenderService) -> None:
    """Evaluate in a thread of its own and serve the app until a signal stops it, within the bounds of
    the service's settings (contracts/serving.py)."""
    from tidescale.contracts.serving import serve as serve_app

    stop = threading.Event()
    worker = threading.Thread(target=service.run_loop, args=(stop,), daemon=True, name="recommender")
    worker.start()
    try:
        serve_app(make_app(service), service.settings)
    finally:
        stop.set()
        worker.join(timeout=5)
        service.close()
