"""promtool and amtool on the committed files: rule checks, rule unit tests, Alertmanager config and routes.

The dev stack's side of `tidescale.alerts.check`: the files are the repository's (what the chart
ships, what the promtool tests in `alerts/tests` name), and the tools may come from `.tools/bin`.
The chart's rule files carry the cluster label's placeholder (tidescale.contracts.placeholders):
rule tests run on copies filled as the chart fills them at its default, `cluster`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from tidescale.alerts.check import ToolRun, run_tool
from tidescale.contracts.placeholders import fill
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


def filled_rule_files(dest: Path, rules_dir: Path = RULES_DIR) -> list[Path]:
    """The chart's rule files as the chart renders them at its default cluster label, in *dest*."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for source in rule_files(rules_dir):
        path = dest / source.name
        path.write_text(fill(source.read_text()))
        out.append(path)
    return out


def test_rules(files: Sequence[Path]) -> ToolRun:
    """`promtool test rules` on *files*, with each `rule_files` entry that names one of the chart's
    rule files pointed at its filled copy (the other entries are kept, made absolute)."""
    with tempfile.TemporaryDirectory(prefix="tidescale-rulecheck-") as tmp:
        work = Path(tmp)
        filled = {source.resolve(): copy for source, copy in zip(rule_files(), filled_rule_files(work / "rules"),
                                                                 strict=True)}
        tests = [_on_filled_rules(test, work / str(i), filled) for i, test in enumerate(files)]
        return run_tool([tools.promtool(), "test", "rules", *tests])


def _on_filled_rules(test: Path, work: Path, filled: dict[Path, Path]) -> Path:
    doc = yaml.safe_load(test.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("rule_files"), list):
        return test  # promtool reports what is wrong with it
    named = [(test.parent / str(entry)).resolve() for entry in doc["rule_files"]]
    if not any(path in filled for path in named):
        return test
    doc["rule_files"] = [str(filled.get(path, path)) for path in named]
    work.mkdir(parents=True)
    copy = work / test.name
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    return copy


def check_alertmanager(config: Path = ALERTMANAGER_CONFIG) -> ToolRun:
    return run_tool([tools.amtool(), "check-config", config])


def route_receivers(labels: dict[str, str], config: Path = ALERTMANAGER_CONFIG) -> list[str]:
    """Receivers an alert with *labels* reaches (`amtool config routes test`)."""
    pairs = [f"{k}={v}" for k, v in labels.items()]
    run = run_tool([tools.amtool(), "config", "routes", "test", f"--config.file={config}", *pairs])
    if not run.ok:
        raise RuntimeError(f"amtool config routes test failed: {run.output}")
    return [r.strip() for r in run.stdout.strip().split(",") if r.strip()]
