"""Panel helpers on top of grafana-foundation-sdk: every panel gets a unit, a description and `$datasource`.

Making unit and description required arguments is how the dashboard-linter rules
(panel-units, panel-title-description, panel-datasource) hold by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m
from grafana_foundation_sdk.models import prometheus as prom_m

from tidescale.contracts.placeholders import CLUSTER_LABEL
from tidescale.contracts.promql import keep_labels

DATASOURCE = common_m.DataSourceRef(type_val="prometheus", uid="${datasource}")
PanelBuilder = cogbuilder.Builder[dash_m.Panel]


@dataclass(frozen=True)
class Query:
    """One PromQL target: expression, legend, and whether it is an instant (table/stat) query."""

    expr: str
    legend: str = ""
    instant: bool = False
    heatmap: bool = False


@dataclass(frozen=True)
class Threshold:
    """A line drawn at *value* (e.g. an SLO or the review threshold) and the colour above it."""

    value: float
    color: str = "red"


# A series' legend ends with its cluster: with several clusters selected (Thanos, Mimir) the same
# model in two clusters is two lines told apart; with one Prometheus per cluster it is empty.
CLUSTER_LEGEND = f" {{{{{CLUSTER_LABEL}}}}}"


def _targets(queries: Sequence[Query]) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    """Every query keeps the cluster label in each `by` and `on`, as the rules do (`keep_labels`):
    with "All" clusters a panel never adds two clusters up, and a join never matches a pod of one
    cluster with a pod of the same name in another."""
    out: list[cogbuilder.Builder[cogvariants.Dataquery]] = []
    for i, q in enumerate(queries):
        expr = keep_labels(q.expr, [CLUSTER_LABEL])
        target = prometheus.Dataquery().expr(expr).ref_id(chr(ord("A") + i)).datasource(DATASOURCE)
        if q.legend:
            # A heatmap's legend is its bucket bound: nothing may follow it.
            target = target.legend_format(q.legend if q.heatmap else q.legend + CLUSTER_LEGEND)
        if q.instant:
            target = target.instant().format(prom_m.PromQueryFormat.TABLE)
        if q.heatmap:
            target = target.format(prom_m.PromQueryFormat.HEATMAP)
        out.append(target)
    return out


def _threshold_steps(thresholds: Sequence[Threshold], base: str = "green") -> dash_b.ThresholdsConfig:
    steps = [dash_m.Threshold(value=None, color=base)]
    steps += [dash_m.Threshold(value=t.value, color=t.color) for t in thresholds]
    return dash_b.ThresholdsConfig().mode(dash_m.ThresholdsMode.ABSOLUTE).steps(steps)


def graph(
    title: str, description: str, unit: str, queries: Sequence[Query], *,
    span: int = 12, height: int = 8, thresholds: Sequence[Threshold] = (), stacked: bool = False,
    min_value: float | None = None,
) -> PanelBuilder:
    """A time series panel; thresholds are drawn as dashed lines."""
    panel = (timeseries.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
             .span(span).height(height).targets(_targets(queries)).fill_opacity(10).line_width(1)
             .legend(common_b.VizLegendOptions().show_legend(True)
                     .display_mode(common_m.LegendDisplayMode.TABLE)
                     .placement(common_m.LegendPlacement.BOTTOM).calcs(["lastNotNull", "max"]))
             .tooltip(common_b.VizTooltipOptions().mode(common_m.TooltipDisplayMode.MULTI)
                      .sort(common_m.SortOrder.DESCENDING)))
    if min_value is not None:
        panel = panel.min(min_value)
    if thresholds:
        panel = panel.thresholds(_threshold_steps(thresholds)).thresholds_style(
            common_b.GraphThresholdsStyleConfig().mode(common_m.GraphThresholdsStyleMode.DASHED))
    if stacked:
        panel = panel.stacking(common_b.StackingConfig().mode(common_m.StackingMode.NORMAL)).fill_opacity(40)
    return panel


def single_stat(
    title: str, description: str, unit: str, queries: Sequence[Query], *,
    span: int = 6, height: int = 5, thresholds: Sequence[Threshold] = (), base_color: str = "green",
) -> PanelBuilder:
    """A stat panel showing the last value of each series, coloured by thresholds."""
    return (stat.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
            .span(span).height(height).targets(_targets(queries))
            .thresholds(_threshold_steps(thresholds, base_color))
            .color_mode(common_m.BigValueColorMode.BACKGROUND)
            .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"])))


def table_of(
    title: str, description: str, unit: str, queries: Sequence[Query], *, span: int = 12, height: int = 8,
) -> PanelBuilder:
    """A table of instant query results (one row per series), labels as columns."""
    return (table.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
            .span(span).height(height).targets(_targets(queries))
            .with_transformation(dash_m.DataTransformerConfig(id_val="merge", options={})))


def heatmap_of(title: str, description: str, unit: str, query: Query, *, span: int = 12,
               height: int = 8) -> PanelBuilder:
    """A heatmap of histogram buckets (`format: heatmap`, buckets already rated)."""
    return (heatmap.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
            .span(span).height(height).targets(_targets([query]))
            .calculate(False))


def row(title: str) -> dash_b.Row:
    return dash_b.Row(title)
