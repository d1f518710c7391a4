"""`bench --record` writes the checkout's docs/benchmarks, never inside an installed package."""

from __future__ import annotations

from pathlib import Path

from tidescale.benches.report import BENCH_DIR, bench_dir
from tidescale.devstack.tools import REPO_ROOT


def test_a_clone_records_into_its_docs() -> None:
    assert BENCH_DIR == REPO_ROOT / "docs" / "benchmarks"


def test_an_installed_package_records_in_the_working_directory(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "pyproject.toml").write_text("")  # even a stray file there does not make it a checkout
    assert bench_dir(site, env={}, cwd=tmp_path) == tmp_path / "tidescale-benchmarks"
    assert bench_dir(tmp_path / "elsewhere", env={}, cwd=tmp_path) == tmp_path / "tidescale-benchmarks"


def test_the_environment_chooses_first(tmp_path: Path) -> None:
    assert bench_dir(REPO_ROOT, env={"TIDESCALE_BENCH_DIR": str(tmp_path)}) == tmp_path
