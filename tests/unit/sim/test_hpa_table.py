"""The emulator against the HPA table (tests/hpa_table.py), on an exact 15 s sync clock; the e2e suite
runs the same table against the real controller."""

from __future__ import annotations

import pytest
import yaml

from tests.hpa_table import CASES, SYNC_S, HpaCase, on_the_sync_clock, replay
from tidescale.autoscaler.hpa import spec_to_dict
from tidescale.devstack.tools import REPO_ROOT


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_emulator_makes_the_tables_decisions(case: HpaCase) -> None:
    assert len(case.values) == len(case.expected)
    assert tuple(replay(case, on_the_sync_clock(case))) == case.expected


def test_a_late_sync_changes_what_a_window_sees() -> None:
    # The shipped case at t=90 s still counts the scale-down of t=75 s (9 -> 4) within its policy's
    # 30 s period, so it may not go under half of 9. Were that sync 20 s late, the period would start
    # at 4 replicas and the fleet would fall to the 3 recommended.
    shipped = next(c for c in CASES if c.name == "shipped")
    times = on_the_sync_clock(shipped)
    late = [t + (20 if k >= 6 else 0) for k, t in enumerate(times)]
    assert replay(shipped, late)[6] == 3 != shipped.expected[6]


def test_the_shipped_case_is_the_hpa_the_chart_renders() -> None:
    objects = yaml.safe_load((REPO_ROOT / "deploy/helm/tidescale/files/autoscaling/objects.yaml").read_text())
    rendered = objects["hpa"]["default"]["spec"]
    shipped = spec_to_dict(next(c for c in CASES if c.name == "shipped").spec)
    assert shipped["behavior"] == rendered["behavior"]
    assert [m["external"]["target"] for m in shipped["metrics"]] == [m["external"]["target"]
                                                                     for m in rendered["metrics"]]
    assert SYNC_S == 15.0  # the controller's default --horizontal-pod-autoscaler-sync-period, as the cluster runs it
