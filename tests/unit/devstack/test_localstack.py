"""The local stack's wiring that needs no servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from tidescale.devstack.fleet.fleet import TritonFleet
from tidescale.devstack.localstack import LocalStack, NotificationSink, StackOptions
from tidescale.devstack.promstack import PrometheusServer


def test_relative_work_directories_become_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # tritonserver runs in its pod folder, so a relative --out (the demo default) must be resolved first.
    monkeypatch.chdir(tmp_path)
    assert LocalStack(Path("demo-out/run")).workdir == tmp_path / "demo-out" / "run"
    assert TritonFleet(Path("fleet")).workdir.is_absolute()
    assert PrometheusServer(Path("prom")).workdir.is_absolute()


def test_curve_scale_slows_every_model_and_the_capacity_follows(tmp_path: Path) -> None:
    fast = LocalStack(tmp_path, StackOptions(curve_scale=1.0))
    slow = LocalStack(tmp_path, StackOptions(curve_scale=4.0, cold_start_s=3))
    for a, b in zip(fast.models(), slow.models(), strict=True):
        assert b.curve.exec_seconds(8) == pytest.approx(4 * a.curve.exec_seconds(8))
        assert b.load_seconds == 3
    assert slow._capacity_rps() == pytest.approx(fast._capacity_rps() / 4)


def test_exporter_targets_are_written_in_file_sd_format(tmp_path: Path) -> None:
    class Replica:
        http_url = "http://127.0.0.1:8000"
        labels: ClassVar[dict[str, str]] = {"namespace": "ns", "pod": "triton-abc-1"}

    stack = LocalStack(tmp_path)
    stack._write_exporter_targets([Replica()])
    from tidescale.exporters.targets import Target, parse_targets_file

    assert parse_targets_file(stack.targets_file.read_text()) == [Target("http://127.0.0.1:8000", "ns", "triton-abc-1")]


def test_notification_sink_records_alert_names() -> None:
    sink = NotificationSink()
    handler = sink._handler("pager")
    assert handler({}, b"not json")[0] == 400
    body = json.dumps({"alerts": [{"labels": {"alertname": "GPUXidErrors"}}]}).encode()
    assert handler({}, body)[0] == 200
    assert sink.alert_names() == {"pager": ["GPUXidErrors"]}


@pytest.mark.parametrize("duration", [20.0, 30.0, 60.0, 300.0, 3600.0])
def test_faults_leave_one_alert_evaluation_before_the_summary(duration: float) -> None:
    from tidescale.devstack.demo.run import ALERT_DELIVERY_S, ALERT_GROUP_INTERVAL_S, fault_time, settle_seconds

    at = fault_time(duration)
    assert 0 < at <= duration / 2
    # From the fault to the final read there is always a full group interval plus delivery time.
    assert (duration - at) + settle_seconds(duration, at) >= ALERT_GROUP_INTERVAL_S + ALERT_DELIVERY_S
    assert settle_seconds(duration, None) == 3.0


def test_replica_crashes_show_in_the_live_table_and_the_summary() -> None:
    from rich.console import Console

    from tidescale.devstack.demo.run import crash_rows, render_table
    from tidescale.devstack.demo.timeline import Sample
    from tidescale.devstack.fleet.fleet import ReplicaCrash

    def shown(crashes: int) -> str:
        sample = Sample(t=12.0, offered_rps=80.0, completed_rps=40.0, p50_s=0.1, p95_s=0.3, p99_s=0.4,
                        replicas_ready=0, replicas_total=1, replicas_desired=1, queue_depth=3.0,
                        replica_crashes=crashes)
        console = Console(width=200, record=True)
        console.print(render_table(sample, 30.0, "diurnal-surge"))
        return console.export_text()

    assert "0/1 (1 crashed)" in shown(1) and "crashed" not in shown(0)
    rows = crash_rows([ReplicaCrash("triton-x-aaaaa", at=1015.25, exit_code=139, signal=11)], started_at=1000.0)
    assert rows == [{"pod": "triton-x-aaaaa", "at_s": 15.2, "exit_code": 139, "signal": 11}]
