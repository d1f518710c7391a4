"""`tidescale alerts check`: what promtool and amtool say of the rules and Alertmanager config you would deploy.

It works wherever tidescale is installed (the image, a user's virtualenv): the files are rendered from
the Python config (yours with `--config`), and promtool and amtool are found on PATH, the names
Prometheus' and Alertmanager's releases (and Debian, `prometheus-alertmanager`'s amtool) install them
under. A missing tool is a usage problem (exit 2) that names it, not a traceback. The dev stack's
`tidescale.devstack.rulecheck` runs the same tools on the committed files through `run_tool`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from tidescale.alerts.config import AlertsConfig
from tidescale.alerts.generate import rendered
from tidescale.contracts.errors import MissingToolError, UsageError

TOOL_TIMEOUT_S = 300.0
RULE_FILES = ("tidescale-recording.yaml", "tidescale-alerts.yaml")  # as `rendered` names them


@dataclass(frozen=True)
class ToolRun:
    ok: bool
    output: str  # stdout and stderr
    stdout: str


def on_path(name: str) -> Path:
    """*name* on PATH; MissingToolError (exit 2) naming it otherwise."""
    found = shutil.which(name)
    if found is None:
        raise MissingToolError(f"{name} not found on PATH: install Prometheus' {name} "
                               "(it ships in the Prometheus or Alertmanager release archive)")
    return Path(found)


def run_tool(argv: Sequence[str | Path], timeout_s: float = TOOL_TIMEOUT_S) -> ToolRun:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout_s, check=False)
    return ToolRun(proc.returncode == 0, proc.stdout + proc.stderr, proc.stdout)


def test_files(tests_dir: Path) -> list[Path]:
    """The promtool rule-test files in *tests_dir*; a missing or empty folder is a usage error."""
    if not tests_dir.is_dir():
        raise UsageError(f"--tests {tests_dir}: not a directory")
    files = sorted(tests_dir.glob("*.yaml"))
    if not files:
        raise UsageError(f"--tests {tests_dir}: no *.yaml promtool test files in it")
    return files


def check_rendered(cfg: AlertsConfig, tests_dir: Path | None = None) -> dict[str, ToolRun]:
    """Check name -> run, for the rules and Alertmanager config rendered from *cfg*.

    Each rule test runs on a copy whose `rule_files` entries named like a rendered file
    (`tidescale-recording.yaml`, `tidescale-alerts.yaml`, wherever they pointed) point at the rendered
    one: the tests are checked against the rules of *cfg*, not against whatever file they named.
    """
    promtool = on_path("promtool")
    amtool = on_path("amtool")
    tests = test_files(tests_dir) if tests_dir is not None else []
    with tempfile.TemporaryDirectory(prefix="tidescale-alerts-check-") as tmp:
        work = Path(tmp)
        for name, content in rendered(cfg).items():
            (work / name).write_text(content)
        rules = [work / name for name in RULE_FILES]
        runs = {"promtool check rules": run_tool([promtool, "check", "rules", *rules])}
        if tests:
            copies = [_retargeted(source, work) for source in tests]
            runs["promtool test rules"] = run_tool([promtool, "test", "rules", *copies])
        runs["amtool check-config"] = run_tool([amtool, "check-config", work / "alertmanager.yaml"])
        return runs


def _retargeted(source: Path, work: Path) -> Path:
    """A copy of the promtool test *source* in *work* whose rendered rule files are *work*'s."""
    try:
        doc = yaml.safe_load(source.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"{source}: not a readable promtool test file: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rule_files", []), list):
        raise UsageError(f"{source}: not a promtool test file (a mapping with a rule_files list)")
    names = set(RULE_FILES)
    doc["rule_files"] = [str(work / Path(str(f)).name) if Path(str(f)).name in names else str(f)
                         for f in doc.get("rule_files", [])]
    copy = work / f"test-{source.name}"
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    return copy
