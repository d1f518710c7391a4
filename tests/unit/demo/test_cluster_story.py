"""The cluster demo's story: its phases, the traffic that outruns maxReplicas, the on-call routes."""

from __future__ import annotations

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
    from tidescale.alerts import tooling

    sink = NotificationSink(host="10.243.0.1")
    doc = oncall_routes(sink)
    config = tmp_path / "alertmanager.yaml"
    config.write_text(yaml.safe_dump(doc))
    assert tooling.check_alertmanager(config).ok
    assert tooling.route_receivers({"severity": "critical", "alertname": "X"}, config) == ["pager"]
    assert tooling.route_receivers({"severity": "warning", "alertname": "X"}, config) == ["tickets"]
    assert tooling.route_receivers({"severity": "none", "alertname": "Watchdog"}, config) == ["null"]
    urls = {r["name"]: r["webhook_configs"][0]["url"] for r in doc["receivers"] if "webhook_configs" in r}
    assert urls["pager"].startswith("http://10.243.0.1:") and urls["pager"].endswith("/pager")


def test_where_the_demo_runs_is_validated() -> None:
    assert load_settings(DemoSettings, on="cluster", autoscaling_mode="adapter").autoscaling_mode == "adapter"
    with pytest.raises(UsageError, match="on"):
        load_settings(DemoSettings, on="kubernetes")
