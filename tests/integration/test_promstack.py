"""The real Prometheus and Alertmanager runners: file_sd targets, rules, alert delivery."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidescale.devstack.promstack import AlertmanagerServer, PrometheusServer, ScrapeTarget

pytestmark = pytest.mark.integration

ALWAYS_FIRING = """
groups:
- name: test
  rules:
  - record: job:up:sum
    expr: sum by (job) (up)
  - alert: TestAlwaysFiring
    expr: vector(1)
    labels: {severity: info}
    annotations: {summary: always}
"""

AM_CONFIG = """
route: {receiver: null-receiver, group_wait: 0s, group_interval: 1s}
receivers: [{name: null-receiver}]
"""


def test_prometheus_scrapes_file_sd_targets_evaluates_rules_and_notifies(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(ALWAYS_FIRING)
    am_cfg = tmp_path / "am.yaml"
    am_cfg.write_text(AM_CONFIG)
    with AlertmanagerServer(tmp_path / "am", am_cfg) as am:
        prom = PrometheusServer(tmp_path / "prom", rule_files=[rules], alertmanager_url=am.url)
        # Prometheus scrapes itself, labelled like a pod.
        prom.set_targets([ScrapeTarget("self", f"127.0.0.1:{prom.port}", {"namespace": "ns", "pod": "p-0"})])
        with prom:
            targets = prom.wait_for_targets_up(count=1)
            assert targets[0]["labels"]["pod"] == "p-0"
            assert prom.wait_for('job:up:sum{job="self"} == 1')
            # A second job added while running (new job -> config reload).
            prom.set_targets([
                ScrapeTarget("self", f"127.0.0.1:{prom.port}", {"namespace": "ns", "pod": "p-0"}),
                ScrapeTarget("am", am.url.split("//")[1], {"namespace": "ns", "pod": "am-0"}),
            ])
            assert len(prom.wait_for_targets_up(count=2, timeout=30)) == 2
            prom.wait_for('ALERTS{alertname="TestAlwaysFiring", alertstate="firing"}')
            import time

            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not am.alerts():
                time.sleep(0.5)
            assert [a["labels"]["alertname"] for a in am.alerts()] == ["TestAlwaysFiring"]
