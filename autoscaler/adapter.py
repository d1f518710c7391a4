"""prometheus-adapter rules (the prometheus-community chart's `rules.custom` / `rules.external`).

Every rule sums counters before dividing (never an average of per-pod ratios, no `1+` in a
denominator), takes the namespace from the HPA's request (`<<.LabelMatchers>>`, never
hard-coded) and lets the HPA pick a model with its metric selector (`model: NAME`), which
the adapter turns into label matchers. Metric names come from the catalog or from the
recording rules in `tidescale.contracts.recorded`.
"""

from __future__ import annotations

from typing import Any

from tidescale.contracts import recorded as names
from tidescale.contracts.promql import metric, triton_sum, triton_sum_rate
from tidescale.contracts.yamlout import dump

RATE_WINDOW = "1m"

# Names the HPA uses (custom.metrics.k8s.io / external.metrics.k8s.io).
QUEUE_DEPTH = "triton_queue_depth"
INFLIGHT = "triton_inflight_requests"
QUEUE_TO_COMPUTE = "triton_queue_to_compute_ratio"
GPU_UTILIZATION = "triton_gpu_utilization"
P99_SECONDS = "triton_p99_latency_seconds"
DESIRED_REPLICAS = "tidescale_desired_replicas"

_POD_RESOURCES = {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
_NS_RESOURCES = {"overrides": {"namespace": {"resource": "namespace"}}}


def _series(metric: str) -> str:
    return f'{metric}{{namespace!="",pod!=""}}'


def _sum_rate(metric: str) -> str:
    """Triton's counter summed over the selected pods, each series once however often it is scraped."""
    return triton_sum_rate(f"{metric}{{<<.LabelMatchers>>}}", "<<.GroupBy>>", RATE_WINDOW)


def custom_rules() -> list[dict[str, Any]]:
    """Per-pod metrics (HPA `type: Pods`): the HPA averages them over the Deployment's pods."""
    pending = metric("nv_inference_pending_request_count")
    request_us = metric("nv_inference_request_duration_us")
    queue_us = metric("nv_inference_queue_duration_us")
    compute = [metric(f"nv_inference_compute_{s}_duration_us") for s in ("input", "infer", "output")]
    return [
        {   # Requests waiting in Triton's scheduler queue on this pod (all models unless selected).
            "seriesQuery": _series(pending),
            "resources": _POD_RESOURCES,
            "name": {"matches": f"^{pending}$", "as": QUEUE_DEPTH},
            "metricsQuery": triton_sum(f"{pending}{{<<.LabelMatchers>>}}", "<<.GroupBy>>"),
        },
        {   # Little's law: request-seconds completed per second = average requests in flight.
            "seriesQuery": _series(request_us),
            "resources": _POD_RESOURCES,
            "name": {"matches": f"^{request_us}$", "as": INFLIGHT},
            "metricsQuery": f"{_sum_rate(request_us)} / 1e6",
        },
        {   # Queue time over compute time: > 1 means requests wait longer than they run.
            "seriesQuery": _series(queue_us),
            "resources": _POD_RESOURCES,
            "name": {"matches": f"^{queue_us}$", "as": QUEUE_TO_COMPUTE},
            "metricsQuery": f"{_sum_rate(queue_us)} / (" + " + ".join(_sum_rate(c) for c in compute) + ")",
        },
        {   # DCGM utilisation joined to the Triton pod (recording rule; accepts exported_* labels).
            "seriesQuery": _series(names.POD_GPU_UTILIZATION),
            "resources": _POD_RESOURCES,
            "name": {"matches": f"^{names.POD_GPU_UTILIZATION}$", "as": GPU_UTILIZATION},
            "metricsQuery": f"max by (<<.GroupBy>>) ({names.POD_GPU_UTILIZATION}{{<<.LabelMatchers>>}})",
        },
    ]


def external_rules() -> list[dict[str, Any]]:
    """Per-model and per-Deployment values (HPA `type: External`, namespaced by the HPA)."""
    desired = metric("tidescale_desired_replicas")
    return [
        {   # P99 per model from tidescale's aggregatable histogram; select with `model: NAME`.
            "seriesQuery": f'{names.P99}{{namespace!="",model!=""}}',
            "resources": _NS_RESOURCES,
            "name": {"matches": f"^{names.P99}$", "as": P99_SECONDS},
            "metricsQuery": f'max by (<<.GroupBy>>) ({names.P99}{{<<.LabelMatchers>>,stage="request"}})',
        },
        {   # The recommender's answer; select with `deployment: NAME`. One series per Deployment.
            "seriesQuery": f'{desired}{{namespace!="",deployment!=""}}',
            "resources": _NS_RESOURCES,
            "name": {"matches": f"^{desired}$", "as": DESIRED_REPLICAS},
            "metricsQuery": f"max by (<<.GroupBy>>) ({desired}{{<<.LabelMatchers>>}})",
        },
    ]


def adapter_config() -> dict[str, Any]:
    """The adapter's own config file (`--config`): `rules` and `externalRules`."""
    return {"rules": custom_rules(), "externalRules": external_rules()}


def adapter_configmap(namespace: str, name: str = "prometheus-adapter") -> dict[str, Any]:
    """A ConfigMap holding `config.yaml` for a prometheus-adapter installed without the chart."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "tidescale"}},
            "data": {"config.yaml": dump(adapter_config())}}
