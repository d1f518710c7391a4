"""The recommender's HTTP side: `/metrics`, the probes and each target's answer, and `serve`.

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
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from tidescale.autoscaler.manifests import DESIRED_PATH, DNS_LABEL
from tidescale.autoscaler.service import DesiredAnswer, RecommenderService
from tidescale.contracts.heartbeat import stalled
from tidescale.contracts.http import install_error_boundary

log = logging.getLogger(__name__)


def make_app(service: RecommenderService) -> FastAPI:
    """FastAPI app: `/metrics` (the service's collector only), `/healthz`, `/readyz` and each target's answer."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_as_collector(service))
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
            answer = service.answer(namespace, deployment)
        except KeyError:
            raise HTTPException(404, f"{namespace}/{deployment} is not one of this recommender's targets") from None
        if answer is None:  # KEDA counts it as an error; with none answering, the HPA holds
            raise HTTPException(503, f"no recommendation for {namespace}/{deployment} yet: no evaluation has had "
                                     "good data since this recommender started")
        return answer

    return app


def _as_collector(service: RecommenderService) -> Collector:
    class _C(Collector):
        def collect(self) -> Iterator[Metric]:
            return service.collect()

    return _C()


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
