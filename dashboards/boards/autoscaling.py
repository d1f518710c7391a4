"""Autoscaling: do we have the right number of replicas, and is the control loop healthy."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash_b

from tidescale.contracts import recorded
from tidescale.contracts.promql import metric
from tidescale.dashboards.base import AUTOSCALING, new_dashboard, query_variable
from tidescale.dashboards.panels import Query, Threshold, graph, row, single_stat
from tidescale.dashboards.queries import NS, agg, hpa_by_deployment, ratio, sel

NS_DEPLOY = f'{NS}, deployment=~"$deployment"'
# The HPA leaves replicas alone while current/desired is within this tolerance (kube default 0.1).
HPA_TOLERANCE = 0.1


POD_OF_DEPLOYMENT = f'{NS}, pod=~"($deployment)-.+"'
COLD_START = (f"max by (pod) ({sel('kube_pod_status_ready_time', POD_OF_DEPLOYMENT)}"
              f" - on (namespace, pod) {sel('kube_pod_start_time', POD_OF_DEPLOYMENT)})")


def _by_deployment(name: str, extra: str = "", matchers: str = NS_DEPLOY) -> str:
    return agg("max", f"deployment{extra}", name, matchers)


def replica_queries(matchers: str = NS_DEPLOY, deployments: str = "$deployment") -> list[Query]:
    """Recommended, HPA desired, current and ready replicas per Deployment (shared with the fleet view)."""
    return [
        Query(_by_deployment("tidescale_desired_replicas", matchers=matchers), "{{deployment}} recommended"),
        Query(hpa_by_deployment("kube_horizontalpodautoscaler_status_desired_replicas", deployments),
              "{{deployment}} HPA desired"),
        Query(_by_deployment("kube_deployment_status_replicas", matchers=matchers), "{{deployment}} current"),
        Query(_by_deployment("kube_deployment_status_replicas_ready", matchers=matchers), "{{deployment}} ready"),
    ]


def build() -> dash_b.Dashboard:
    deployment = query_variable(
        "deployment", "Deployment",
        f"label_values({metric('kube_horizontalpodautoscaler_info')}{{{NS}, scaletargetref_kind=\"Deployment\"}}, "
        "scaletargetref_name)",
        "Deployments scaled by an HPA (the serving Deployments tidescale scales).")
    return (
        new_dashboard(AUTOSCALING, extra_variables=[deployment])
        .with_row(row("Replicas"))
        .with_panel(graph(
            "Recommended vs HPA desired vs current vs ready",
            "The recommender's replica count (tidescale_desired_replicas), the HPA's decision after its "
            "tolerance and stabilisation windows, the Deployment's pods, and the Ready ones.",
            "short", replica_queries(), span=24, min_value=0))
        .with_panel(graph(
            "Scaling metric per replica vs target",
            "What the HPA sees: recommended replicas / current replicas, against an AverageValue target of 1. "
            "The chart sets behavior tolerance 0 (Kubernetes >= 1.33), so any deviation moves the HPA; on older "
            "clusters it ignores the dashed ±10 % band, which is why a desired-replicas metric alone cannot "
            "add a single replica at 10 or more.",
            "short", [Query(ratio(_by_deployment("tidescale_desired_replicas"),
                                  _by_deployment("kube_deployment_status_replicas")), "{{deployment}}")],
            thresholds=[Threshold(1 - HPA_TOLERANCE, "yellow"), Threshold(1 + HPA_TOLERANCE, "red")],
            min_value=0))
        .with_panel(graph(
            "Scale events",
            "Changes of the Deployment's spec.replicas per rate interval: each bar is a scale-up or "
            "scale-down decision that reached the Deployment.",
            "short", [Query(f"sum by (deployment) (changes({sel('kube_deployment_spec_replicas', NS_DEPLOY)}"
                            "[$__rate_interval]))", "{{deployment}}")], min_value=0))
        .with_panel(graph(
            "Why the recommender decided",
            "Each evaluation's decision (tidescale_recommender_decision == 1): scale_up_rate, scale_up_lookahead "
            "(the trend projected over the cold start), scale_up_return (projected no further than a level the "
            "arrivals held minutes ago: a return, not a surge), scale_up_queue, "
            "scale_up_panic (an overload read straight from the Triton pods: scaled at once), scale_up_forecast "
            "(the demand a day or a week ago peaked within the lookahead), scale_up_drain "
            "(a pod's backlog), scale_up_latency (most requests slow with no queue to show why), scale_up_replace "
            "(pods that crash-loop replaced, as far as the rest fall short at full capacity), scale_down, "
            "scale_down_fall (the arrivals fall steadily: no down delay), hold_down_delay, hold_dip_returns "
            "(less is needed, but dips like this one came back before: the down delay lasts as long as they did), "
            "hold_saturated (the latency SLO burns, or the "
            "replicas serve their measured ceiling: no scale-down), hold_replicas_disagree (the replica reading "
            "disagrees with the HPA or with what was asked for: the last answer stands), "
            "hold_scale_down_withdrawn (the pods read more load than a scale-down not yet applied leaves "
            "room for: taken back at once), hold_steady, "
            "hold_missing_data (the fail-safe: never a scale-down on missing data), "
            "wait_unschedulable (some of the replicas asked for cannot be scheduled: no node has a free GPU). "
            "A change of the recommendation is also a Kubernetes Event on the Deployment (`kubectl describe`).",
            "short", [Query(f"{_by_deployment('tidescale_recommender_decision', ', reason')} == 1",
                            "{{deployment}} {{reason}}")], span=24, min_value=0))
        .with_row(row("What the decisions read"))
        .with_panel(graph(
            "P99 the recommender holds each target to",
            "The recorded P99 of each model on each Deployment's pods (the exporter attributes every span to "
            "its sending pod's Deployment), the series the recommender reads to hold a scale-down while the "
            "SLO burns; dashed, the Deployment's SLO threshold.",
            "s", [Query(_by_deployment(recorded.TARGET_P99, ", model"), "{{deployment}} {{model}}"),
                  Query(_by_deployment(recorded.DEPLOYMENT_SLO_LATENCY_THRESHOLD), "{{deployment}} SLO")],
            span=8, min_value=0))
        .with_panel(graph(
            "Requests in flight per pod (adapter: triton_inflight_requests)",
            "What prometheus-adapter serves the HPA as triton_inflight_requests: request-seconds completed per "
            "second on each pod over 1m (Little's law), from the recorded per-pod rate.",
            "short", [Query(f"sum by (pod) ({sel(recorded.MODEL_POD_REQUEST_US_RATE1M, POD_OF_DEPLOYMENT)}) / 1e6",
                            "{{pod}}")], span=8, min_value=0))
        .with_panel(graph(
            "Queue time over compute time per pod (adapter: triton_queue_to_compute_ratio)",
            "What prometheus-adapter serves the HPA as triton_queue_to_compute_ratio: queue-µs over compute-µs "
            "accumulated on each pod over 1m; above 1, requests wait longer than they run.",
            "short", [Query(ratio(f"sum by (pod) ({sel(recorded.MODEL_POD_QUEUE_US_RATE1M, POD_OF_DEPLOYMENT)})",
                                  f"sum by (pod) ({sel(recorded.MODEL_POD_COMPUTE_US_RATE1M, POD_OF_DEPLOYMENT)})"),
                            "{{pod}}")], thresholds=[Threshold(1, "red")], span=8, min_value=0))
        .with_panel(graph(
            "Requests per pod: does the Service spread them?",
            "Each pod's completions per second, by model, from the recorded per-pod rate with its Deployment. "
            "One pod high and its peers near zero after a scale-out: the clients keep their connections "
            "(HTTP keep-alive, gRPC) and kube-proxy balances connections, not requests, so added replicas "
            "take little load (TritonLoadImbalanced).",
            "reqps", [Query(f"sum by (pod, model) ({sel(recorded.DEPLOYMENT_MODEL_POD_REQUEST_RATE5M, NS_DEPLOY)})",
                            "{{pod}} {{model}}")], span=24, min_value=0))
        .with_row(row("Control loop health"))
        .with_panel(graph(
            "Cold-start time",
            "Seconds from pod start to Ready (model load), per pod, from kube-state-metrics "
            "(kube_pod_status_ready_time - kube_pod_start_time). Scale-up has to lead demand by this much.",
            "s", [Query(COLD_START, "{{pod}}")],
            span=8, min_value=0))
        .with_panel(single_stat(
            "Fail-safe active",
            "1 while the recommender holds its last good recommendation (Prometheus unreachable, no data, "
            "stale metrics), with the reason; the HPA then keeps the current scale.",
            "bool_on_off", [Query(_by_deployment("tidescale_recommender_failsafe", ", reason"),
                                  "{{deployment}} {{reason}}")],
            span=8, thresholds=[Threshold(1, "red")]))
        .with_panel(graph(
            "Time since last successful evaluation",
            "Seconds since the recommender last evaluated successfully; growing means it is stuck.",
            "s", [Query(f"time() - {_by_deployment('tidescale_recommender_last_success_timestamp_seconds')}",
                        "{{deployment}}")], span=8, min_value=0))
    )
