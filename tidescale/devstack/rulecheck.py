"""promtool and amtool on the committed files: rule checks, rule unit tests, Alertmanager config and routes.

The dev stack's side of `tidescale.alerts.check`: the files are the repository's (what the chart
ships, what the promtool tests in `alerts/tests` name), and the tools may come from `.tools/bin`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tidescale.alerts.check import ToolRun, run_tool
from tidescale.devstack import tools
from tidescale.devstack.tools import CHART_FILES, REPO_ROOT

RULES_DIR = CHART_FILES / "rules"
TESTS_DIR = REPO_ROOT / "alerts" / "tests"
ALERTMANAGER_CONFIG = CHART_FILES / "alertmanager" / "alertmanager.yaml"


def rule_files(rules_dir: Path = RULES_DIR) -> list[Path]:
    return sorted(rules_dir.glob("*.yaml"))


def test_files(tests_dir: Path = TESTS_DIR) -> list[Path]:
    return sorted(tests_dir.glob("*.yaml"))


def check_rules(files: Sequence[Path]) -> ToolRun:
    return run_tool([tools.promtool(), "check", "rules", *files])


def test_rules(files: Sequence[Path]) -> ToolRun:
    return run_tool([tools.promtool(), "test", "rules", *files])


def check_alertmanager(config: Path = ALERTMANAGER_CONFIG) -> ToolRun:
    return run_tool([tools.amtool(), "check-config", config])


def route_receivers(labels: dict[str, str], config: Path = ALERTMANAGER_CONFIG) -> list[str]:
    """Receivers an alert with *labels* reaches (`amtool config routes test`)."""
    pairs = [f"{k}={v}" for k, v in labels.items()]
    run = run_tool([tools.amtool(), "config", "routes", "test", f"--config.file={config}", *pairs])
    if not run.ok:
        raise RuntimeError(f"amtool config routes test failed: {run.output}")
    return [r.strip() for r in run.stdout.strip().split(",") if r.strip()]
