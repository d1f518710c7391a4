"""What the recommender reads during the soak, steady: a Prometheus API and Triton pods' `/metrics`.

One aiohttp process (its own, so that its CPU and its event loop are not the load generator's)
answers `GET /api/v1/query` by the shape of the query, the way the recommender's unit tests fake
Prometheus (`FakeProm`), with the values of a steady fleet: `PODS` ready replicas of each target
serving `RPS` requests a second between them, an empty queue, a P99 well within the SLO, the HPA
agreeing. The pods it names all have this server's address as their `instance`, and its `/metrics`
is the exposition a real Triton 2.51 wrote (`fixtures/triton/real-2.51/metrics_during_load.txt`)
with the `batcher` model's completion counter growing at `RPS / PODS` a second and its queue empty:
the fast path reads the same steady load the slow path does, so nothing panics and nothing scales.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any

from aiohttp import web

from tidescale.devstack.tools import FIXTURES

EXPOSITION = FIXTURES / "triton" / "real-2.51" / "metrics_during_load.txt"
MODEL = "batcher"
PODS = 3
RPS = 240.0
P99_S = 0.2
SUCCESS_LINE = re.compile(r'^nv_inference_request_success\{model="batcher",version="1"\} .*$', re.M)
PENDING_LINE = re.compile(r'^nv_inference_pending_request_count\{model="batcher",version="1"\} .*$', re.M)
POD_MATCHER = re.compile(r'pod=~"([a-z0-9]+)-')

# (substring of the query, value): the first that the query contains answers it; None: no series.
VALUES: list[tuple[str, float | None]] = [
    ("nv_model_load_duration_secs", None),
    ("tidescale_request_duration_seconds:p99", P99_S),
    ("time() - max(timestamp(", 5.0),
    ("horizontalpodautoscaler_status_current", float(PODS)),
    ("horizontalpodautoscaler_status_desired", float(PODS)),
    ("kube_deployment_spec_replicas", float(PODS)),
    ("kube_deployment_status_replicas_ready", float(PODS)),
    ("nv_inference_request_failure", 0.0),
    ("rate(", RPS),
    ("nv_inference_pending_request_count", 0.0),
]


def pods_of(query: str) -> list[str]:
    """The fake pods of the Deployment a query's pod matcher names."""
    found = POD_MATCHER.search(query)
    deployment = found.group(1) if found else "triton"
    return [f"{deployment}-5f7d9c8b4-{i:05d}" for i in range(PODS)]


def answer(query: str, address: str, started: float, now: float) -> dict[str, Any]:
    """The `data` of Prometheus' answer to an instant *query* (a vector)."""
    if query.startswith("group by (pod, instance)"):
        rows = [({"pod": pod, "instance": address}, 1.0) for pod in pods_of(query)]
    elif query.startswith("max by (namespace, pod) (kube_pod_start_time"):
        rows = [({"namespace": "ml", "pod": pod}, started - 3600.0) for pod in pods_of(query)]
    elif query.startswith("max by (namespace, pod) (kube_pod_status_ready_time"):
        rows = [({"namespace": "ml", "pod": pod}, started - 3600.0 + 45.0) for pod in pods_of(query)]
    else:
        value = next((v for key, v in VALUES if key in query), None)
        rows = [] if value is None else [({}, value)]
    return {"resultType": "vector", "result": [{"metric": m, "value": [now, repr(v)]} for m, v in rows]}


def exposition(template: str, started: float, now: float) -> str:
    """Triton's exposition with the model's completions grown steadily since *started*, its queue empty."""
    count = int(RPS / PODS * (now - started))
    text = SUCCESS_LINE.sub(f'nv_inference_request_success{{model="batcher",version="1"}} {count}', template)
    return PENDING_LINE.sub('nv_inference_pending_request_count{model="batcher",version="1"} 0', text)


def app(port: int) -> web.Application:
    started = time.time()
    template = EXPOSITION.read_text()
    address = f"127.0.0.1:{port}"
    queries = {"count": 0}

    async def query(request: web.Request) -> web.Response:
        queries["count"] += 1
        expr = request.query.get("query", "")
        data = answer(expr, address, started, time.time())
        return web.json_response({"status": "success", "data": data})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=exposition(template, started, time.time()), content_type="text/plain")

    application = web.Application()
    application.router.add_get("/api/v1/query", query)
    application.router.add_post("/api/v1/query", query)
    application.router.add_get("/metrics", metrics)
    return application


def serve(port: int) -> None:
    web.run_app(app(port), host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":  # pragma: no cover
    serve(int(sys.argv[1]))
