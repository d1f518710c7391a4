"""The one PromQL vocabulary: rules, dashboards, adapter/KEDA queries and the recommender build with it.

Label values that reach a query are escaped, never pasted raw; metric names come from the catalog."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tidescale.contracts import catalog

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def escape_label_value(value: str) -> str:
    """A PromQL double-quoted string literal body: backslash, quote and newlines escaped."""
    return (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    )


def matcher(name: str, value: str, op: str = "=") -> str:
    if not LABEL_NAME.match(name):
        raise ValueError(f"invalid label name {name!r}")
    if op not in ("=", "!=", "=~", "!~"):
        raise ValueError(f"invalid matcher operator {op!r}")
    return f'{name}{op}"{escape_label_value(value)}"'


def selector(metric: str, **labels: str) -> str:
    """`metric{a="x",b="y"}` with every value escaped."""
    if not LABEL_NAME.match(metric.replace(":", "_")):
        raise ValueError(f"invalid metric name {metric!r}")
    if not labels:
        return metric
    return metric + "{" + ",".join(matcher(k, v) for k, v in labels.items()) + "}"


def regex_escape(value: str) -> str:
    """Escape a literal for use inside a `=~` matcher (RE2), then as a PromQL string."""
    return re.sub(r"([.*+?^${}()|\[\]\\])", r"\\\1", value)


# --- building expressions (rules, dashboards, adapter and KEDA queries, the recommender) -----------
# Labels kept by per-GPU series after normalisation (dcgm-exporter label variants folded): the GPU
# (hostname, gpu, UUID; `keep_labels` adds the cluster) and the pod it is mapped to (empty for none).
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


# --- Triton series scraped more than once --------------------------------------------------------
# A cluster that already scrapes Triton (the platform team's own ServiceMonitor, kube-prometheus-stack's
# additional scrape configs) beside the chart's PodMonitor holds two copies of every series, equal but
# for job/instance/endpoint/service/container and whatever target labels that monitor adds. A sum over
# them counts every request twice, so every read of a Triton series first keeps one copy per series
# identity: the pod it came from and the family's own labels, and nothing a scrape adds.
_SERIES_SUFFIXES = ("_bucket", "_sum", "_count")


def _triton_family(series: str) -> str:
    """The catalog family of a Triton series name (histograms and summaries add suffixes)."""
    base = series.split("{", 1)[0]
    for name in (base, *(base[: -len(s)] for s in _SERIES_SUFFIXES if base.endswith(s))):
        try:
            fam = catalog.get(name)
        except KeyError:
            continue
        if fam.source == "triton":
            return fam.name
    raise ValueError(f"{base} is not a Triton series in the catalog")


def triton_identity(series: str) -> tuple[str, ...]:
    """The labels that tell one Triton series from another, however many jobs scrape its pod: the
    namespace and pod (every prometheus-operator monitor sets them on the target), the family's labels
    (model, version, reason, gpu_uuid) and, for a histogram bucket or summary, le / quantile. The
    rules' cluster label joins them where rules are rendered (`keep_labels`)."""
    fam = catalog.get(_triton_family(series))
    base = series.split("{", 1)[0]
    own = [label for label in (*fam.labels, *fam.optional_labels) if label not in ("namespace", "pod")]
    extra = ["le"] if base.endswith("_bucket") else ["quantile"] if fam.type == "summary" and base == fam.name else []
    return ("namespace", "pod", *own, *extra)


def scraped_once(expr: str, series: str) -> str:
    """*expr* (a selector of the Triton *series*, or a function of one, such as its rate) with one
    copy per series identity, whichever jobs scraped it (the max of equal copies is the value)."""
    return f"max by ({', '.join(triton_identity(series))}) ({expr})"


def _sum(by: str | None, expr: str) -> str:
    return f"sum by ({by}) ({expr})" if by is not None else f"sum({expr})"


def triton_sum_rate(series: str, by: str | None, window: str) -> str:
    """`sum by (by) (rate(series[window]))` over a Triton series scraped once or several times alike
    (a plain `sum` when *by* is None). *series* may carry matchers: `nv_inference_request_success{model="x"}`."""
    return _sum(by, scraped_once(f"rate({series}[{window}])", series))


def triton_sum(series: str, by: str | None = None) -> str:
    """`sum by (by) (series)` of a Triton gauge, scraped once or several times alike."""
    return _sum(by, scraped_once(series, series))


_GROUPING = re.compile(r"\b(by|on)\s*\(([^)]*)\)")


def keep_labels(expr: str, labels: Sequence[str]) -> str:
    """*expr* with *labels* first in every `by (…)` and `on (…)`, as kubernetes-mixin's clusterLabel:
    in a Thanos or Mimir that holds several clusters an aggregation never adds two clusters up and a
    join never matches across them. Where the label is absent it changes nothing."""
    def grouped(match: re.Match[str]) -> str:
        present = [x.strip() for x in match.group(2).split(",") if x.strip()]
        return f"{match.group(1)} ({', '.join([*(x for x in labels if x not in present), *present])})"

    return _GROUPING.sub(grouped, expr) if labels else expr


def with_label(expr: str, label: str, value: str) -> str:
    """`expr` with a constant label added (label_replace from the empty source label)."""
    return f'label_replace({expr}, "{label}", "{value}", "", "")'


def _scaled(series: str, factor: float) -> str:
    """*series* times *factor*; a division where the factor is 1/n, so 4.x's 80 % reads 0.8 exactly."""
    if factor == 1:
        return series
    if factor < 1 and (1 / factor).is_integer():
        return f"{series} / {1 / factor:.12g}"
    return f"{series} * {factor:.12g}"


def dcgm_series(dcgm_metric: str, matchers: str = "", *, scaled: bool = True) -> str:
    """Both spellings of a dcgm-exporter field (4.x and 4.9, linked in the catalog), in the 4.9 unit:
    the 4.x series scaled (utilisation % -> ratio, MiB -> bytes, MHz -> Hz, mJ -> J), or the 4.9 one."""
    metric(dcgm_metric)
    braces = f"{{{matchers}}}" if matchers else ""
    rename = catalog.dcgm_rename(dcgm_metric)
    if rename is None:
        return f"{dcgm_metric}{braces}"
    legacy = _scaled(f"{rename.legacy}{braces}", rename.factor if scaled else 1)
    return f"({legacy} or {rename.current}{braces})"


def dcgm_exporter_pods(dcgm_metric: str) -> str:
    """(namespace, pod) of every dcgm-exporter pod that serves *dcgm_metric*: the target labels of `up`
    for the scrape targets (job, instance) the field comes from, whatever the job is called."""
    targets = f"group by (job, instance) ({dcgm_series(dcgm_metric, scaled=False)})"
    return f"group by (namespace, pod) ({metric('up')} and on (job, instance) {targets})"


def dcgm_normalized(dcgm_metric: str) -> str:
    """A dcgm-exporter field (either name, in the 4.9 unit), one series per GPU and the pod it is mapped to.

    A GPU is (cluster, hostname from `Hostname` or `hostname`, gpu, UUID). Its pod is the pod-mapped one:
    `exported_pod`/`exported_namespace` behind a ServiceMonitor with honorLabels: false, else `pod`/
    `namespace` unless those are the dcgm-exporter pod's own target labels (a GPU no pod holds), which
    leave the GPU with no pod. Taking the max over whatever else differs (job, instance, service,
    endpoint, container, the driver-version label) counts a GPU scraped by two jobs once."""
    exporters = dcgm_exporter_pods(dcgm_metric)
    with_exported = dcgm_series(dcgm_metric, 'exported_pod!=""')
    exported = (
        f'label_replace(label_replace({with_exported}, "pod", "$1", "exported_pod", "(.+)"), '
        f'"namespace", "$1", "exported_namespace", "(.+)")'
    )
    mapped = dcgm_series(dcgm_metric, 'exported_pod="", pod!=""')
    direct = f"({mapped} unless on (namespace, pod) {exporters})"
    podless = dcgm_series(dcgm_metric, 'exported_pod="", pod=""')
    unmapped = f"({podless} or ({mapped} and on (namespace, pod) {exporters}))"
    no_pod = f'label_replace(label_replace({unmapped}, "pod", "", "", ""), "namespace", "", "", "")'
    hostname = f'label_replace({exported} or {direct} or {no_pod}, "hostname", "$1", "Hostname", "(.+)")'
    return f"max by ({GPU_KEYS}) ({hostname})"


def join_serving_pods(pod_expr: str, serving: str) -> str:
    """Keep only pods that serve a Triton model (join on namespace/pod)."""
    return f"({pod_expr}) and on (namespace, pod) group by (namespace, pod) ({serving})"


def per_model(pod_expr: str, serving: str, agg: str) -> str:
    """Aggregate a per-pod series to the models each pod serves."""
    return f"{agg} by (namespace, model) ({pod_expr} * on (namespace, pod) group_right () {serving})"


# --- reading PromQL --------------------------------------------------------------------------------

_CHILD_ATTRS = ("lhs", "rhs", "expr", "args", "param", "vector_selector")
# Grafana and prometheus-adapter template variables, replaced by parseable stand-ins.
_TEMPLATE_SUBS = (
    (re.compile(r"\$__rate_interval|\$__interval|\$__range|\$\{__\w+\}"), "5m"),
    (re.compile(r"<<\s*\.Series\s*>>"), "__series__"),
    (re.compile(r"<<\s*\.LabelMatchers\s*>>"), 'namespace="x"'),
    (re.compile(r"<<\s*\.GroupBy\s*>>"), "namespace"),
    (re.compile(r"\[\[\s*\w+\s*\]\]|\$\{\w+(:\w+)?\}|\$\w+"), "x"),
)


def substitute_templates(expr: str) -> str:
    """Replace Grafana (`$__rate_interval`, `$model`) and adapter (`<<.Series>>`) templates."""
    for pattern, repl in _TEMPLATE_SUBS:
        expr = pattern.sub(repl, expr)
    return expr


def metric_names(expr: str) -> set[str]:
    """Every metric name a PromQL expression selects (templates substituted first)."""
    import promql_parser

    names: set[str] = set()

    def walk(node: object) -> None:
        if type(node).__name__ == "VectorSelector":
            name = getattr(node, "name", None)
            if name:
                names.add(name)
            for m in getattr(getattr(node, "matchers", None), "matchers", []) or []:
                if m.name == "__name__":
                    names.add(m.value)
            return
        for attr in _CHILD_ATTRS:
            child = getattr(node, attr, None)
            if isinstance(child, list):
                for c in child:
                    walk(c)
            elif child is not None and not isinstance(child, str | int | float):
                walk(child)

    walk(promql_parser.parse(substitute_templates(expr)))
    names.discard("__series__")
    return names


# Aggregations under which two equal copies of a series count once.
_DEDUP_SAFE = frozenset({"max", "min", "group"})


def triton_reads_counted_twice(expr: str) -> list[str]:
    """The Triton series in *expr* that a second scrape of the pods would count twice: read outside
    any `max`/`min`/`group` (or `absent`), or under a `sum`/`avg`/`count`/... nearer to it than one.
    Empty for queries built with `triton_sum_rate`, `triton_sum` and `scraped_once`."""
    import promql_parser

    found: list[str] = []

    def is_triton(name: str | None) -> bool:
        try:
            return bool(name) and bool(_triton_family(name or ""))
        except ValueError:
            return False

    def walk(node: object, safe: bool) -> None:
        kind = type(node).__name__
        if kind == "VectorSelector":
            name = getattr(node, "name", None)
            if is_triton(name) and not safe:
                found.append(str(name))
            return
        if kind == "AggregateExpr":
            safe = str(getattr(node, "op", "")) in _DEDUP_SAFE
        elif kind == "Call" and getattr(getattr(node, "func", None), "name", "") in ("absent", "absent_over_time"):
            safe = True
        for attr in _CHILD_ATTRS:
            child = getattr(node, attr, None)
            for c in child if isinstance(child, list) else [child]:
                if c is not None and not isinstance(c, str | int | float):
                    walk(c, safe)

    walk(promql_parser.parse(substitute_templates(expr)), False)
    return found
