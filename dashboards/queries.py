"""PromQL for the dashboards: catalog metric names, Grafana variables, `$__rate_interval` everywhere.

Every metric name goes through `metric()`, which looks it up in the catalog, so a dashboard can
never query a family nobody produces. Label filters use the dashboard variables (`$namespace`,
`$model`), which Grafana substitutes and regex-escapes itself.
"""

from __future__ import annotations

from tidescale.contracts import catalog

RATE_INTERVAL = "$__rate_interval"
NS_MODEL = 'namespace=~"$namespace", model=~"$model"'
NS = 'namespace=~"$namespace"'

# Stages of tidescale_request_duration_seconds (exporters.latency.STAGES, from Triton trace timestamps).
STAGE_REQUEST = "request"
STAGE_QUEUE = "queue"
STAGE_COMPUTE = "compute_infer"

QUANTILES = (0.5, 0.95, 0.99)


def metric(name: str) -> str:
    """The catalog's name for *name* (KeyError names an unknown metric)."""
    return catalog.get(name).name


def series(name: str, suffix: str) -> str:
    """A histogram/summary series name (`_bucket`, `_sum`, `_count`) of a catalog family."""
    full = f"{metric(name)}{suffix}"
    if full not in catalog.series_names(catalog.get(name)):
        raise KeyError(f"{full!r} is not a series of {name!r}")
    return full


def sel(name: str, matchers: str = NS_MODEL) -> str:
    """`name{matchers}` for a catalog metric."""
    return f"{metric(name)}{{{matchers}}}" if matchers else metric(name)


def rate(selector: str) -> str:
    return f"rate({selector}[{RATE_INTERVAL}])"


def sum_rate(selector: str, by: str) -> str:
    """Counters are always aggregated: `sum by (...) (rate(...))`."""
    return f"sum by ({by}) ({rate(selector)})"


def histogram_quantile(q: float, bucket_selector: str, by: str) -> str:
    """Aggregatable quantile over pods: sum the bucket rates by `le` first."""
    return f"histogram_quantile({q}, sum by (le, {by}) ({rate(bucket_selector)}))"


def ratio(numerator: str, denominator: str) -> str:
    """numerator / denominator; a zero denominator gives no sample rather than NaN/Inf."""
    return f"({numerator}) / ({denominator} > 0)"


def stage_quantile(q: float, stage: str, by: str = "model") -> str:
    bucket = series("tidescale_request_duration_seconds", "_bucket")
    return histogram_quantile(q, f'{bucket}{{{NS_MODEL}, stage="{stage}"}}', by)


def triton_stage_mean_seconds(duration_counter: str, by: str = "model") -> str:
    """Mean stage time per request from Triton's cumulative µs counters (works without traces)."""
    per_request = ratio(sum_rate(sel(duration_counter), by),
                        sum_rate(sel("nv_inference_request_success"), by))
    return f"{per_request} / 1e6"


def serving_pods(matchers: str = NS_MODEL) -> str:
    """The (namespace, pod) pairs serving the selected models: a filter for per-pod series."""
    return f"group by (namespace, pod) ({sel('nv_inference_request_success', matchers)})"


def dcgm(name: str, by: str = "namespace, pod, gpu") -> str:
    """A dcgm-exporter gauge per serving pod and GPU.

    dcgm-exporter's pod mapping labels become `exported_pod`/`exported_namespace` behind a
    ServiceMonitor with `honorLabels: false`; both spellings are accepted by copying the
    exported_* values over `pod`/`namespace` when present, then keeping only the pods that
    serve the selected models.
    """
    renamed = metric(name)
    for label in ("pod", "namespace"):
        renamed = f'label_replace({renamed}, "{label}", "$1", "exported_{label}", "(.+)")'
    return f"max by ({by}) ({renamed}) and on (namespace, pod) {serving_pods()}"


def hpa_by_deployment(name: str, deployments: str = ".*") -> str:
    """A kube-state-metrics HPA gauge re-keyed by the Deployment the HPA scales."""
    info = sel("kube_horizontalpodautoscaler_info",
               f'{NS}, scaletargetref_kind="Deployment", scaletargetref_name=~"{deployments}"')
    joined = (f"{sel(name, NS)} * on (namespace, horizontalpodautoscaler) "
              f"group_left (scaletargetref_name) {info}")
    relabelled = f'label_replace({joined}, "deployment", "$1", "scaletargetref_name", "(.+)")'
    return f"max by (namespace, deployment) ({relabelled})"
