"""Where the external binaries live: tritonserver (nvidia-pytriton), Prometheus, Alertmanager, helm,
perf_analyzer.

`scripts/setup.sh` installs all of them; every lookup failure says so.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tidescale.contracts.errors import MissingToolError

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_BIN = REPO_ROOT / ".tools" / "bin"
TOOLS_LIB = REPO_ROOT / ".tools" / "lib"  # shared libraries of the tools in TOOLS_BIN (perf_analyzer's libcudart)
# Every generated artifact (rules, Alertmanager config, dashboards, adapter config) is committed once,
# here, where the chart reads it; the tools, the dev stack and the tests read the same files.
CHART_FILES = REPO_ROOT / "deploy" / "helm" / "tidescale" / "files"
SETUP_HINT = "run `bash scripts/setup.sh` from the repository root"
# Real output of the systems tidescale plugs into (Triton, dcgm-exporter, the profilers), committed with
# the tests; the tests and the benchmarks that run from a checkout read it. Provenance: its README.md.
FIXTURES = REPO_ROOT / "tests" / "fixtures"


def find_binary(*names: str) -> Path:
    """First of *names* on PATH or in .tools/bin; MissingToolError otherwise."""
    for name in names:
        local = TOOLS_BIN / name
        if local.is_file() and os.access(local, os.X_OK):
            return local
        found = shutil.which(name)
        if found:
            return Path(found)
    raise MissingToolError(f"{names[0]} not found on PATH or in {TOOLS_BIN}: {SETUP_HINT}")


def prometheus() -> Path:
    return find_binary("prometheus")


def promtool() -> Path:
    return find_binary("promtool")


def alertmanager() -> Path:
    # Debian names the binary prometheus-alertmanager.
    return find_binary("prometheus-alertmanager", "alertmanager")


def amtool() -> Path:
    return find_binary("amtool")


def helm() -> Path:
    return find_binary("helm")


@dataclass(frozen=True)
class TritonInstall:
    """The tritonserver bundled in nvidia-pytriton, and the environment it needs to run here."""

    binary: Path
    backend_dir: Path

    def env(self) -> dict[str, str]:
        """Environment for tritonserver: libpython of this interpreter first, the venv's bin first.

        Without this the python backend stub loads the system libpython with the venv's stdlib
        and model load fails (`'_thread.RLock' object has no attribute '_recursion_count'`).
        """
        env = dict(os.environ)
        libdir = sysconfig.get_config_var("LIBDIR") or ""
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p)
        venv_bin = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join((venv_bin, env.get("PATH", "")))
        return env


def triton() -> TritonInstall:
    try:
        import pytriton  # type: ignore[import-untyped]
    except ImportError as exc:
        raise MissingToolError(f"nvidia-pytriton is not installed: {SETUP_HINT}") from exc
    base = Path(pytriton.__file__).parent / "tritonserver"
    binary = base / "bin" / "tritonserver"
    backend_dir = base / "backends"
    stub = backend_dir / "python" / "triton_python_backend_stub"
    if not binary.exists():
        raise MissingToolError(f"tritonserver missing from nvidia-pytriton ({binary}): {SETUP_HINT}")
    if not stub.exists():
        raise MissingToolError(f"python backend stub not installed at {stub}: {SETUP_HINT}")
    return TritonInstall(binary=binary, backend_dir=backend_dir)


@dataclass(frozen=True)
class PerfAnalyzerInstall:
    """Triton's perf_analyzer (from tritonclient 2.51's wheel) and the library directory it needs."""

    binary: Path
    lib_dir: Path | None  # holds libcudart.so.12; None when the system provides it

    def env(self) -> dict[str, str]:
        """This environment with `lib_dir` first on LD_LIBRARY_PATH."""
        env = dict(os.environ)
        if self.lib_dir is not None:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (str(self.lib_dir), env.get("LD_LIBRARY_PATH", "")) if p)
        return env


def perf_analyzer() -> PerfAnalyzerInstall:
    """perf_analyzer from .tools/bin or PATH; MissingToolError when absent (it may still fail to run:
    it also links libb64, a Debian package setup installs)."""
    binary = find_binary("perf_analyzer")
    lib_dir = TOOLS_LIB if (TOOLS_LIB / "libcudart.so.12").is_file() else None
    return PerfAnalyzerInstall(binary=binary, lib_dir=lib_dir)
