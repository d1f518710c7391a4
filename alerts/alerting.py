"""Alerting rules: SLO burn rates, queue, Kubernetes, GPU, model reviews and meta-alerts.

Every alert carries `severity` (critical pages, warning opens a ticket, info/none do neither),
`summary`, a `description` with the values, and `runbook_url` → docs/runbooks/<name>.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidescale.alerts.config import AlertsConfig
from tidescale.alerts.recording import Group, Rule
from tidescale.contracts import recorded as n
from tidescale.contracts.promql import matcher, metric, sum_rate, triton_sum_rate

# (long window, short window, burn-rate factor): Google SRE workbook, multiwindow multi-burn-rate.
PAGE_WINDOWS: tuple[tuple[str, str, float], ...] = (("1h", "5m", 14.4), ("6h", "30m", 6.0))
TICKET_WINDOWS: tuple[tuple[str, str, float], ...] = (("1d", "2h", 3.0), ("3d", "6h", 1.0))

# The alerts routed to model reviews instead of the pager or tickets.
MODEL_REVIEW_ALERT = "TritonModelReviewRequired"
WATCHDOG_ALERT = "Watchdog"


@dataclass(frozen=True)
class AlertSpec:
    """What varies between alerts; `rule()` adds the common labels and the runbook."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    labels: tuple[tuple[str, str], ...] = ()
    # Machine-readable values for receivers (the review service reads `value`, `p99_*_seconds`).
    annotations: tuple[tuple[str, str], ...] = ()

    def rule(self, cfg: AlertsConfig) -> Rule:
        labels = {**cfg.extra_labels, **dict(self.labels), "severity": self.severity}
        rule: Rule = {"alert": self.name, "expr": self.expr}
        if self.for_ not in ("0s", "0m"):
            rule["for"] = self.for_
        rule["labels"] = dict(sorted(labels.items()))
        annotations = {
            **dict(self.annotations),
            "description": self.description,
            "runbook_url": cfg.runbook_url(self.name),
            "summary": self.summary,
        }
        rule["annotations"] = dict(sorted(annotations.items()))
        return rule


def slow_ratio_slo(window: str) -> str:
    """Each model's slow ratio at its own SLO threshold (the `le` its SLO series carries)."""
    return (f"max without (le) (\n  {n.SLOW_RATIO[window]}\n  and on (namespace, model, le)\n"
            f"  {n.SLO_LATENCY_THRESHOLD}\n)")


def burn_expr(ratio: Any, objective: str, windows: tuple[tuple[str, str, float], ...],
              min_request_rate: float = 0.0) -> str:
    """Burn rate of the long window where both windows burn faster than the factor, and the
    model serves at least *min_request_rate* requests/s over the short window (the short window,
    so that a model that started serving minutes ago can page as soon as it burns). The budget is
    each model's own: 1 - the *objective* series of its SLO."""
    budget = f"on (namespace, model) (1 - {objective})"
    clauses = []
    for long_w, short_w, factor in windows:
        guard = (f"\nand on (namespace, model)\n  {n.REQUEST_RATE[short_w]} >= {min_request_rate:g}"
                 if min_request_rate > 0 else "")
        clauses.append(
            f"(\n  {ratio(long_w)} / {budget} > {factor:g}\nand\n  {ratio(short_w)} / {budget} > {factor:g}"
            f"{guard}\n)"
        )
    return "\nor\n".join(clauses)


def budget_burn_alerts(cfg: AlertsConfig) -> list[AlertSpec]:
    out = []
    for sev, windows, for_ in (
        ("critical", PAGE_WINDOWS, cfg.for_.budget_burn_page),
        ("warning", TICKET_WINDOWS, cfg.for_.budget_burn_ticket),
    ):
        out.append(AlertSpec(
            "TritonLatencyBudgetBurn",
            burn_expr(slow_ratio_slo, n.SLO_LATENCY_OBJECTIVE, windows, cfg.burn_min_request_rate),
            for_, sev,
            "Model {{ $labels.model }} is burning its latency SLO budget fast.",
            "Model {{ $labels.namespace }}/{{ $labels.model }} burns its latency error budget at "
            "{{ $value | printf \"%.1f\" }}x the sustainable rate of its SLO (the share of requests "
            "under its latency threshold, both set per model: chart values `slo`).",
        ))
        out.append(AlertSpec(
            "TritonErrorBudgetBurn",
            burn_expr(lambda w: n.ERROR_RATIO[w], n.SLO_AVAILABILITY_OBJECTIVE, windows, cfg.burn_min_request_rate),
            for_, sev,
            "Model {{ $labels.model }} is burning its availability SLO budget fast.",
            "Model {{ $labels.namespace }}/{{ $labels.model }} burns its error budget at "
            "{{ $value | printf \"%.1f\" }}x the sustainable rate of its SLO (the share of requests "
            "that succeed, set per model: chart values `slo`).",
        ))
    return out


def load_imbalance_alert(cfg: AlertsConfig) -> AlertSpec:
    """One pod of a Deployment carries a model while its peers idle: kube-proxy balances connections,
    not requests, so clients that keep theirs (HTTP keep-alive, gRPC) stay on the pods they first
    reached, and the replicas an autoscaler adds take little load (`bench closed-loop` saw 99 % of a
    surge on the first of three Ready pods)."""
    dmp = "namespace, deployment, model"
    pods = f"({n.DEPLOYMENT_MODEL_POD_REQUEST_RATE5M})"
    return AlertSpec(
        "TritonLoadImbalanced",
        f"max by ({dmp}) {pods} / on ({dmp}) sum by ({dmp}) {pods}\n"
        f"and on ({dmp})\n"
        f"min by ({dmp}) {pods} < on ({dmp}) {1 / cfg.load_imbalance_ratio:g} * max by ({dmp}) {pods}\n"
        f"and on ({dmp})\nsum by ({dmp}) {pods} > {cfg.load_imbalance_min_rps:g}\n"
        f"and on ({dmp})\ncount by ({dmp}) {pods} >= 2",
        cfg.for_.load_imbalance, "warning",
        "One pod of {{ $labels.deployment }} carries model {{ $labels.model }} while its peers idle.",
        "The busiest pod of Deployment {{ $labels.namespace }}/{{ $labels.deployment }} serves "
        "{{ $value | humanizePercentage }} of model {{ $labels.model }}'s requests, and the least busy less "
        f"than 1/{cfg.load_imbalance_ratio:g} of its rate: requests are not spread over the replicas (clients "
        "that keep their connections stay on the pods they first reached), so replicas added take little load.",
    )


def triton_alerts(cfg: AlertsConfig) -> list[AlertSpec]:
    hpa_max = metric("kube_horizontalpodautoscaler_spec_max_replicas")
    hpa_cur = metric("kube_horizontalpodautoscaler_status_current_replicas")
    hpa_info = metric("kube_horizontalpodautoscaler_info")
    restarts = metric("kube_pod_container_status_restarts_total")
    ready = metric("kube_pod_status_ready")
    maxed = (
        f"({hpa_cur} >= on (namespace, horizontalpodautoscaler) {hpa_max})\n"
        f"* on (namespace, horizontalpodautoscaler) group_left (scaletargetref_name) {hpa_info}"
    )
    limit = f"{cfg.queue_depth_per_replica_limit:g}"
    return [
        AlertSpec(
            "TritonQueueBacklog",
            f"{n.POD_QUEUE_DEPTH} > {limit}\nor\n{n.POD_QUEUE_SECONDS_RATE5M} > {cfg.queue_time_limit_s:g}",
            cfg.for_.queue_backlog, "warning",
            "Triton pod {{ $labels.pod }} has a queue backlog.",
            "Pod {{ $labels.namespace }}/{{ $labels.pod }} has {{ $value | printf \"%.3g\" }} "
            f"(queued requests, or seconds of queue time per request); limits: {limit} requests "
            f"per replica, {cfg.queue_time_limit_s:g}s queue time.",
        ),
        load_imbalance_alert(cfg),
        AlertSpec(
            "TritonAutoscalerMaxedOut",
            f"{n.DEPLOYMENT_QUEUE_DEPTH_PER_REPLICA} > {limit}\n"
            "and on (namespace, deployment)\n"
            f'label_replace({maxed}, "deployment", "$1", "scaletargetref_name", "(.+)")',
            cfg.for_.autoscaler_maxed_out, "critical",
            "Deployment {{ $labels.deployment }} has a backlog at its HPA's maxReplicas.",
            "Deployment {{ $labels.namespace }}/{{ $labels.deployment }} queues "
            "{{ $value | printf \"%.3g\" }} requests per replica (limit "
            f"{limit}) while its HorizontalPodAutoscaler sits at maxReplicas; it cannot scale further.",
            labels=(("trigger", "queue"),),
        ),
        AlertSpec(
            # The same capped fleet seen by its latency: requests can wait in Triton's HTTP front end
            # rather than in the model's queue, and then the queue gauge stays low while P99 climbs.
            "TritonAutoscalerMaxedOut",
            f"{n.DEPLOYMENT_P99} > on (namespace, deployment) {n.DEPLOYMENT_SLO_LATENCY_THRESHOLD}\n"
            "and on (namespace, deployment)\n"
            f'label_replace({maxed}, "deployment", "$1", "scaletargetref_name", "(.+)")',
            cfg.for_.autoscaler_maxed_out, "critical",
            "Deployment {{ $labels.deployment }} misses its latency SLO at its HPA's maxReplicas.",
            "Deployment {{ $labels.namespace }}/{{ $labels.deployment }} serves a P99 of "
            "{{ $value | humanizeDuration }}, above the strictest SLO threshold of its models, while its "
            "HorizontalPodAutoscaler sits at maxReplicas; "
            "it cannot scale further.",
            labels=(("trigger", "latency"),),
        ),
        AlertSpec(
            "TritonModelNotReady",
            f"{n.REQUEST_FAILURE_RATE5M} > 0\nunless on (namespace, model)\n{n.REQUEST_SUCCESS_RATE5M} > 0",
            cfg.for_.model_not_ready, "critical",
            "Model {{ $labels.model }} fails every request.",
            "Model {{ $labels.namespace }}/{{ $labels.model }} fails {{ $value | printf \"%.3g\" }} "
            "requests/s and serves none: it is unavailable or failed to load.",
            labels=(("trigger", "requests_failing"),),
        ),
        AlertSpec(
            # Triton's readiness (strict by default) fails while any model is not loaded.
            "TritonModelNotReady",
            f'{ready}{{condition="true"}} == 0\n'
            f"and on (namespace, pod)\ngroup by (namespace, pod) ({n.MODEL_POD_SERVING})",
            cfg.for_.model_not_ready, "critical",
            "Triton pod {{ $labels.pod }} is not Ready.",
            "Triton pod {{ $labels.namespace }}/{{ $labels.pod }} is not Ready: with strict readiness a model "
            "failed to load or is unavailable (see the repository index).",
            labels=(("trigger", "pod_not_ready"),),
        ),
        AlertSpec(
            "TritonPodRestarting",
            f'increase({restarts}{{{matcher("container", cfg.triton_container_regex, "=~")}}}[15m]) '
            f">= {cfg.pod_restarts_limit}",
            cfg.for_.pod_restarting, "warning",
            "Triton container {{ $labels.container }} in pod {{ $labels.pod }} keeps restarting.",
            "Container {{ $labels.namespace }}/{{ $labels.pod }}/{{ $labels.container }} restarted "
            "{{ $value | printf \"%.0f\" }} times in 15 minutes.",
        ),
    ]


def gpu_alerts(cfg: AlertsConfig) -> list[AlertSpec]:
    # The recorded per-GPU series (dcgm-exporter 4.x or 4.9, one series per GPU however often scraped).
    xid = n.GPU_XID_ERRORS
    reasons = n.GPU_CLOCKS_EVENT_REASONS
    horizon = int(cfg.gpu_memory_predict_hours * 3600)
    # Clock event reason bits: SW_POWER_CAP 0x4, HW_POWER_BRAKE 0x80; SW_THERMAL 0x20, HW_THERMAL 0x40.
    power_bits = f"{reasons} and (floor({reasons} / 4) % 2 == 1 or floor({reasons} / 128) % 2 == 1)"
    power = f'label_replace({power_bits}, "reason", "power", "", "")'
    thermal = f'label_replace({reasons} and floor({reasons} / 32) % 4 > 0, "reason", "thermal", "", "")'
    return [
        AlertSpec(
            "GPUMemoryLeak",
            f"predict_linear({n.GPU_FB_USED_BYTES}[{cfg.gpu_memory_lookback}], {horizon})\n"
            f">=\n({n.GPU_FB_USED_BYTES} + {n.GPU_FB_FREE_BYTES})",
            cfg.for_.gpu_memory_leak, "warning",
            "GPU {{ $labels.gpu }} on {{ $labels.hostname }} will run out of memory.",
            "Framebuffer use of GPU {{ $labels.gpu }} ({{ $labels.UUID }}) serving pod "
            "{{ $labels.namespace }}/{{ $labels.pod }} trends to {{ $value | humanize1024 }}B within "
            f"{cfg.gpu_memory_predict_hours:g}h, beyond the GPU's memory (linear fit over {cfg.gpu_memory_lookback}).",
        ),
        AlertSpec(
            "GPUXidErrors",
            f"max_over_time({xid}[10m]) > 0",
            cfg.for_.gpu_xid, "critical",
            "GPU {{ $labels.gpu }} reported Xid error {{ $value }}.",
            "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) reported Xid {{ $value | printf \"%.0f\" }} in "
            "the last 10 minutes (host {{ $labels.hostname }}).",
        ),
        AlertSpec(
            "GPUThrottling",
            f"{power}\nor\n{thermal}",
            cfg.for_.gpu_throttling, "warning",
            "GPU {{ $labels.gpu }} clocks are throttled ({{ $labels.reason }}).",
            "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) has been clock-throttled for {{ $labels.reason }} "
            "reasons; clock event reasons bitmask {{ $value | printf \"%.0f\" }}.",
        ),
        AlertSpec(
            "GPUIdleWhileQueueing",
            f"{n.POD_GPU_UTILIZATION} < {cfg.gpu_idle_utilization:g}\nand on (namespace, pod)\n{n.POD_QUEUE_DEPTH} > 0",
            cfg.for_.gpu_idle_while_queueing, "warning",
            "GPU of pod {{ $labels.pod }} is idle while requests queue.",
            "Pod {{ $labels.namespace }}/{{ $labels.pod }} GPU utilisation is {{ $value | humanizePercentage }} "
            "while requests wait in its queue: the server or model is stuck, not short of capacity.",
        ),
    ]


def p99_before_template() -> str:
    """Go template querying the previous versions' P99 (label values quoted by %q, Go/PromQL escaping)."""
    query = (
        f"max(last_over_time({n.VERSION_P99}{{namespace=%q, model=%q}}[1d] offset 1h))"
    )
    return (
        f'{{{{ with printf "{query}" $labels.namespace $labels.model | query }}}}'
        "{{ . | first | value }}{{ end }}"
    )


def review_alerts(cfg: AlertsConfig) -> list[AlertSpec]:
    clauses = [
        f'{n.OP_TIME_SHARE}{{op_class="{oc}"}} > {limit:g}' for oc, limit in sorted(cfg.op_class_limits.items())
    ]
    over = " or ".join(clauses)
    op_share = f'label_replace({over}, "reason", "op_share_$1", "op_class", "(.+)")'
    p99 = n.VERSION_P99
    ok = metric("nv_inference_request_success")
    traffic = f"{triton_sum_rate(ok, 'namespace, model, version', '5m')} > {cfg.regression_min_rps:g}"
    # A version that did not exist an hour ago, slower than every version that did.
    regression = (
        f"(\n  ({p99} and on (namespace, model, version) ({traffic}))\n"
        f"  unless on (namespace, model, version) last_over_time({p99}[1d] offset 1h)\n)\n"
        f"> on (namespace, model) group_left ()\n"
        f"{1 + cfg.regression_ratio:g} * max by (namespace, model) (last_over_time({p99}[1d] offset 1h))"
    )
    limits = ", ".join(f"{k}: {v:g}" for k, v in sorted(cfg.op_class_limits.items()))
    return [
        AlertSpec(
            MODEL_REVIEW_ALERT, op_share, cfg.for_.model_review, "info",
            "Model {{ $labels.model }} version {{ $labels.version }} spends too much time in "
            "{{ $labels.op_class }} ops.",
            "{{ $labels.op_class }} ops take {{ $value | humanizePercentage }} of op self time in model "
            "{{ $labels.model }} version {{ $labels.version }} (limits: " + limits + ").",
            labels=(("trigger", "op_share"),),
            annotations=(("value", "{{ $value }}"),),
        ),
        AlertSpec(
            MODEL_REVIEW_ALERT, f'label_replace({regression}, "reason", "p99_regression", "", "")',
            cfg.for_.model_review, "info",
            "Model {{ $labels.model }} version {{ $labels.version }} regressed P99 latency.",
            "P99 of model {{ $labels.namespace }}/{{ $labels.model }} version {{ $labels.version }} is "
            "{{ $value | humanizeDuration }}, more than "
            f"{cfg.regression_ratio:.0%} above the previous version's.",
            labels=(("trigger", "p99_regression"),),
            annotations=(
                ("p99_after_seconds", "{{ $value }}"),
                ("p99_before_seconds", p99_before_template()),
                ("value", "{{ $value }}"),
            ),
        ),
    ]


def meta_alerts(cfg: AlertsConfig) -> list[AlertSpec]:
    up = metric("up")
    ts = metric("tidescale_profile_timestamp_seconds")
    ok = metric("nv_inference_request_success")
    job = cfg.exporter_job
    up_job = f"{up}{{{matcher('job', job)}}}"
    return [
        AlertSpec(
            "TidescaleExporterDown",
            f"{up_job} == 0 or absent({up_job})",
            cfg.for_.exporter_down, "warning",
            "The tidescale exporter is down.",
            f"Prometheus cannot scrape job {job} ({{{{ $labels.instance }}}}): latency percentiles, "
            "op-time shares and model-review alerts are blind.",
        ),
        *exporter_data_alerts(cfg),
        AlertSpec(
            "TidescaleProfileStale",
            f"time() - {ts} > {cfg.profile_max_age_s:g}",
            cfg.for_.profile_stale, "warning",
            "Profile of model {{ $labels.model }} version {{ $labels.version }} is stale.",
            "The latest profile of model {{ $labels.model }} version {{ $labels.version }} is "
            "{{ $value | humanizeDuration }} old (limit "
            f"{cfg.profile_max_age_s:g}s); op-time shares describe an old capture.",
        ),
        *recommender_alerts(cfg),
        AlertSpec(
            "TritonMetricsAbsent",
            f"absent({ok})",
            cfg.for_.metrics_absent, "warning",
            "No Triton metrics reach Prometheus.",
            f"Prometheus has no {ok} series: Triton pods are not scraped (ServiceMonitor, port 8002), "
            "so every Triton alert is silent.",
        ),
        AlertSpec(
            WATCHDOG_ALERT, "vector(1)", "0s", "none",
            "Alerting pipeline heartbeat.",
            "Always firing. If the Watchdog receiver stops getting it, Prometheus or Alertmanager is broken.",
        ),
    ]


def exporter_data_alerts(cfg: AlertsConfig) -> list[AlertSpec]:
    """The exporter up but losing data: what it refuses never reaches a histogram, so the percentiles,
    the SLO burn and the reviews read less than was served, and nothing else says so."""
    job = matcher("job", cfg.exporter_job)
    capped = f"{metric('tidescale_exporter_series_dropped_total')}{{{job}}}"
    dropped = f"{metric('tidescale_exporter_spans_dropped_total')}{{{job}}}"
    accepted = f"{metric('tidescale_exporter_spans_accepted_total')}{{{job}}}"
    window = "15m"  # the description's "15 minutes"

    by = "job, instance"
    dropped_rate = sum_rate(dropped, by, window)
    # Trace-file exporters count no accepted spans, so there any steady drop is the whole share.
    share = f"  {dropped_rate}\n  / (\n    {sum_rate(accepted, by, window)}\n    + {dropped_rate}\n  )"
    return [
        AlertSpec(
            "TidescaleSeriesCapped",
            f"increase({capped}[10m]) > 0",
            cfg.for_.series_capped, "warning",
            "The tidescale exporter refuses new {{ $labels.family }} series.",
            "The exporter {{ $labels.instance }} refused {{ $value | printf \"%.0f\" }} samples of new "
            "{{ $labels.family }} series in 10 minutes: its cardinality cap is full, so the model versions "
            "or pods behind them have none, and their percentiles and alerts are blind.",
        ),
        AlertSpec(
            "TidescaleSpansDropped",
            f"sum by ({by}) (increase({dropped}[{window}])) >= {cfg.spans_dropped_min}\nand\n(\n{share}\n)\n"
            f"> {cfg.spans_dropped_max_ratio:g}",
            cfg.for_.spans_dropped, "warning",
            "The tidescale exporter drops trace data.",
            "The exporter {{ $labels.instance }} dropped {{ $value | printf \"%.0f\" }} spans or trace entries "
            f"in 15 minutes, over {cfg.spans_dropped_max_ratio:.0%} of what it received: the latency histograms "
            "count fewer requests than were served. tidescale_exporter_spans_dropped_total says why, by reason.",
        ),
    ]


def recommender_alerts(cfg: AlertsConfig) -> list[AlertSpec]:
    """The autoscaler's own health: with the recommender down or holding, the HPA (or, in direct
    mode, the Deployment) keeps its count however the demand moves, and only the SLO burn notices."""
    up = f"{metric('up')}{{{matcher('job', cfg.recommender_job)}}}"
    last = metric("tidescale_recommender_last_success_timestamp_seconds")
    failed = metric("tidescale_recommender_scale_write_failures_total")
    return [
        AlertSpec(
            "TidescaleRecommenderDown",
            f"{up} == 0",
            cfg.for_.recommender_down, "warning",
            "The tidescale recommender is down.",
            f"Prometheus cannot scrape job {cfg.recommender_job} ({{{{ $labels.instance }}}}): the autoscaled "
            "Deployments keep their replica counts whatever the load does.",
        ),
        AlertSpec(
            "TidescaleRecommenderStale",
            f"time() - {last} > {cfg.recommender_max_age_s:g}",
            cfg.for_.recommender_stale, "warning",
            "The recommender for {{ $labels.namespace }}/{{ $labels.deployment }} holds a stale answer.",
            "The recommender's last good evaluation of {{ $labels.namespace }}/{{ $labels.deployment }} was "
            "{{ $value | humanizeDuration }} ago (limit "
            f"{cfg.recommender_max_age_s:g}s): it holds its last recommendation on missing data "
            "(tidescale_recommender_failsafe says why) and does not follow the demand.",
        ),
        AlertSpec(
            "TidescaleRecommenderCannotScale",
            f"increase({failed}[5m]) > 0",
            cfg.for_.recommender_cannot_scale, "warning",
            "The recommender cannot scale {{ $labels.namespace }}/{{ $labels.deployment }}.",
            "Direct scale mode: {{ $value | printf \"%.0f\" }} writes of the scale subresource of "
            "{{ $labels.namespace }}/{{ $labels.deployment }} failed in 5 minutes; the Deployment stays at its "
            "count (RBAC, or the API server away).",
        ),
    ]


def alert_specs(cfg: AlertsConfig) -> list[AlertSpec]:
    return [
        *budget_burn_alerts(cfg), *triton_alerts(cfg), *gpu_alerts(cfg), *review_alerts(cfg), *meta_alerts(cfg)
    ]


def alert_names(cfg: AlertsConfig) -> list[str]:
    return sorted({a.name for a in alert_specs(cfg)})


def alerting_groups(cfg: AlertsConfig) -> list[Group]:
    groups: list[tuple[str, list[AlertSpec]]] = [
        ("tidescale.alerts.slo", budget_burn_alerts(cfg)),
        ("tidescale.alerts.triton", triton_alerts(cfg)),
        ("tidescale.alerts.gpu", gpu_alerts(cfg)),
        ("tidescale.alerts.model-reviews", review_alerts(cfg)),
        ("tidescale.alerts.meta", meta_alerts(cfg)),
    ]
    return [
        {"name": name, "interval": cfg.evaluation_interval, "rules": [s.rule(cfg) for s in specs]}
        for name, specs in groups
    ]
