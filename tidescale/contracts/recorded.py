"""Names of every recording rule tidescale produces (`level:metric:operation`).

Dashboards, the autoscaler and the alerts read these constants instead of spelling the
strings, so a rename is one edit here plus `tidescale generate`. Keep them stable: they
are an interface. `level` lists the labels a series keeps (besides `stage`, `le`,
`op_class` where noted), `metric` the source family, `operation` what was done to it.
"""

from __future__ import annotations

from typing import Final

# Burn-rate windows (multi-window, multi-burn-rate alerts, Google SRE workbook ch. 5).
WINDOWS: Final = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")


def _windowed(prefix: str) -> dict[str, str]:
    return {w: f"{prefix}{w}" for w in WINDOWS}


# --- Requests per model and per pod -------------------------------------------------------------
"""Request and error rates from Triton's always-on counters, summed over instances and pods."""
REQUEST_SUCCESS_RATE5M: Final = "namespace_model:nv_inference_request_success:rate5m"
REQUEST_FAILURE_RATE5M: Final = "namespace_model:nv_inference_request_failure:rate5m"
POD_REQUEST_SUCCESS_RATE5M: Final = "namespace_model_pod:nv_inference_request_success:rate5m"
POD_REQUEST_FAILURE_RATE5M: Final = "namespace_model_pod:nv_inference_request_failure:rate5m"
# Per model version: which version serves the traffic during a rollout.
VERSION_REQUEST_SUCCESS_RATE5M: Final = "namespace_model_version:nv_inference_request_success:rate5m"
# failure / (success + failure) over each window: the error-budget burn-rate inputs.
ERROR_RATIO: Final[dict[str, str]] = _windowed("namespace_model:nv_inference_request:error_ratio_rate")
ERROR_RATIO_RATE5M: Final = ERROR_RATIO["5m"]
# Requests per second (successes and failures) per model, over the burn alerts' short windows:
# their low-traffic guard.
REQUEST_RATE: Final[dict[str, str]] = {w: f"namespace_model:nv_inference_request:rate{w}"
                                       for w in ("5m", "30m", "2h", "6h")}

# --- Batching -------------------------------------------------------------------------------------
"""Inferences per execution (a batch of n counts n): 1.0 means the dynamic batcher never batched."""
INFERENCES_PER_EXEC_RATE5M: Final = "namespace_model:nv_inference_count_per_exec:ratio_rate5m"
POD_INFERENCES_PER_EXEC_RATE5M: Final = "namespace_model_pod:nv_inference_count_per_exec:ratio_rate5m"

# --- Average stage latency from Triton's cumulative µs counters ------------------------------------
"""Seconds per request by `stage` (request, queue, compute_input, compute_infer, compute_output):
sum the duration counters over pods first, then divide by the summed request count (never an
average of per-pod ratios, and no `1+` in the denominator)."""
STAGE_AVG_SECONDS_RATE5M: Final = "namespace_model_stage:nv_inference_duration_seconds:avg_rate5m"
QUEUE_TO_COMPUTE_RATIO_RATE5M: Final = "namespace_model:nv_inference_queue_to_compute:ratio_rate5m"

# --- Percentiles and SLO from tidescale's aggregatable histogram -----------------------------------
"""The exporter's bucket rate over 5m with the pod summed away (labels deployment, model, version,
stage and `le` kept): recorded once, so that every percentile below reads it instead of taking
`rate()` over each pod's buckets again (at 1,000 pods, six such passes took the group past its
interval; docs/benchmarks/cardinality.md)."""
BUCKET_RATE5M: Final = "namespace_deployment_model_version:tidescale_request_duration_seconds_bucket:rate5m"
"""P50/P95/P99 per model over 5m from `tidescale_request_duration_seconds` (label `stage` kept)."""
P50: Final = "namespace_model:tidescale_request_duration_seconds:p50"
P95: Final = "namespace_model:tidescale_request_duration_seconds:p95"
P99: Final = "namespace_model:tidescale_request_duration_seconds:p99"
# Triton 2.65+ with per-model buckets (`tidescale exporter model-metrics`): the server's own P99 of
# the time to the first response, in seconds; absent on older servers. A cross-check of P99 above.
# P99 per Deployment, from the `deployment` the exporter attributes each span to (its sending pod's).
DEPLOYMENT_P99: Final = "namespace_deployment:tidescale_request_duration_seconds:p99"
# P99 of one model on one Deployment's pods: what the recommender holds each target to.
TARGET_P99: Final = "namespace_deployment_model:tidescale_request_duration_seconds:p99"
FIRST_RESPONSE_P99: Final = "namespace_model:nv_inference_first_response_seconds:p99"
# P99 per model version (stage="request"), the input of the version-regression review.
VERSION_P99: Final = "namespace_model_version:tidescale_request_duration_seconds:p99"
"""Fraction of requests (stage="request") slower than each SLO threshold, label `le` = the
threshold bucket boundary: 1 - bucket{le}/count. One series per (namespace, model, le)."""
SLOW_RATIO: Final[dict[str, str]] = _windowed("namespace_model:tidescale_request_duration_seconds:slow_ratio_rate")
SLOW_RATIO_RATE5M: Final = SLOW_RATIO["5m"]

# --- The SLO each model has (chart values `slo`, AlertsConfig.slos) -----------------------------------
"""One series per (namespace, model) that serves, label `slo` = the SLO group it matched (first match
wins, `default` otherwise). The threshold also carries `le`, so `and on (namespace, model, le)`
picks each model's own row of SLOW_RATIO. Alerts divide by (1 - objective); dashboards draw them."""
SLO_LATENCY_THRESHOLD: Final = "namespace_model:tidescale_slo:latency_threshold_seconds"
SLO_LATENCY_OBJECTIVE: Final = "namespace_model:tidescale_slo:latency_objective"
SLO_AVAILABILITY_OBJECTIVE: Final = "namespace_model:tidescale_slo:availability_objective"
# The strictest latency threshold of the models a Deployment serves (from the exporter's spans).
DEPLOYMENT_SLO_LATENCY_THRESHOLD: Final = "namespace_deployment:tidescale_slo:latency_threshold_seconds"

# --- Queue and concurrency per replica --------------------------------------------------------------
"""Queue depth (Triton's pending-request gauge) and in-flight requests (Little's law on the
request-duration counter: µs spent per second = average concurrency) per replica."""
# Each pod's Deployment from kube-state-metrics' owners (pod -> ReplicaSet -> Deployment), value 1.
POD_DEPLOYMENT: Final = "namespace_deployment_pod:kube_pod_owner:relabel"
# Each pod's completions of each model, with the pod's Deployment: how a Deployment's load splits over its pods.
DEPLOYMENT_MODEL_POD_REQUEST_RATE5M: Final = "namespace_deployment_model_pod:nv_inference_request_success:rate5m"
POD_QUEUE_DEPTH: Final = "namespace_pod:nv_inference_pending_request_count:sum"
MODEL_POD_QUEUE_DEPTH: Final = "namespace_model_pod:nv_inference_pending_request_count:sum"
DEPLOYMENT_QUEUE_DEPTH_PER_REPLICA: Final = "namespace_deployment:triton_queue_depth_per_replica:avg"
MODEL_QUEUE_DEPTH_PER_REPLICA: Final = "namespace_model:triton_queue_depth_per_replica:avg"
POD_INFLIGHT: Final = "namespace_pod:triton_inflight_requests:rate5m"
DEPLOYMENT_INFLIGHT_PER_REPLICA: Final = "namespace_deployment:triton_inflight_per_replica:avg"
# Per pod and model over 1m (what prometheus-adapter serves the HPA as triton_inflight_requests and
# triton_queue_to_compute_ratio): request-, queue- and compute-µs accumulated per second.
MODEL_POD_REQUEST_US_RATE1M: Final = "namespace_model_pod:nv_inference_request_duration_us:rate1m"
MODEL_POD_QUEUE_US_RATE1M: Final = "namespace_model_pod:nv_inference_queue_duration_us:rate1m"
MODEL_POD_COMPUTE_US_RATE1M: Final = "namespace_model_pod:nv_inference_compute_duration_us:rate1m"
# Average queue time per request in seconds, per pod (the queue-time alert input).
POD_QUEUE_SECONDS_RATE5M: Final = "namespace_pod:nv_inference_queue_duration_seconds:avg_rate5m"
# One series per Triton pod serving a model (value 1): the join key for GPU series.
MODEL_POD_SERVING: Final = "namespace_model_pod:triton_serving:info"

# --- GPU (dcgm-exporter), joined to Triton pods on namespace/pod ------------------------------------
"""Per GPU with normalized labels (pod/namespace from exported_* when present, none for a GPU no pod
holds, hostname from Hostname or hostname), from dcgm-exporter 4.x or 4.9 names in 4.9's units, one
series per GPU however many jobs scrape the exporter; then per serving pod and per model.
Utilisation and activities 0-1, memory in bytes."""
GPU_UTILIZATION: Final = "namespace_pod_gpu:dcgm_gpu_utilization:ratio"
GPU_FB_USED_BYTES: Final = "namespace_pod_gpu:dcgm_fb_used_bytes:sum"
GPU_FB_FREE_BYTES: Final = "namespace_pod_gpu:dcgm_fb_free_bytes:sum"
GPU_TEMP_CELSIUS: Final = "namespace_pod_gpu:dcgm_gpu_temp_celsius:max"
# The last XID error code per GPU (0 = none), labels normalized like the series above.
GPU_XID_ERRORS: Final = "namespace_pod_gpu:dcgm_xid_errors:max"
# The clock event reasons bitmask per GPU (DCGM_CLOCKS_EVENT_REASON_* bits), labels normalized likewise.
GPU_CLOCKS_EVENT_REASONS: Final = "namespace_pod_gpu:dcgm_clocks_event_reasons:max"
POD_GPU_UTILIZATION: Final = "namespace_pod:dcgm_gpu_utilization:avg"
POD_GPU_SM_ACTIVE: Final = "namespace_pod:dcgm_sm_active:avg"
POD_GPU_TENSOR_ACTIVE: Final = "namespace_pod:dcgm_tensor_active:avg"
POD_GPU_FB_USED_BYTES: Final = "namespace_pod:dcgm_fb_used_bytes:sum"
POD_GPU_FB_FREE_BYTES: Final = "namespace_pod:dcgm_fb_free_bytes:sum"
POD_GPU_POWER_WATTS: Final = "namespace_pod:dcgm_power_usage_watts:sum"
MODEL_GPU_UTILIZATION: Final = "namespace_model:dcgm_gpu_utilization:avg"
MODEL_GPU_SM_ACTIVE: Final = "namespace_model:dcgm_sm_active:avg"
MODEL_GPU_TENSOR_ACTIVE: Final = "namespace_model:dcgm_tensor_active:avg"
MODEL_GPU_FB_USED_BYTES: Final = "namespace_model:dcgm_fb_used_bytes:sum"
MODEL_GPU_POWER_WATTS: Final = "namespace_model:dcgm_power_usage_watts:sum"

# --- Profiles ---------------------------------------------------------------------------------------
"""Op-time share per model version and op class from the latest profile (no namespace: the
exporter's own namespace would be wrong for the model)."""
OP_TIME_SHARE: Final = "namespace_model_version_op_class:tidescale_op_time_share:max"


def all_names() -> list[str]:
    """Every recording-rule name above (for tests and the catalog check)."""
    out: list[str] = []
    for value in globals().values():
        if isinstance(value, str) and value.count(":") == 2:
            out.append(value)
        elif isinstance(value, dict):
            out.extend(v for v in value.values() if isinstance(v, str) and v.count(":") == 2)
    return sorted(set(out))
