"""dcgm-exporter is read in one place: the GPU recording rules, each through `dcgm_normalized` (both the
4.x and the 4.9 name, the 4.9 unit, one series per GPU). Alerts, dashboards and adapter rules read the
recorded series, so none of them breaks on a rename or counts a GPU scraped twice."""

from __future__ import annotations

import pytest

from tests.paths import REPO
from tests.unit.contracts.test_catalog_promql import promql_in_repo
from tidescale.alerts.config import default_config
from tidescale.alerts.generate import RECORDING
from tidescale.alerts.recording import gpu_group, recording_groups
from tidescale.contracts import catalog
from tidescale.contracts.promql import dcgm_normalized, metric_names

DCGM = frozenset(f.name for f in catalog.families("dcgm"))


def test_nothing_but_the_recording_rules_reads_a_dcgm_exporter_series() -> None:
    reads = promql_in_repo()
    assert any(path == REPO / RECORDING and metric_names(expr) & DCGM for path, expr in reads)  # the check sees them
    raw = sorted({(str(path.relative_to(REPO)), name) for path, expr in reads if path != REPO / RECORDING
                  for name in metric_names(expr) & DCGM})
    assert raw == [], f"raw dcgm-exporter reads outside the recording rules: {raw}"


def test_only_the_gpu_group_reads_dcgm_exporter() -> None:
    others = [g for g in recording_groups(default_config()) if g["name"] != gpu_group(default_config())["name"]]
    assert not {name for g in others for r in g["rules"] for name in metric_names(r["expr"])} & DCGM


@pytest.mark.parametrize("rule", [r for r in gpu_group(default_config())["rules"] if metric_names(r["expr"]) & DCGM],
                         ids=lambda r: r["record"])
def test_every_gpu_rule_reads_dcgm_through_the_normaliser(rule: dict[str, str]) -> None:
    read = metric_names(rule["expr"]) & DCGM
    for name in read:
        rename = catalog.dcgm_rename(name)
        assert rename is None or {rename.legacy, rename.current} <= read, f"{name}: reads one spelling only"
        legacy = rename.legacy if rename else name
        assert dcgm_normalized(legacy) in rule["expr"], f"{name} read outside dcgm_normalized"
    assert "up" in metric_names(rule["expr"])  # tells the dcgm-exporter pod's own labels from a mapped pod


def test_the_normaliser_reads_both_spellings_in_the_4_9_unit() -> None:
    expr = dcgm_normalized("DCGM_FI_DEV_FB_USED")
    assert metric_names(expr) == {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", "up"}
    assert "DCGM_FI_DEV_FB_USED{" in expr and "* 1048576" in expr and "DCGM_FI_DEV_FB_USED_BYTES{" in expr
    assert dcgm_normalized("DCGM_FI_DEV_FB_USED_BYTES") == expr  # either name finds the pair
    assert "/ 100" in dcgm_normalized("DCGM_FI_DEV_GPU_UTIL")
    reasons = dcgm_normalized("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")  # 4.9 kept the name
    assert metric_names(reasons) == {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "up"}
    with pytest.raises(KeyError):
        dcgm_normalized("DCGM_FI_NOT_A_FIELD")
