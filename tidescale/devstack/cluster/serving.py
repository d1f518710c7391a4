"""The serving side on the local cluster: a Triton Deployment of real tritonserver pods and the
simulated dcgm-exporter, written as a user's manifests would be.

The model repository (the dev fleet's Python-backend models that emulate GPU batch latency) ships
as a ConfigMap mounted at /models. Each Triton pod traces to the tidescale exporter's Service over
OTLP/HTTP and names itself in the span resource (``k8s.namespace.name``, ``k8s.pod.name``) from the
downward API, which is what puts ``namespace`` and ``pod`` on the latency series. Or, with
``trace_host_path``, it writes its trace file in its own subdirectory of that node directory, as
docs/install.md#tracing-to-a-file tells users to (the chart's ``exporter.traceFiles``).
"""

from __future__ import annotations

from typing import Any

from tidescale.devstack.fleet.model_repo import DEFAULT_MODELS, MODEL_PY, ModelSpec, render_config, with_load_seconds
from tidescale.devstack.fleet.triton import otlp_batch_flags

TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"
LABELS = {"app.kubernetes.io/name": "triton"}
# A scale-down that loses nothing (docs/install.md, "Triton pods that scale down cleanly"): the pod
# keeps serving for DRAIN_S after it is deleted, while kube-proxy takes it out of the Service; then
# SIGTERM, and Triton waits up to EXIT_TIMEOUT_S for the requests it still holds.
DRAIN_S = 5
EXIT_TIMEOUT_S = 30
# Triton writes its trace file every this many traces (docs/install.md#tracing-to-a-file).
TRACE_LOG_FREQUENCY = 100
TRACE_MOUNT = "/var/run/triton/traces"


def model_repository_configmap(name: str, namespace: str, specs: tuple[ModelSpec, ...]) -> dict[str, Any]:
    data = {}
    for spec in specs:
        data[f"{spec.name}.config.pbtxt"] = render_config(spec)
        data[f"{spec.name}.model.py"] = MODEL_PY
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": data}


def triton_deployment(namespace: str, *, replicas: int = 1, otlp_url: str | None = None,
                      trace_host_path: str | None = None, trace_rate: int = 10,
                      trace_log_frequency: int = TRACE_LOG_FREQUENCY,
                      specs: tuple[ModelSpec, ...] = DEFAULT_MODELS, load_seconds: float = 2.0,
                      name: str = "triton") -> list[dict[str, Any]]:
    """Traces over OTLP to *otlp_url*, or to a file in `<trace_host_path>/<namespace>_<pod>/`."""
    if (otlp_url is None) == (trace_host_path is None):
        raise ValueError("trace over OTLP (otlp_url) or to a file (trace_host_path): one of them")
    specs = with_load_seconds(specs, load_seconds)
    repo = f"{name}-models"
    items = [item for s in specs for item in (
        {"key": f"{s.name}.config.pbtxt", "path": f"{s.name}/config.pbtxt"},
        {"key": f"{s.name}.model.py", "path": f"{s.name}/1/model.py"})]
    args = [
        "--model-repository=/models", "--http-port=8000", "--grpc-port=8001", "--metrics-port=8002",
        "--log-verbose=0", "--trace-config=level=TIMESTAMPS", f"--trace-config=rate={trace_rate}",
        f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
    ]
    mounts: list[dict[str, Any]] = [{"name": "models", "mountPath": "/models", "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "models", "configMap": {"name": repo, "items": items}}]
    if trace_host_path is None:
        args += ["--trace-config=mode=opentelemetry", f"--trace-config=opentelemetry,url={otlp_url}",
                 "--trace-config=opentelemetry,resource=k8s.namespace.name=$(POD_NAMESPACE)",
                 "--trace-config=opentelemetry,resource=k8s.pod.name=$(POD_NAME)", *otlp_batch_flags()]
    else:
        args += ["--trace-config=mode=triton", f"--trace-config=triton,file={TRACE_MOUNT}/trace.json",
                 f"--trace-config=triton,log-frequency={trace_log_frequency}"]
        mounts.append({"name": "traces", "mountPath": TRACE_MOUNT, "subPathExpr": "$(POD_NAMESPACE)_$(POD_NAME)"})
        volumes.append({"name": "traces", "hostPath": {"path": trace_host_path, "type": "DirectoryOrCreate"}})
    container = {
        "name": "triton", "image": TRITON_IMAGE, "command": ["tritonserver"], "args": args,
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "ports": [{"name": "http", "containerPort": 8000}, {"name": "grpc", "containerPort": 8001},
                  {"name": "metrics", "containerPort": 8002}],
        # 3 s, not the default 1 s: on two cores shared by the whole cluster, a pod starting beside a
        # loaded Triton (a helm upgrade's new exporters) can starve the probe past a second; three such
        # probes take the only Triton pod out of its Service under load, the likely cause of one e2e
        # run's refused connections (2026-11-28: its status flipped as the load began).
        "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 1,
                           "timeoutSeconds": 3},
        "startupProbe": {"httpGet": {"path": "/v2/health/live", "port": "http"}, "periodSeconds": 1,
                         "failureThreshold": 120},
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "lifecycle": {"preStop": {"sleep": {"seconds": DRAIN_S}}},
        "volumeMounts": mounts,
    }
    return [
        model_repository_configmap(repo, namespace, specs),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace,
                                                                     "labels": LABELS},
         "spec": {"replicas": replicas, "selector": {"matchLabels": LABELS}, "template": {
             "metadata": {"labels": LABELS},
             "spec": {"terminationGracePeriodSeconds": DRAIN_S + EXIT_TIMEOUT_S + 5, "containers": [container],
                      "volumes": volumes}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
         "spec": {"selector": LABELS, "ports": [{"name": "http", "port": 8000, "targetPort": "http"},
                                                {"name": "metrics", "port": 8002, "targetPort": "metrics"}]}},
    ]
