"""`tidescale alerts check` from an installed package: rendered rules, tools on PATH, exit 2 without them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO
from tidescale.alerts.check import check_rendered
from tidescale.alerts.config import AlertsConfig
from tidescale.cli import main
from tidescale.contracts.errors import UsageError

TESTS = REPO / "alerts" / "tests"
pytestmark = pytest.mark.skipif(not (shutil.which("promtool") and shutil.which("amtool")),
                                reason="promtool/amtool not on PATH (scripts/setup.sh installs them)")


def _exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return int(exited.value.code or 0)


def test_the_committed_tests_pass_against_the_rendered_rules(tmp_path: Path) -> None:
    # One test file, copied to a folder with nothing else: its rule_files named the repository's copies,
    # which the check must replace with the freshly rendered ones.
    folder = tmp_path / "tests"
    folder.mkdir()
    shutil.copy(TESTS / "gpuxiderrors.yaml", folder)
    runs = check_rendered(AlertsConfig(), folder)
    assert list(runs) == ["promtool check rules", "promtool test rules", "amtool check-config"]
    assert all(run.ok for run in runs.values()), {k: r.output for k, r in runs.items()}


def test_a_test_that_the_rendered_rules_fail_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load((TESTS / "gpuxiderrors.yaml").read_text())
    doc["tests"][0]["alert_rule_test"][0]["exp_alerts"] = [{"exp_labels": {"severity": "none"}}]
    folder = tmp_path / "tests"
    folder.mkdir()
    (folder / "broken.yaml").write_text(yaml.safe_dump(doc))
    assert _exit_code(["alerts", "check", "--tests", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "FAIL promtool test rules" in err and "promtool test rules failed" in err


def test_missing_tools_are_a_usage_error_naming_the_tool(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", os.devnull)
    assert _exit_code(["alerts", "check"]) == 2
    assert "promtool not found on PATH" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["- not a mapping\n", "rule_files: 7\n", "{{{\n"])
def test_a_malformed_test_file_is_a_usage_error(tmp_path: Path, content: str) -> None:
    (tmp_path / "bad.yaml").write_text(content)
    with pytest.raises(UsageError, match="bad.yaml"):
        check_rendered(AlertsConfig(), tmp_path)


def test_a_tests_folder_without_tests_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no \\*.yaml"):
        check_rendered(AlertsConfig(), tmp_path)
