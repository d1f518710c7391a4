"""The CLI surface: groups exist, usage errors exit 2 with a message and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GROUPS = ["demo", "fleet", "exporter", "profile", "autoscale", "reviews", "dashboards", "bench"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidescale.cli", *args], capture_output=True, text=True, timeout=60)


def test_help_lists_every_group() -> None:
    out = run("--help")
    assert out.returncode == 0
    for group in GROUPS:
        assert group in out.stdout


@pytest.mark.parametrize("args", [["no-such-command"], ["demo", "--no-such-flag"]])
def test_usage_errors_exit_2_without_traceback(args: list[str]) -> None:
    out = run(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr


def test_generated_artifacts_have_no_drift() -> None:
    from tidescale.devstack.artifacts import drift

    assert drift() == []


@pytest.mark.parametrize(("args", "message"), [
    (["demo", "--scenario", "tsunami"], "unknown scenario 'tsunami'"),
    (["demo", "--min-replicas", "5", "--max-replicas", "2"], "min_replicas (5) > max_replicas (2)"),
    (["demo", "--duration", "-3"], "demo.duration_s"),
    (["demo", "--trace-unit", "min"], "demo.trace_unit"),
])
def test_demo_rejects_bad_settings_before_starting_anything(args: list[str], message: str) -> None:
    out = run(*args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_demo_names_the_bad_line_of_a_trace_csv(tmp_path: Path) -> None:
    bad = tmp_path / "trace.csv"
    bad.write_text("TIMESTAMP,x\n2023-11-16 18:15:46.68,1\nnot-a-time,2\n")
    out = run("demo", "--trace-csv", str(bad), "--duration", "5")
    assert out.returncode == 2
    assert "trace.csv:3" in out.stderr
    bad.write_text("offset\n0\n1200000\n3600000\n")  # relative milliseconds under no unit: 42 days as seconds
    out = run("demo", "--trace-csv", str(bad), "--duration", "5", "--trace-unit", "us")
    assert out.returncode == 2 and "spans 0.18 s at time-scale 0.05; a replay needs a second or more" in out.stderr
