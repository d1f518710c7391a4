"""The CLI surface: groups exist, usage errors exit 2 with a message and no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

GROUPS = ["demo", "sim", "exporter", "profile", "autoscale", "reviews", "dashboards", "bench"]


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
    from tidescale.artifacts import drift

    assert drift() == []
