"""What the dashboards add on top of the one PromQL vocabulary (tidescale.contracts.promql).

Panels read the recording rules (tidescale.contracts.recorded), as kubernetes-mixin does: a
dashboard, an alert and the autoscaler then show the same number, and a panel does not redo at
every refresh what the rule manager already computed. Only series no rule aggregates are read
raw; `dashboards.lint.RAW_SERIES` lists them with the reason. Label filters use the dashboard
variables (`$cluster`, `$namespace`, `$model`), which Grafana substitutes and regex-escapes itself.
"""

from __future__ import annotations

from tidescale.contracts import catalog, recorded
from tidescale.contracts.placeholders import CLUSTER_LABEL
from tidescale.contracts.promql import join_serving_pods, metric

RATE_INTERVAL = "$__rate_interval"
# The label that tells clusters apart (values `clusterLabel`, filled in by the chart) against the
# `$cluster` variable; "All" (.*) also matches series without it, so one Prometheus per cluster
# needs nothing.
CLUSTER = f'{CLUSTER_LABEL}=~"$cluster"'
NS = f'{CLUSTER}, namespace=~"$namespace"'
NS_MODEL = f'{NS}, model=~"$model"'
# Profiles carry model and version only: the exporter's own namespace would be wrong for the model.
MODEL_ONLY = f'{CLUSTER}, model=~"$model"'

# Stages of tidescale_request_duration_seconds (exporters.latency.STAGES, from Triton trace timestamps).
STAGE_REQUEST = "request"
STAGE_QUEUE = "queue"
STAGE_COMPUTE = "compute_infer"

# Quantile -> its recorded series (histogram summed over pods before the quantile).
QUANTILES: tuple[tuple[float, str], ...] = ((0.5, recorded.P50), (0.95, recorded.P95), (0.99, recorded.P99))


def series_name(name: str) -> str:
    """A recording rule's name or a catalog series (`_bucket` of a histogram included) as is,
    else the catalog's family name (KeyError names an unknown one)."""
    if name in recorded.all_names() or name in catalog.all_series_names():
        return name
    return metric(name)


def sel(name: str, matchers: str = NS_MODEL) -> str:
    """`name{matchers}` for a recorded series or a catalog metric."""
    full = series_name(name)
    return f"{full}{{{matchers}}}" if matchers else full


def agg(op: str, by: str, name: str, matchers: str = NS_MODEL) -> str:
    """`op by (by) (name{matchers})`: reduce a recorded series to the labels a panel shows."""
    return f"{op} by ({by}) ({sel(name, matchers)})"


def ratio(numerator: str, denominator: str) -> str:
    """numerator / denominator; a zero denominator gives no sample rather than NaN/Inf."""
    return f"({numerator}) / ({denominator} > 0)"


def stage_quantile(recorded_quantile: str, stage: str) -> str:
    """A recorded percentile of one stage per model (the worst namespace when several match)."""
    return agg("max", "model", recorded_quantile, f'{NS_MODEL}, stage="{stage}"')


def of_serving_pods(name: str, by: str) -> str:
    """A recorded per-pod (or per-GPU) series, kept for the pods serving the selected models."""
    return join_serving_pods(agg("max", by, name, NS), sel(recorded.MODEL_POD_SERVING))


def hpa_by_deployment(name: str, deployments: str = ".*") -> str:
    """A kube-state-metrics HPA gauge re-keyed by the Deployment the HPA scales."""
    info = sel("kube_horizontalpodautoscaler_info",
               f'{NS}, scaletargetref_kind="Deployment", scaletargetref_name=~"{deployments}"')
    joined = (f"{sel(name, NS)} * on (namespace, horizontalpodautoscaler) "
              f"group_left (scaletargetref_name) {info}")
    relabelled = f'label_replace({joined}, "deployment", "$1", "scaletargetref_name", "(.+)")'
    return f"max by (namespace, deployment) ({relabelled})"
