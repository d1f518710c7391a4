"""Recording rules: the aggregations every dashboard, alert and the autoscaler read."""

from __future__ import annotations

from typing import Any

from tidescale.alerts.config import AlertsConfig
from tidescale.alerts.slo import slo_group
from tidescale.contracts import recorded as n
from tidescale.contracts.promql import (
    bucket,
    count,
    dcgm_normalized,
    escape_label_value,
    join_serving_pods,
    metric,
    per_model,
    selector,
    sum_rate,
    triton_sum,
    triton_sum_rate,
    with_label,
)
from tidescale.contracts.slo import QUANTILE_WINDOW

Rule = dict[str, Any]
Group = dict[str, Any]

NM = "namespace, model"
NMP = "namespace, model, pod"
NP = "namespace, pod"

# Triton's cumulative µs counters per stage (the request counter includes queue time).
STAGE_COUNTERS: tuple[tuple[str, str], ...] = (
    ("request", "nv_inference_request_duration_us"),
    ("queue", "nv_inference_queue_duration_us"),
    ("compute_input", "nv_inference_compute_input_duration_us"),
    ("compute_infer", "nv_inference_compute_infer_duration_us"),
    ("compute_output", "nv_inference_compute_output_duration_us"),
)
COMPUTE_COUNTERS = STAGE_COUNTERS[2:]


def record(name: str, expr: str, **labels: str) -> Rule:
    rule: Rule = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = dict(sorted(labels.items()))
    return rule


def failure_rate(by: str, window: str) -> str:
    """Failures per second, 0 (not absent) for models that never failed."""
    fail = triton_sum_rate(metric("nv_inference_request_failure"), by, window)
    ok = triton_sum_rate(metric("nv_inference_request_success"), by, window)
    return f"({fail} or 0 * {ok})"


def error_ratio(window: str) -> str:
    ok = triton_sum_rate(metric("nv_inference_request_success"), NM, window)
    fail = failure_rate(NM, window)
    return f"{fail}\n/\n({ok} + {fail})"


def request_rate(window: str) -> str:
    return f"{triton_sum_rate(metric('nv_inference_request_success'), NM, window)} + {failure_rate(NM, window)}"


def requests_group(cfg: AlertsConfig) -> Group:
    ok, fail = metric("nv_inference_request_success"), metric("nv_inference_request_failure")
    inf, execs = metric("nv_inference_count"), metric("nv_inference_exec_count")
    rules = [
        record(n.REQUEST_SUCCESS_RATE5M, triton_sum_rate(ok, NM, "5m")),
        record(n.REQUEST_FAILURE_RATE5M, triton_sum_rate(fail, NM, "5m")),
        record(n.POD_REQUEST_SUCCESS_RATE5M, triton_sum_rate(ok, NMP, "5m")),
        record(n.POD_REQUEST_FAILURE_RATE5M, triton_sum_rate(fail, NMP, "5m")),
        record(n.VERSION_REQUEST_SUCCESS_RATE5M, triton_sum_rate(ok, f"{NM}, version", "5m")),
        *(record(n.ERROR_RATIO[w], error_ratio(w)) for w in n.WINDOWS),
        *(record(name, request_rate(w)) for w, name in n.REQUEST_RATE.items()),
        record(n.INFERENCES_PER_EXEC_RATE5M,
               f"{triton_sum_rate(inf, NM, '5m')}\n/\n{triton_sum_rate(execs, NM, '5m')}"),
        record(n.POD_INFERENCES_PER_EXEC_RATE5M,
               f"{triton_sum_rate(inf, NMP, '5m')}\n/\n{triton_sum_rate(execs, NMP, '5m')}"),
        record(n.MODEL_POD_SERVING, f"group by ({NMP}) ({ok})"),
    ]
    return {"name": "tidescale.rules.requests", "interval": cfg.evaluation_interval, "rules": rules}


def stage_latency_rules() -> list[Rule]:
    """Sum each µs counter over instances and pods, then divide by the summed request count."""
    ok = triton_sum_rate(metric("nv_inference_request_success"), NM, "5m")
    rules = []
    for stage, counter in STAGE_COUNTERS:
        avg = f"{triton_sum_rate(metric(counter), NM, '5m')}\n/\n{ok}\n/ 1e6"
        rules.append(record(n.STAGE_AVG_SECONDS_RATE5M, f"({avg})", stage=stage))
    # Same denominator for every stage, so the ratio of averages is the ratio of time spent.
    stages = n.STAGE_AVG_SECONDS_RATE5M
    compute = "|".join(stage for stage, _ in COMPUTE_COUNTERS)
    rules.append(record(
        n.QUEUE_TO_COMPUTE_RATIO_RATE5M,
        f'sum by ({NM}) ({stages}{{stage="queue"}})\n/\nsum by ({NM}) ({stages}{{stage=~"{compute}"}})',
    ))
    return rules


def slow_ratio(cfg: AlertsConfig, window: str) -> str:
    """Share of requests above each configured threshold: 1 - bucket{le=t}/count."""
    hist = "tidescale_request_duration_seconds"
    les = "|".join(le.replace(".", "\\\\.") for le in cfg.threshold_les())
    below = f'sum by ({NM}, le) (rate({bucket(hist)}{{stage="request", le=~"{les}"}}[{window}]))'
    total = f'sum by ({NM}) (rate({count(hist)}{{stage="request"}}[{window}]))'
    return f"1 - (\n{below}\n/ ignoring (le) group_left ()\n{total}\n)"


def latency_group(cfg: AlertsConfig) -> Group:
    # The pod summed away once, every percentile from that: one `rate()` over the per-pod buckets a round.
    rates = n.BUCKET_RATE5M
    rules = [*stage_latency_rules(), record(rates, sum_rate(bucket("tidescale_request_duration_seconds"),
                                                           "namespace, deployment, model, version, stage, le",
                                                           QUANTILE_WINDOW))]
    request = f'{rates}{{stage="request"}}'
    attributed = f'{rates}{{stage="request", deployment!=""}}'
    for name, q in ((n.P50, "0.5"), (n.P95, "0.95"), (n.P99, "0.99")):
        rules.append(record(name, f"histogram_quantile({q}, sum by ({NM}, stage, le) ({rates}))"))
    rules.append(record(n.DEPLOYMENT_P99,
                        f"histogram_quantile(0.99, sum by (namespace, deployment, le) ({attributed}))"))
    rules.append(record(n.TARGET_P99,
                        f"histogram_quantile(0.99, sum by (namespace, deployment, model, le) ({attributed}))"))
    first = bucket("nv_inference_first_response_histogram_ms")
    rules.append(record(n.FIRST_RESPONSE_P99,
                        f"histogram_quantile(0.99, {triton_sum_rate(first, f'{NM}, le', QUANTILE_WINDOW)}) / 1000"))
    rules.append(record(n.VERSION_P99, f"histogram_quantile(0.99, sum by ({NM}, version, le) ({request}))"))
    rules.extend(record(n.SLOW_RATIO[w], slow_ratio(cfg, w)) for w in n.WINDOWS)
    # A Deployment serving several models is held to the strictest threshold among them.
    served = f'group by ({NM}, deployment) ({count("tidescale_request_duration_seconds")}{{deployment!=""}})'
    rules.append(record(n.DEPLOYMENT_SLO_LATENCY_THRESHOLD,
                        f"min by (namespace, deployment) (\n  {n.SLO_LATENCY_THRESHOLD}\n"
                        f"  * on ({NM}) group_right ()\n  {served}\n)"))
    return {"name": "tidescale.rules.latency", "interval": cfg.evaluation_interval, "rules": rules}


def pod_deployment() -> str:
    """Each pod's Deployment from kube-state-metrics' owner chain, pod -> ReplicaSet -> Deployment (as
    kubernetes-mixin's namespace_workload_pod:kube_pod_owner:relabel): 1 per (namespace, deployment, pod)."""
    rs_owner = label_replace(selector("kube_replicaset_owner", owner_kind="Deployment"), "deployment", "owner_name")
    pod_owner = label_replace(selector("kube_pod_owner", owner_kind="ReplicaSet"), "replicaset", "owner_name")
    return (f"max by (namespace, deployment, pod) (\n  {pod_owner}\n"
            f"  * on (namespace, replicaset) group_left (deployment)\n"
            f"  max by (namespace, replicaset, deployment) ({rs_owner})\n)")


def label_replace(expr: str, target: str, source: str) -> str:
    return f'label_replace({expr}, "{target}", "$1", "{source}", "(.+)")'


def with_deployment(pod_series: str, cfg: AlertsConfig) -> str:
    """A per-pod series with its pod's Deployment: the owner kube-state-metrics reports, else (no
    kube-state-metrics, the local process stack) the `<deploy>-<rs>-<pod>` name."""
    owned = f"{pod_series} * on (namespace, pod) group_left (deployment) {n.POD_DEPLOYMENT}"
    regex = escape_label_value(cfg.pod_deployment_regex)
    named = (f'label_replace({pod_series} unless on (namespace, pod) {n.POD_DEPLOYMENT}, '
             f'"deployment", "$1", "pod", "{regex}")')
    return f"{owned}\n  or\n  {named}"


def by_deployment(pod_series: str, cfg: AlertsConfig) -> str:
    """Average a per-pod series over the pods of a Deployment."""
    return f"avg by (namespace, deployment) (\n  {with_deployment(pod_series, cfg)}\n)"


def queue_group(cfg: AlertsConfig) -> Group:
    pending = metric("nv_inference_pending_request_count")
    req_us, queue_us = metric("nv_inference_request_duration_us"), metric("nv_inference_queue_duration_us")
    ok = metric("nv_inference_request_success")
    rules = [
        record(n.POD_DEPLOYMENT, pod_deployment()),
        record(n.DEPLOYMENT_MODEL_POD_REQUEST_RATE5M, with_deployment(n.POD_REQUEST_SUCCESS_RATE5M, cfg)),
        record(n.POD_QUEUE_DEPTH, triton_sum(pending, NP)),
        record(n.MODEL_POD_QUEUE_DEPTH, triton_sum(pending, NMP)),
        record(n.MODEL_QUEUE_DEPTH_PER_REPLICA, f"avg by ({NM}) ({n.MODEL_POD_QUEUE_DEPTH})"),
        record(n.DEPLOYMENT_QUEUE_DEPTH_PER_REPLICA, by_deployment(n.POD_QUEUE_DEPTH, cfg)),
        # Little's law: request-µs accumulated per second = average requests in flight.
        record(n.POD_INFLIGHT, f"{triton_sum_rate(req_us, NP, '5m')} / 1e6"),
        record(n.DEPLOYMENT_INFLIGHT_PER_REPLICA, by_deployment(n.POD_INFLIGHT, cfg)),
        # The adapter's per-pod inputs, recorded so that a dashboard shows what the HPA is served.
        record(n.MODEL_POD_REQUEST_US_RATE1M, triton_sum_rate(req_us, NMP, "1m")),
        record(n.MODEL_POD_QUEUE_US_RATE1M, triton_sum_rate(queue_us, NMP, "1m")),
        record(n.MODEL_POD_COMPUTE_US_RATE1M,
               " + ".join(triton_sum_rate(metric(c), NMP, "1m") for _, c in COMPUTE_COUNTERS)),
        record(n.POD_QUEUE_SECONDS_RATE5M,
               f"{triton_sum_rate(queue_us, NP, '5m')}\n/\n{triton_sum_rate(ok, NP, '5m')}\n/ 1e6"),
    ]
    return {"name": "tidescale.rules.queue", "interval": cfg.evaluation_interval, "rules": rules}


def gpu_group(cfg: AlertsConfig) -> Group:
    """Every dcgm-exporter read goes through `dcgm_normalized`: 4.x and 4.9 names, the 4.9 units (a
    utilisation ratio, bytes), one series per GPU however many jobs scrape the exporter."""
    serving = n.MODEL_POD_SERVING
    rules = [
        record(n.GPU_UTILIZATION, dcgm_normalized("DCGM_FI_DEV_GPU_UTIL")),
        record(n.GPU_FB_USED_BYTES, dcgm_normalized("DCGM_FI_DEV_FB_USED")),
        record(n.GPU_FB_FREE_BYTES, dcgm_normalized("DCGM_FI_DEV_FB_FREE")),
        record(n.GPU_TEMP_CELSIUS, dcgm_normalized("DCGM_FI_DEV_GPU_TEMP")),
        record(n.GPU_XID_ERRORS, dcgm_normalized("DCGM_FI_DEV_XID_ERRORS")),
        record(n.GPU_CLOCKS_EVENT_REASONS, dcgm_normalized("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")),
        record(n.POD_GPU_UTILIZATION, join_serving_pods(f"avg by ({NP}) ({n.GPU_UTILIZATION})", serving)),
        record(n.POD_GPU_SM_ACTIVE, join_serving_pods(
            f"avg by ({NP}) ({dcgm_normalized('DCGM_FI_PROF_SM_ACTIVE')})", serving)),
        record(n.POD_GPU_TENSOR_ACTIVE, join_serving_pods(
            f"avg by ({NP}) ({dcgm_normalized('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE')})", serving)),
        record(n.POD_GPU_FB_USED_BYTES, join_serving_pods(f"sum by ({NP}) ({n.GPU_FB_USED_BYTES})", serving)),
        record(n.POD_GPU_FB_FREE_BYTES, join_serving_pods(f"sum by ({NP}) ({n.GPU_FB_FREE_BYTES})", serving)),
        record(n.POD_GPU_POWER_WATTS, join_serving_pods(
            f"sum by ({NP}) ({dcgm_normalized('DCGM_FI_DEV_POWER_USAGE')})", serving)),
        record(n.MODEL_GPU_UTILIZATION, per_model(n.POD_GPU_UTILIZATION, serving, "avg")),
        record(n.MODEL_GPU_SM_ACTIVE, per_model(n.POD_GPU_SM_ACTIVE, serving, "avg")),
        record(n.MODEL_GPU_TENSOR_ACTIVE, per_model(n.POD_GPU_TENSOR_ACTIVE, serving, "avg")),
        record(n.MODEL_GPU_FB_USED_BYTES, per_model(n.POD_GPU_FB_USED_BYTES, serving, "sum")),
        record(n.MODEL_GPU_POWER_WATTS, per_model(n.POD_GPU_POWER_WATTS, serving, "sum")),
    ]
    return {"name": "tidescale.rules.gpu", "interval": cfg.evaluation_interval, "rules": rules}


def profiles_group(cfg: AlertsConfig) -> Group:
    share = metric("tidescale_op_time_share")
    rules = [record(n.OP_TIME_SHARE, f"max by (namespace, model, version, op_class) ({share})")]
    return {"name": "tidescale.rules.profiles", "interval": cfg.evaluation_interval, "rules": rules}


def recording_groups(cfg: AlertsConfig) -> list[Group]:
    return [slo_group(cfg), requests_group(cfg), latency_group(cfg), queue_group(cfg), gpu_group(cfg),
            profiles_group(cfg)]


__all__ = ["recording_groups", "with_label"]
