"""The image carries the product only: each product command runs without the dev stack, the simulator
or the benchmarks, and without the dev-stack extra's packages (matplotlib, tritonclient, pytriton).

Each command runs in a fresh interpreter, for real where it is cheap (`--help` where it would start
a server), and then the test reads `sys.modules`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import FIXTURES

FORBIDDEN = ("tidescale.devstack", "tidescale.benches", "tidescale.sim", "matplotlib", "tritonclient", "pytriton")

PROBE = """
import json, sys
from tidescale.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
forbidden = sorted(m for m in sys.modules if m.split(".")[0] in {"matplotlib", "tritonclient", "pytriton"}
                   or m.startswith(("tidescale.devstack", "tidescale.benches", "tidescale.sim")))
print("\\n" + json.dumps({"code": code, "forbidden": forbidden}))
"""


def run_command(*args: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def product_commands(tmp: Path) -> list[list[str]]:
    profile = FIXTURES / "profiles" / "tensorflow" / "ctr_int_ids.framework_op_stats.json"
    return [
        ["--version"],
        ["exporter", "serve", "--help"],
        ["reviews", "serve", "--help"],
        ["autoscale", "recommend", "--help"],
        ["autoscale", "render", "--deployment", "triton", "--namespace", "serving", "--model", "resnet50", "--keda"],
        ["alerts", "render", "--out", str(tmp / "alerts")],
        ["dashboards", "lint"],
        ["dashboards", "list"],
        ["dashboards", "export", "--out", str(tmp / "boards"), "--cluster-label", "k8s_cluster"],
        ["profile", "report", str(profile)],
    ]


@pytest.mark.parametrize("index", range(10))
def test_product_command_imports_no_dev_stack(tmp_path: Path, index: int) -> None:
    args = product_commands(tmp_path)[index]
    result = run_command(*args)
    assert result["code"] in (0, None), (args, result)
    assert result["forbidden"] == [], args


def test_the_probe_sees_a_dev_stack_import() -> None:
    """A dev-stack command does import the dev stack, so the probe above can fail."""
    result = run_command("fleet", "--help")
    assert any(str(m).startswith("tidescale.devstack") for m in result["forbidden"])  # type: ignore[attr-defined]


def test_a_dev_stack_command_without_its_extra_names_the_extra() -> None:
    """Without the devstack extra a benchmark exits 2 naming it, instead of a ModuleNotFoundError traceback."""
    probe = (
        "import tidescale.benches.percentiles as bench\n"
        "def run_command(**_kw):\n"
        "    raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n"
        "bench.run_command = run_command\n"
        "from tidescale.cli import main\n"
        "main(['bench', 'percentiles', '--quick'])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "tidescale[devstack]" in out.stderr and "Traceback" not in out.stderr


def test_other_missing_modules_still_raise() -> None:
    probe = (
        "import tidescale.benches.percentiles as bench\n"
        "def run_command(**_kw):\n"
        "    raise ModuleNotFoundError(\"No module named 'nothing_like_it'\", name='nothing_like_it')\n"
        "bench.run_command = run_command\n"
        "from tidescale.cli import main\n"
        "main(['bench', 'percentiles', '--quick'])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "ModuleNotFoundError" in out.stderr


def test_help_works_where_the_dev_stack_is_not_installed() -> None:
    """The image removes tidescale.devstack and tidescale.benches and runs `tidescale --help` by default."""
    probe = (
        "import sys, importlib.abc\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[:2] in (['tidescale', 'devstack'], ['tidescale', 'benches']):\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Hide())\n"
        "from tidescale.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    shown = subprocess.run([sys.executable, "-c", probe, "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "exporter" in shown.stdout and "demo" not in shown.stdout and "bench" not in shown.stdout
    demo = subprocess.run([sys.executable, "-c", probe, "demo"], capture_output=True, text=True, timeout=120)
    assert demo.returncode == 2 and "Traceback" not in demo.stderr
