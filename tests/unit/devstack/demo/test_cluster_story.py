"""The cluster demo's story: its phases, the traffic that outruns maxReplicas, the on-call routes."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from tidescale.contracts.errors import UsageError
from tidescale.contracts.settings import load_settings
from tidescale.devstack.demo.on_cluster import (
    AUTOSCALED_MODEL,
    oncall_routes,
    overload_rate,
    phase_at,
    served_models,
    story,
)
from tidescale.devstack.demo.settings import DemoSettings
from tidescale.devstack.localstack import NotificationSink


def test_the_story_surges_then_outruns_max_replicas_then_recovers() -> None:
    s = DemoSettings(on="cluster", duration_s=300)
    models = served_models(s)
    overload = overload_rate(s, models)
    sc = story(s, overload)
    names = [phase_at(t, 300).name for t in (0, 60, 120, 200, 270)]
    assert names == ["steady", "surge 3x", "calm", "beyond maxReplicas", "recovery"]
    assert [sc.rate(t) for t in (0, 60, 120, 270)] == [s.base_rps, 3 * s.base_rps, s.base_rps, s.base_rps]
    assert sc.rate(200) == overload
    # What maxReplicas replicas of the autoscaled model serve at their largest batch falls short of the overload.
    spec = next(m for m in models if m.name == AUTOSCALED_MODEL)
    share = s.model_mix[AUTOSCALED_MODEL] / sum(s.model_mix.values())
    assert overload * share > 1.1 * s.max_replicas * spec.curve.throughput(spec.max_batch_size)
    assert sc.peak_rps >= max(sc.rate(t) for t in range(300))


def test_pages_and_tickets_route_by_severity_to_the_sink(tmp_path: Path) -> None:
    """The platform team's kps Alertmanager configuration, checked by amtool: critical pages, warnings
    open tickets, and kps's Watchdog goes nowhere."""
    from tidescale.devstack import rulecheck

    sink = NotificationSink(host="10.243.0.1")
    doc = oncall_routes(sink)
    config = tmp_path / "alertmanager.yaml"
    config.write_text(yaml.safe_dump(doc))
    assert rulecheck.check_alertmanager(config).ok
    assert rulecheck.route_receivers({"severity": "critical", "alertname": "X"}, config) == ["pager"]
    assert rulecheck.route_receivers({"severity": "warning", "alertname": "X"}, config) == ["tickets"]
    assert rulecheck.route_receivers({"severity": "none", "alertname": "Watchdog"}, config) == ["null"]
    urls = {r["name"]: r["webhook_configs"][0]["url"] for r in doc["receivers"] if "webhook_configs" in r}
    assert urls["pager"].startswith("http://10.243.0.1:") and urls["pager"].endswith("/pager")


def test_where_the_demo_runs_is_validated() -> None:
    assert load_settings(DemoSettings, on="cluster", autoscaling_mode="adapter").autoscaling_mode == "adapter"
    with pytest.raises(UsageError, match="on"):
        load_settings(DemoSettings, on="kubernetes")


def test_the_summary_names_each_fall_of_the_desired_replicas_under_load() -> None:
    from tidescale.devstack.demo.timeline import Sample, Timeline

    def at(t: float, desired: int | None) -> Sample:
        return Sample(t, 100.0, 90.0, None, None, None, 4, 4, desired, None)

    timeline = Timeline([at(0, 1), at(5, 2), at(10, 4), at(15, 3), at(20, None), at(25, 4), at(30, 2)])
    assert timeline.desired_falls(0, 30) == [{"t": 15, "from": 4, "to": 3}]
    assert timeline.desired_falls(0, 31) == [{"t": 15, "from": 4, "to": 3}, {"t": 30, "from": 4, "to": 2}]
    assert timeline.desired_falls(16, 40) == [{"t": 30, "from": 4, "to": 2}]


def test_the_headline_leaves_the_overload_by_design_apart() -> None:
    from tidescale.devstack.demo.on_cluster import OVERLOAD_PHASE, share_within

    by_phase = {"steady": [100, 100], "surge 3x": [300, 297], OVERLOAD_PHASE: [5000, 60], "recovery": [100, 99]}
    assert share_within([c for name, c in by_phase.items() if name != OVERLOAD_PHASE]) == 0.992
    assert share_within([by_phase[OVERLOAD_PHASE]]) == 0.012
    assert share_within([]) is None


def test_without_a_terminal_the_live_view_is_one_line_every_ten_seconds() -> None:
    import io

    from rich.console import Console

    from tidescale.devstack.demo.run import show
    from tidescale.devstack.demo.timeline import Sample

    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=300)
    for t in range(25):
        show(console, None, Sample(float(t), 50.0, 49.5, 0.01, 0.02, 0.03, 2, 2, 2, 0.5, ("X",)), 300.0, "story: calm")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[1].startswith("t=10/300s story: calm: replicas 2/2 (desired 2)")
    assert lines[1].endswith("P50/P95/P99 10 ms/20 ms/30 ms, queue 0.5, firing X")


def test_the_autoscaled_models_figures_per_phase_count_only_its_requests() -> None:
    from tidescale.devstack.demo.on_cluster import AUTOSCALED_MODEL, REVIEW_MODEL, autoscaled_by_phase
    from tidescale.devstack.demo.settings import DemoSettings
    from tidescale.devstack.fleet.loadgen import RequestRecord

    s = DemoSettings(duration_s=100.0, slo_latency_threshold_s=0.5)
    records = [RequestRecord(1.0, 0, 0.2, 200, AUTOSCALED_MODEL, "a"),
               RequestRecord(2.0, 0, 0.9, 200, AUTOSCALED_MODEL, "a"),
               RequestRecord(3.0, 0, 0.0, 503, AUTOSCALED_MODEL, "a"),
               RequestRecord(4.0, 0, 9.0, 200, REVIEW_MODEL, "a"),  # another model: not counted
               RequestRecord(35.0, 0, 0.1, 200, AUTOSCALED_MODEL, "a")]
    out = autoscaled_by_phase(records, s)
    assert out["steady"] == {"sent": 3, "errors": 1, "requests_within_slo": 0.3333, "latency_p99_s": 0.9}
    assert out["calm"]["sent"] == 1 and out["calm"]["latency_p99_s"] == 0.1
    assert out["recovery"] == {"sent": 0, "errors": 0, "requests_within_slo": None, "latency_p99_s": None}


def test_the_hosts_busy_share_comes_from_proc_stat(tmp_path: Path) -> None:
    from tidescale.devstack.demo.timeline import HostCpu

    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
    cpu = HostCpu(stat)
    stat.write_text("cpu  250 0 150 750 150 0 0 0 0 0\n")  # +300 ticks, of which +100 idle or iowait
    assert cpu.busy() == pytest.approx(0.667, abs=1e-3)
    assert cpu.busy() is None  # no tick since
    stat.write_text("garbage")
    assert cpu.busy() is None
    assert HostCpu(tmp_path / "absent").busy() is None


def test_the_per_pod_rate_counts_each_triton_series_once() -> None:
    from tidescale.devstack.demo.on_cluster import pod_rate_query

    q = pod_rate_query()
    assert q.startswith("sum by (pod) (max by (") and 'model="resnet50"' in q and "[15s]" in q


def test_the_load_spread_is_the_busiest_pods_share_while_two_or_more_are_ready() -> None:
    from tidescale.devstack.demo.timeline import load_spread

    # one pod Ready: not judged; then 3 Ready with one pod carrying 99 %; then 2 Ready sharing evenly
    spread = load_spread([(1, {"a": 20.0}), (3, {"a": 49.5, "b": 0.5, "c": 0.0}), (2, {"a": 10.0, "b": 10.0}),
                          (2, {"a": float("nan"), "b": 0.0}), (2, None)])
    assert spread == {"busiest_pod_share": pytest.approx((0.99 + 0.5) / 2),
                      "even_share": pytest.approx((1 / 3 + 1 / 2) / 2, abs=1e-3)}
    assert load_spread([(1, {"a": 5.0})]) == {"busiest_pod_share": None, "even_share": None}


def test_the_phases_span_the_story_end_to_end() -> None:
    from tidescale.devstack.demo.on_cluster import phase_spans

    spans = phase_spans(300.0)
    assert spans[0][1] == 0.0 and spans[-1][2] == 300.0
    assert all(a[2] == b[1] for a, b in itertools.pairwise(spans))
    assert [name for name, _, _ in spans][1] == "surge 3x" and spans[1][1:] == (30.0, 90.0)
