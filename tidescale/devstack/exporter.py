"""The exporter as a child process of the dev stack (local stack, benchmarks, tests)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tidescale.devstack.ports import LOOPBACK, free_port
from tidescale.devstack.procs import ManagedProcess


def spawn_exporter(workdir: Path, *, token: str | None, port: int | None = None, env: dict[str, str] | None = None,
          args: Sequence[str] = (), timeout: float = 60.0) -> tuple[ManagedProcess, str]:
    """`tidescale exporter serve` as a ready child process (local stack, benchmarks, tests): (process, URL).

    The child gets this environment plus *env*; OTEL_EXPORTER_OTLP_ENDPOINT is dropped unless
    *env* sets it, so a test's collector never receives the exporter's own spans by accident.
    """
    port = port or free_port()
    child_env = {k: v for k, v in os.environ.items() if k != "OTEL_EXPORTER_OTLP_ENDPOINT"}
    if token is not None:
        child_env["TIDESCALE_EXPORTER_TOKEN"] = token
    child_env.update(env or {})
    argv = [sys.executable, "-m", "tidescale.cli", "exporter", "serve", "--port", str(port), *args]
    proc = ManagedProcess("exporter", argv, workdir / "exporter.log", env=child_env).start()
    url = f"http://{LOOPBACK}:{port}"
    try:
        proc.wait_http(f"{url}/readyz", timeout=timeout)
    except BaseException:
        proc.stop()
        raise
    return proc, url
