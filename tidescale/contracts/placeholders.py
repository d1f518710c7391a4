"""What the chart fills in, as explicit tokens in the generated files: no regex over PromQL.

The generators write the chart's rules, dashboards and KEDA query with these tokens wherever a
value of the chart belongs (the label that tells clusters apart, this cluster's name); the chart
replaces each token whole (`tidescale.fill`), and every other reader of the generated files (the
dev stack's Prometheus and Grafana, the promtool tests) fills them the same way with `fill`.

A token is a valid label name or label value, so an unfilled file still parses as PromQL.
"""

from __future__ import annotations

from typing import Final

# values `clusterLabel`: the external label of a Thanos or Mimir holding several clusters.
CLUSTER_LABEL: Final = "tidescale_placeholder_cluster_label"
# values `autoscaling.cluster`: this cluster's value of that label.
CLUSTER: Final = "tidescale-placeholder-cluster"
# values.yaml's `clusterLabel`, kubernetes-mixin's default.
DEFAULT_CLUSTER_LABEL: Final = "cluster"


def fill(text: str, cluster_label: str = DEFAULT_CLUSTER_LABEL) -> str:
    """*text* with the cluster-label token replaced, as the chart renders it for `clusterLabel`."""
    return text.replace(CLUSTER_LABEL, cluster_label)


def chart_tokens() -> dict[str, str]:
    """The tokens by the chart value that replaces them (files/placeholders.yaml)."""
    return {"clusterLabel": CLUSTER_LABEL, "cluster": CLUSTER}
