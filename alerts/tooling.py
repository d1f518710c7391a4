"""promtool and amtool runs: rule checks, rule unit tests, Alertmanager config and route checks."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tidescale.contracts import tools
from tidescale.contracts.tools import CHART_FILES, REPO_ROOT

RULES_DIR = CHART_FILES / "rules"
TESTS_DIR = REPO_ROOT / "alerts" / "tests"
ALERTMANAGER_CONFIG = CHART_FILES / "alertmanager" / "alertmanager.yaml"


@dataclass(frozen=True)
class ToolRun:
    ok: bool
    output: str  # stdout and stderr
    stdout: str


def _run(argv: Sequence[str | Path], timeout_s: float = 300) -> ToolRun:
    proc = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    return ToolRun(proc.returncode == 0, proc.stdout + proc.stderr, proc.stdout)


def rule_files(rules_dir: Path = RULES_DIR) -> list[Path]:
    return sorted(rules_dir.glob("*.yaml"))


def test_files(tests_dir: Path = TESTS_DIR) -> list[Path]:
    return sorted(tests_dir.glob("*.yaml"))


def check_rules(files: Sequence[Path]) -> ToolRun:
    return _run([tools.promtool(), "check", "rules", *files])


def test_rules(files: Sequence[Path]) -> ToolRun:
    return _run([tools.promtool(), "test", "rules", *files])


def check_alertmanager(config: Path = ALERTMANAGER_CONFIG) -> ToolRun:
    return _run([tools.amtool(), "check-config", config])


def route_receivers(labels: dict[str, str], config: Path = ALERTMANAGER_CONFIG) -> list[str]:
    """Receivers an alert with *labels* reaches (`amtool config routes test`)."""
    pairs = [f"{k}={v}" for k, v in labels.items()]
    run = _run([tools.amtool(), "config", "routes", "test", f"--config.file={config}", *pairs])
    if not run.ok:
        raise RuntimeError(f"amtool config routes test failed: {run.output}")
    return [r.strip() for r in run.stdout.strip().split(",") if r.strip()]
