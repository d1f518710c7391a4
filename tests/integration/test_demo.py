"""The README's demo, short: real Triton replicas, Prometheus, Alertmanager, exporter, reviews, autoscaler."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    proc = subprocess.run(
        [sys.executable, "-m", "tidescale.cli", "demo", "--on", "local", "--duration", "30", "--out", str(out),
         "--no-live", "--cold-start", "2"],
        capture_output=True, text=True, timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_summary_reports_a_healthy_run(demo_out: Path) -> None:
    summary = json.loads((demo_out / "summary.json").read_text())
    assert summary["scenario"] == "diurnal-surge"
    assert summary["triton"]["server_version"] == "2.51.0"
    prom = summary["prometheus"]
    assert prom["targets_total"] >= 3 and prom["targets_up"] == prom["targets_total"]
    assert {"triton", "dcgm-exporter", "kube-state-metrics", "tidescale-exporter"} <= set(prom["jobs"])
    assert 0 < summary["latency_p50_s"] <= summary["latency_p99_s"]
    assert summary["requests"]["ok"] > 0
    assert sum(summary["requests"]["errors_by_status"].values()) == summary["requests"]["errors"]
    replicas = summary["replicas"]
    assert 0 <= replicas["min"] <= replicas["max"] and replicas["max"] >= 1
    if not replicas["crashes"]:
        assert replicas["min"] >= 1, f"no Ready replica at some point, yet no crash reported: {replicas}"
    else:
        # tritonserver 2.51 itself has crashed here (SIGSEGV in its HTTP frontend during the surge, seen
        # once in CI): the demo restarts the pod like the kubelet and reports it. Only a crash may leave
        # the fleet without a Ready replica (the supervisor notices an exit within half a second).
        first_crash = min(c["at_s"] for c in replicas["crashes"])
        rows = json.loads((demo_out / "timeline.json").read_text())
        assert all(r["replicas_ready"] >= 1 for r in rows if r["t"] < first_crash - 1.0), replicas
        assert all(c["signal"] is not None or c["exit_code"] is not None for c in replicas["crashes"])
    assert isinstance(summary["alerts_fired"], list) and isinstance(summary["reviews_opened"], list)
    # The injected XID error pages through the real Alertmanager to the local pager receiver.
    assert "GPUXidErrors" in summary["alerts_fired"]
    assert summary["faults_injected"]["profile"]["string_share"] == pytest.approx(0.3, abs=0.01)


def test_plots_previews_and_timeline_are_written(demo_out: Path) -> None:
    for name in ("load_vs_replicas.png", "latency_percentiles.png", "queue_depth.png"):
        assert (demo_out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((demo_out / "summary.json").read_text())
    assert len(summary["dashboard_previews"]) == 5
    for rel in summary["dashboard_previews"]:
        assert (demo_out / rel).stat().st_size > 1000
    rows = json.loads((demo_out / "timeline.json").read_text())
    assert len(rows) >= 20 and rows[-1]["t"] > rows[0]["t"]


def test_every_child_process_is_gone(demo_out: Path) -> None:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(demo_out) not in ps
