"""prometheus-adapter rules (the prometheus-community chart's `rules.custom` / `rules.external`).

Every rule reads a recorded series (the ratios' 1m rates are recorded per pod and model, so a
dashboard shows what the HPA is served) or a raw gauge, sums before dividing (never an average of
per-pod ratios, no `1+` in a denominator), takes the namespace from the HPA's request
(`<<.LabelMatchers>>`, never hard-coded) and lets the HPA pick a model with its metric selector
(`model: NAME`), which the adapter turns into label matchers. Metric names come from the catalog
or from the recording rules in `tidescale.contracts.recorded`.
"""

from __future__ import annotations

from typing import Any

from tidescale.contracts import recorded as names
from tidescale.contracts.promql import metric, triton_sum
from tidescale.contracts.yamlout import dump

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


def _summed(recorded: str) -> str:
    """A recorded per-pod series summed over the selected pods (and models, unless one is selected)."""
    return f"sum by (<<.GroupBy>>) ({recorded}{{<<.LabelMatchers>>}})"


def custom_rules() -> list[dict[str, Any]]:
    """Per-pod metrics (HPA `type: Pods`): the HPA averages them over the Deployment's pods."""
    pending = metric("nv_inference_pending_request_count")
    return [
        {   # Requests waiting in Triton's scheduler queue on this pod (all models unless selected).
            "seriesQuery": _series(pending),
            "resources": _POD_RESOURCES,
            "name": {"matches": f"^{pending}$", "as": QUEUE_DEPTH},
            "metricsQuery": triton_sum(f"{pending}{{<<.LabelMatchers>>}}", "<<.GroupBy>>"),
        },
        {   # Little's law: request-seconds completed per second = average requests in flight.
            "seriesQuery": _series(names.MODEL_POD_REQUEST_US_RATE1M),
            "resources": _POD_RESOURCES,
            "name": {"matches": f"^{names.MODEL_POD_REQUEST_US_RATE1M}$", "as": INFLIGHT},
            "metricsQuery": f"{_summed(names.MODEL_POD_REQUEST_US_RATE1M)} / 1e6",
        },
        {   # Queue time over compute time: > 1 means requests wait longer than they run.
            "seriesQuery": _series(names.MODEL_POD_QUEUE_US_RATE1M),
            "resources": _POD_RESOURCES,
            "name": {"matches": f"^{names.MODEL_POD_QUEUE_US_RATE1M}$", "as": QUEUE_TO_COMPUTE},
            "metricsQuery": (f"{_summed(names.MODEL_POD_QUEUE_US_RATE1M)} / "
                             f"{_summed(names.MODEL_POD_COMPUTE_US_RATE1M)}"),
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
