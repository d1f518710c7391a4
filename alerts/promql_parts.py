"""Small PromQL builders shared by the recording and alerting rules (pure string functions)."""

from __future__ import annotations

from tidescale.contracts import catalog

# Labels kept by per-GPU series after normalisation (dcgm-exporter label variants folded).
GPU_KEYS = "namespace, pod, hostname, gpu, UUID"


def metric(name: str) -> str:
    """A catalog metric name (KeyError names a metric that is not in the catalog)."""
    return catalog.get(name).name


def bucket(name: str) -> str:
    fam = catalog.get(name)
    if fam.type != "histogram":
        raise ValueError(f"{name} is not a histogram")
    return f"{fam.name}_bucket"


def count(name: str) -> str:
    fam = catalog.get(name)
    if fam.type != "histogram":
        raise ValueError(f"{name} is not a histogram")
    return f"{fam.name}_count"


def sum_rate(series: str, by: str, window: str) -> str:
    return f"sum by ({by}) (rate({series}[{window}]))"


def with_label(expr: str, label: str, value: str) -> str:
    """`expr` with a constant label added (label_replace from the empty source label)."""
    return f'label_replace({expr}, "{label}", "{value}", "", "")'


def dcgm_normalized(dcgm_metric: str) -> str:
    """A dcgm-exporter metric with pod/namespace from exported_* when present and `hostname`
    from either `Hostname` or `hostname`, one series per GPU."""
    m = metric(dcgm_metric)
    exported = (
        f'label_replace(label_replace({m}{{exported_pod!=""}}, "pod", "$1", "exported_pod", "(.+)"), '
        f'"namespace", "$1", "exported_namespace", "(.+)")'
    )
    direct = f'{m}{{exported_pod="", pod!=""}}'
    hostname = f'label_replace({exported} or {direct}, "hostname", "$1", "Hostname", "(.+)")'
    return f"max by ({GPU_KEYS}) ({hostname})"


def join_serving_pods(pod_expr: str, serving: str) -> str:
    """Keep only pods that serve a Triton model (join on namespace/pod)."""
    return f"({pod_expr}) and on (namespace, pod) group by (namespace, pod) ({serving})"


def per_model(pod_expr: str, serving: str, agg: str) -> str:
    """Aggregate a per-pod series to the models each pod serves."""
    return f"{agg} by (namespace, model) ({pod_expr} * on (namespace, pod) group_right () {serving})"
