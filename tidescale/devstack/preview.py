"""Render every dashboard's panels to PNG from live Prometheus queries, so a change can be reviewed
without Grafana (and the demo can show what on-call would see).

Grafana variables are replaced the way an "All" selection would (`.*`), `$__rate_interval` by a
fixed window; each panel becomes one matplotlib axes: lines for time series and heatmaps, the
last values for stat and table panels.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from tidescale.contracts.errors import UsageError
from tidescale.contracts.prometheus import PrometheusClient, PrometheusUnavailable, PrometheusUnreachable

ALL_VALUE = ".*"
DEFAULT_WINDOW_S = 600.0
DEFAULT_RATE_INTERVAL = "30s"
MAX_POINTS = 240
MAX_SERIES_PER_QUERY = 50
_LEGEND_TOKEN = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
_VARIABLE = re.compile(r"\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?")
_DURATION = re.compile(r"^[0-9]+(ms|s|m|h)$")


@dataclass(frozen=True)
class Series:
    """One result series: its labels and (time, value) samples."""

    labels: dict[str, str]
    times: tuple[float, ...]
    values: tuple[float, ...]


@dataclass
class QueryResult:
    expr: str
    legend: str
    series: list[Series] = field(default_factory=list)
    error: str | None = None


@dataclass
class PanelData:
    """A panel with the data its queries returned."""

    title: str
    type: str
    unit: str
    results: list[QueryResult]

    @property
    def has_data(self) -> bool:
        return any(r.series for r in self.results)


def substitute(expr: str, rate_interval: str, values: Mapping[str, str] | None = None) -> str:
    """Replace `$__rate_interval` and the dashboard variables (all values by default)."""
    if not _DURATION.match(rate_interval):
        raise UsageError(f"rate interval {rate_interval!r} is not a duration such as 30s or 1m")
    expr = expr.replace("$__rate_interval", rate_interval)
    chosen = dict(values or {})
    return _VARIABLE.sub(lambda m: chosen.get(m.group(1), ALL_VALUE), expr)


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """Grafana's legendFormat: `{{label}}` replaced by the series' label value."""
    if not fmt:
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "value"
    return _LEGEND_TOKEN.sub(lambda m: labels.get(m.group(1), ""), fmt).strip()


def parse_matrix(payload: Any) -> list[Series]:
    """Series from a Prometheus query_range answer; ValueError names what is malformed."""
    if not isinstance(payload, dict) or payload.get("status") != "success":
        raise ValueError(f"Prometheus answered {str(payload)[:200]!r}")
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise ValueError("expected data.resultType 'matrix' with a result list")
    out = []
    for item in data["result"][:MAX_SERIES_PER_QUERY]:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict) \
                or not isinstance(item.get("values"), list):
            raise ValueError("each result needs a metric object and a values list")
        times, values = [], []
        for point in item["values"]:
            if not isinstance(point, list | tuple) or len(point) != 2:
                raise ValueError(f"sample {point!r} is not [time, value]")
            try:
                t, v = float(point[0]), float(point[1])
            except (TypeError, ValueError):
                raise ValueError(f"sample {point!r} is not numeric") from None
            if math.isfinite(t):
                times.append(t)
                values.append(v)
        out.append(Series({str(k): str(v) for k, v in item["metric"].items()}, tuple(times), tuple(values)))
    return out


def fetch_panels(
    client: PrometheusClient, board: Mapping[str, Any], *, end: float, window_s: float, rate_interval: str,
) -> list[PanelData]:
    """Run every query of every panel of *board* over [end - window_s, end]."""
    from tidescale.dashboards.lint import panels

    step = max(1.0, window_s / MAX_POINTS)
    out = []
    for panel in panels(dict(board)):
        unit = str((panel.get("fieldConfig") or {}).get("defaults", {}).get("unit", ""))
        results = []
        for target in panel.get("targets", []):
            expr = str(target.get("expr", ""))
            result = QueryResult(expr, str(target.get("legendFormat", "")))
            try:
                _status, payload = client.get_json("/api/v1/query_range", params={
                    "query": substitute(expr, rate_interval), "start": end - window_s, "end": end, "step": step})
                result.series = parse_matrix(payload)
            except PrometheusUnreachable:
                raise
            except (PrometheusUnavailable, ValueError) as exc:
                result.error = str(exc)
            results.append(result)
        out.append(PanelData(str(panel.get("title", "")), str(panel.get("type", "")), unit, results))
    return out


def _le(series: Series) -> float:
    try:
        return float(series.labels.get("le", "inf"))
    except ValueError:
        return math.inf


def bucket_counts(buckets: Sequence[Series]) -> list[Series]:
    """Cumulative `le` bucket series -> one series per bucket (its own count), empty buckets dropped.

    Grafana's heatmap does this itself for `format: heatmap`; the preview draws the result as lines.
    """
    ordered = sorted(buckets, key=_le)
    out, previous = [], None
    for s in ordered:
        if previous is not None and previous.times == s.times:
            values = tuple(max(0.0, v - p) for v, p in zip(s.values, previous.values, strict=True))
        else:
            values = s.values
        previous = s
        if any(v > 0 for v in values):
            out.append(Series(s.labels, s.times, values))
    return out


def _draw_panel(ax: Any, panel: PanelData, end: float) -> None:
    ax.set_title(panel.title, fontsize=9)
    ax.tick_params(labelsize=7)
    if not panel.has_data:
        errors = "; ".join(r.error for r in panel.results if r.error)
        ax.text(0.5, 0.5, "No data" + (f"\n{errors[:120]}" if errors else ""), ha="center", va="center",
                fontsize=8, color="grey", transform=ax.transAxes, wrap=True)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    if panel.type in ("stat", "table"):
        lines = [f"{legend(r.legend, s.labels)}: {s.values[-1]:.4g}"
                 for r in panel.results for s in r.series if s.values][:12]
        ax.text(0.02, 0.95, "\n".join(lines), ha="left", va="top", fontsize=8, family="monospace",
                transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel(panel.unit, fontsize=7)
        return
    for r in panel.results:
        for s in bucket_counts(r.series) if panel.type == "heatmap" else r.series:
            ax.plot([t - end for t in s.times], s.values, linewidth=1, label=legend(r.legend, s.labels)[:40])
    ax.set_xlabel("seconds before now", fontsize=7)
    ax.set_ylabel(panel.unit, fontsize=7)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, loc="upper left")


def render_dashboard(title: str, panels: Sequence[PanelData], path: Path, end: float) -> Path:
    """One PNG with a grid of the dashboard's panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    rows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 5.5, rows * 3.2), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        _draw_panel(ax, panel, end)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def collect(prometheus_url: str, *, window_s: float = DEFAULT_WINDOW_S, rate_interval: str = DEFAULT_RATE_INTERVAL,
            end: float | None = None) -> dict[str, list[PanelData]]:
    """uid -> panels with their query results, for every dashboard."""
    from tidescale.dashboards.registry import build_all

    end = time.time() if end is None else end
    with PrometheusClient(prometheus_url, timeout_s=10.0) as client:
        return {uid: fetch_panels(client, board, end=end, window_s=window_s, rate_interval=rate_interval)
                for uid, board in build_all().items()}


def render_previews(prometheus_url: str, out_dir: Path, *, window_s: float = DEFAULT_WINDOW_S,
                    rate_interval: str = DEFAULT_RATE_INTERVAL) -> list[Path]:
    """Write `<uid>.png` for every dashboard into *out_dir*; returns the paths written."""
    from tidescale.dashboards.registry import build_all

    if window_s <= 0:
        raise UsageError(f"window must be positive, got {window_s}")
    out_dir.mkdir(parents=True, exist_ok=True)
    boards = build_all()
    end = time.time()
    data = collect(prometheus_url, window_s=window_s, rate_interval=rate_interval, end=end)
    return [render_dashboard(str(boards[uid].get("title", uid)), panels, out_dir / f"{uid}.png", end)
            for uid, panels in data.items()]


def preview_command(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus base URL, e.g. http://127.0.0.1:9090."),
    out: Path = typer.Option(..., "--out", help="Folder for <uid>.png (created if missing)."),
    window: float = typer.Option(600.0, "--window", help="Seconds of history to plot."),
    rate_interval: str = typer.Option("30s", "--rate-interval", help="What $__rate_interval becomes."),
) -> None:
    """Render each dashboard's panels to PNG from live queries (no Grafana needed)."""
    from tidescale.contracts.errors import UsageError

    if not prometheus.startswith(("http://", "https://")):
        raise UsageError(f"--prometheus must be an http(s) URL, got {prometheus!r}")
    for path in render_previews(prometheus, out, window_s=window, rate_interval=rate_interval):
        typer.echo(str(path))
