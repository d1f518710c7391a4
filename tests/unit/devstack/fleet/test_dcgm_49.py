"""dcgm-exporter 4.9: the catalog's 4.x/4.9 pairs agree with the rename table compiled from upstream
(tests/fixtures/dcgm/dcgm-exporter-4.9-renames.csv, sources in its header), and the simulated exporter's
4.9 shape is the 4.x one renamed and converted, field by field."""

from __future__ import annotations

import csv
import math

import pytest

from tests.clocks import ManualClock
from tests.paths import REPO
from tidescale.contracts import catalog
from tidescale.contracts.errors import UsageError
from tidescale.devstack.fleet.exposition import parse
from tidescale.devstack.fleet.gpus import FIELDS, GpuAssignment, SimulatedGpuNode, fields

RENAMES_CSV = REPO / "tests" / "fixtures" / "dcgm" / "dcgm-exporter-4.9-renames.csv"


def renames() -> list[dict[str, str]]:
    lines = [line for line in RENAMES_CSV.read_text().splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(lines))


class Replica:
    pod, namespace, http_url = "triton-abcde-x7k2q", "tidescale-demo", "http://127.0.0.1:1"

    def alive(self) -> bool:
        return True

    def set_slowdown(self, factor: float) -> None:
        pass


def node(version: str) -> SimulatedGpuNode:
    """One GPU held by a pod, busy 75 % of the last 2 s, leaking, one free GPU: the same state per version."""
    busy, clock = [10.0], ManualClock()
    gpus = [GpuAssignment(Replica(), model_memory_mib=4096), GpuAssignment()]  # type: ignore[arg-type]
    n = SimulatedGpuNode("node-a", gpus, busy_reader=lambda _: busy[0], clock=clock, dcgm_version=version)
    n.sample()
    n.inject_fb_leak(3.5, gpu=0)
    n.inject_xid(79, gpu=0)
    clock.now, busy[0] = 2.0, 11.5
    n.sample()
    return n


def test_the_catalog_pairs_are_the_compiled_rename_table() -> None:
    rows = renames()
    assert len(rows) == len(catalog.DCGM_RENAMES) == 24
    assert sum(float(r["factor"]) != 1 for r in rows) == 11  # the release notes' eleven unit changes
    for row in rows:
        pair = catalog.dcgm_rename(row["legacy"])
        assert pair is not None and pair == catalog.dcgm_rename(row["current"]), row
        assert (pair.legacy, pair.current, pair.factor) == (row["legacy"], row["current"], float(row["factor"]))
        old, new = catalog.get(row["legacy"]), catalog.get(row["current"])
        assert (new.type, new.unit, new.source) == (row["type"], row["unit"], "dcgm"), row
        assert new.labels == old.labels and "DCGM_FI_SYSTEM_DRIVER_VERSION" in new.optional_labels
        assert row["sources"].strip(), row


def test_the_simulated_4_9_exporter_serves_only_the_4_9_names() -> None:
    ours = parse(node("4.9").render())
    assert list(ours) == list(fields("4.9"))
    renamed = {r["legacy"]: r["current"] for r in renames()}
    assert set(ours) == {renamed.get(name, name) for name in FIELDS}
    assert not set(ours) & set(renamed)  # no 4.x name left
    rows = {r["current"]: r for r in renames()}
    for name, fam in ours.items():
        assert fam.type == catalog.get(name).type and fam.help == catalog.get(name).help, name
        if name in rows:
            assert fam.type == rows[name]["type"], name


def test_4_9_labels_rename_hostname_and_the_driver_version_and_keep_their_places() -> None:
    old, new = parse(node("4.x").render()), parse(node("4.9").render())
    swap = {"Hostname": "hostname", "DCGM_FI_DRIVER_VERSION": "DCGM_FI_SYSTEM_DRIVER_VERSION"}
    for legacy, current in zip(FIELDS, fields("4.9"), strict=True):
        for a, b in zip(old[legacy].samples, new[current].samples, strict=True):
            assert b.label_keys == tuple(swap.get(k, k) for k in a.label_keys), current
            assert [b.label_dict[swap.get(k, k)] for k in a.label_keys] == list(a.label_dict.values())
    xid = new["DCGM_FI_DEV_XID_ERROR"].samples[0].label_dict
    assert xid["err_code"] == "79" and xid["hostname"] == "node-a"
    assert new["DCGM_FI_DEV_GPU_UTIL_RATIO"].samples[0].label_dict["pod"] == "triton-abcde-x7k2q"


def test_4_9_values_are_the_4_x_values_in_the_new_units() -> None:
    old, new = parse(node("4.x").render()), parse(node("4.9").render())
    for legacy, current in zip(FIELDS, fields("4.9"), strict=True):
        pair = catalog.dcgm_rename(legacy)
        factor = pair.factor if pair else 1.0
        for a, b in zip(old[legacy].samples, new[current].samples, strict=True):
            tolerance = 1.0 if current == "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL" else 1e-9  # whole joules
            assert math.isclose(b.value, a.value * factor, rel_tol=1e-12, abs_tol=tolerance), (current, a, b)
    gpu0 = {name: fam.samples[0].value for name, fam in new.items()}
    assert gpu0["DCGM_FI_DEV_GPU_UTIL_RATIO"] == 0.75
    assert gpu0["DCGM_FI_DEV_FB_USED_BYTES"] == (420 + 4096 + 7) * 1048576  # 2 s of a 3.5 MiB/s leak
    assert gpu0["DCGM_FI_DEV_SM_CLOCK_HERTZ"] == 1410 * 10**6
    assert 0 < gpu0["DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"] < 1000


def test_4_9_values_are_written_as_dcgm_writes_them() -> None:
    text = node("4.9").render()
    line: dict[str, str] = {}
    for ln in text.splitlines():
        if ln.startswith("DCGM_"):
            line.setdefault(ln.split("{")[0], ln.rsplit(" ", 1)[1])  # GPU 0's
    assert line["DCGM_FI_DEV_GPU_UTIL_RATIO"] == "0.750000"  # a double, %f
    assert line["DCGM_FI_DEV_FB_USED_BYTES"].isdigit() and line["DCGM_FI_DEV_SM_CLOCK_HERTZ"].isdigit()


def test_4_x_stays_the_default_and_other_versions_are_refused() -> None:
    assert SimulatedGpuNode("n", [GpuAssignment()]).dcgm_version == "4.x"
    assert fields() == FIELDS
    with pytest.raises(UsageError, match="4.x, 4.9"):
        SimulatedGpuNode("n", [GpuAssignment()], dcgm_version="5.0")
