"""What `pip install .` (and so the image) ships: the product, and none of the simulator or dev stack.

The wheel is built from a copy of the sources, as the image's build stage does, then unpacked and run
on its own (the dev checkout's editable install shadowed): every product module imports, and every
product command answers `--help`, without the areas the layout marks as dev.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.integration

LAYOUT = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["tidescale"]["layout"]
# Definitions that model the outside world or serve development, by the module they live in now.
DEV_ONLY = ("class ServiceCurve", "class HpaEmulator", "def encode_protobuf", "def encode_json",
            "def find_binary", "class FleetSim")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    for folder in ("tidescale", *LAYOUT["product"]):
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
                          "-w", str(out), str(src)], capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    (built,) = out.glob("tidescale-*.whl")
    return built


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    return target


def test_the_wheel_holds_the_product_and_no_dev_area(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    packages = {"/".join(n.split("/")[:2]) for n in names if n.startswith("tidescale/") and n.count("/") >= 2}
    assert {f"tidescale/{f}" for f in ("contracts", *LAYOUT["product"])} <= packages
    assert not packages & {f"tidescale/{area}" for area in LAYOUT["dev"]}
    assert "tidescale/alerts/check.py" in names and "tidescale/autoscaler/hpa.py" in names


def test_no_shipped_module_defines_a_simulator_or_dev_tool(site: Path) -> None:
    found = [f"{path.relative_to(site)}: {marker}" for path in (site / "tidescale").rglob("*.py")
             for marker in DEV_ONLY if marker + "(" in path.read_text() or marker + ":" in path.read_text()]
    assert found == []


def _run_installed(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    # -I would drop the venv's dependencies too; the code drops the editable install's finder first, so
    # that the wheel's tidescale (first on PYTHONPATH) is the one imported, and checks that it is.
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(site)}
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=site, capture_output=True, text=True, timeout=300,
                          check=False)


def test_every_product_module_and_command_runs_from_the_wheel_alone(site: Path) -> None:
    code = f"""
import importlib, pkgutil, sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
import tidescale
assert tidescale.__file__.startswith({str(site)!r}), tidescale.__file__
for info in pkgutil.walk_packages(tidescale.__path__, "tidescale."):
    importlib.import_module(info.name)
for area in {LAYOUT["dev"]!r}:
    assert importlib.util.find_spec("tidescale." + area) is None, area
from typer.testing import CliRunner
from tidescale.cli import app
runner = CliRunner()
top = runner.invoke(app, ["--help"])
assert top.exit_code == 0, top.output
for group in ("exporter", "profile", "autoscale", "reviews", "alerts", "dashboards"):
    assert group in top.output, group
    result = runner.invoke(app, [group, "--help"])
    assert result.exit_code == 0, (group, result.output)
for dev in ("demo", "bench", "fleet", "cluster", "generate"):
    assert runner.invoke(app, [dev, "--help"]).exit_code == 2, dev
print("ok")
"""
    run = _run_installed(site, code)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
