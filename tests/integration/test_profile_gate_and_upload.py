"""The release gate as CI runs it (the installed CLI, exit codes), and captures posted to a live exporter
the way `tidescale profile capture --post` does, read back from /metrics and /v1/profiles."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.paths import FIXTURES, REPO
from tidescale.devstack.exporter import spawn_exporter
from tidescale.exporters.profiles.capture import post

pytestmark = pytest.mark.integration
TF = FIXTURES / "profiles" / "tensorflow"
TOKEN = "profile-gate-token"


def gate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidescale.cli", "profile", "report", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_gate_fails_the_string_heavy_model_and_passes_the_fixed_one() -> None:
    bad = gate("--json", str(TF / "ctr_string_ops.xplane.pb"))
    assert bad.returncode == 1, bad.stderr
    report = json.loads(bad.stdout)
    assert report["op_class_share"]["string"] > 0.05 and report["violations"]
    good = gate(str(TF / "ctr_int_ids.xplane.pb"))
    assert good.returncode == 0, good.stderr
    assert "PASS" in good.stderr
    usage = gate("--max-share", "bogus=1", str(TF / "ctr_int_ids.xplane.pb"))
    assert usage.returncode == 2 and "bogus" in usage.stderr and "Traceback" not in usage.stderr


@pytest.fixture(scope="module")
def exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = spawn_exporter(tmp_path_factory.mktemp("exp"), token=TOKEN)
    try:
        yield url
    finally:
        proc.stop()


def test_posted_capture_becomes_op_share_metrics(exporter: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    capture = tmp_path_factory.mktemp("cap") / "host.xplane.pb"
    capture.write_bytes((TF / "ctr_string_ops.xplane.pb").read_bytes())
    post([capture], exporter, "ctr", "7", TOKEN)
    report = httpx.get(f"{exporter}/v1/profiles/ctr/7", timeout=10).json()
    assert report["op_class_share"]["string"] == pytest.approx(0.09, abs=0.005)
    metrics = httpx.get(f"{exporter}/metrics", timeout=10).text
    line = next(ln for ln in metrics.splitlines()
                if ln.startswith("tidescale_op_time_share{") and 'op_class="string"' in ln and 'model="ctr"' in ln)
    assert float(line.rsplit(" ", 1)[1]) == pytest.approx(0.09, abs=0.005)
    assert "tidescale_profile_age_seconds{" in metrics


def _bomb(inflated: int) -> bytes:
    """A gzip member of *inflated* bytes (a trace opening, then spaces), built chunk by chunk."""
    import zlib

    comp = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    parts = [comp.compress(b'{"traceEvents": [')]
    block = b" " * (1 << 20)
    parts += [comp.compress(block) for _ in range(inflated >> 20)]
    parts.append(comp.flush())
    return b"".join(parts)


def test_bad_uploads_get_a_clear_4xx(exporter: str) -> None:
    auth = {"authorization": f"Bearer {TOKEN}"}
    bomb = _bomb(1100 << 20)  # inflates past the store's default cap of 1 GiB
    resp = httpx.post(f"{exporter}/v1/profiles", params={"model": "m", "version": "1"}, content=bomb,
                      headers=auth, timeout=120)
    assert resp.status_code == 413 and resp.json()["detail"], resp.text
    cut = (TF / "ctr_int_ids.trace_viewer.json.gz").read_bytes()[:5000]
    resp = httpx.post(f"{exporter}/v1/profiles", params={"model": "m", "version": "1"}, content=cut,
                      headers=auth, timeout=60)
    assert resp.status_code == 400 and "gzip" in resp.json()["detail"]
    resp = httpx.post(f"{exporter}/v1/profiles", params={"model": "m\nx", "version": "1"},
                      content=(TF / "ctr_int_ids.xplane.pb").read_bytes(), headers=auth, timeout=60)
    assert resp.status_code in (400, 422)
