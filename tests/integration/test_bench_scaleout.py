"""`tidescale bench scale-out --quick` and `bench poll` run end to end (the figures are not asserted)."""

from __future__ import annotations

import pytest

from tidescale.benches import scaleout


@pytest.mark.integration
def test_scale_out_bench_measures_both_designs_and_counts_what_the_cap_drops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scaleout, "MIN_BODIES", 40)
    result = scaleout.run(quick=True)
    [fleet] = result["fleets"].values()
    one, node = fleet["one_exporter"], fleet["per_node"]["each"]
    assert one["poll"]["pods"] == 100 and node["poll"]["pods"] == scaleout.PODS_PER_NODE
    assert one["poll"]["errors"] == node["poll"]["errors"] == 0
    # 100 pods x 2 models x 5 stages fit the default cap; a node's 8 pods need 80 label sets.
    assert node["ingest"]["label_sets_kept"] == node["ingest"]["label_sets_needed"] == 80
    assert one["ingest"]["label_sets_needed"] == 1000 == one["ingest"]["label_sets_kept"]
    assert fleet["per_node"]["exporters"] == 13
    assert fleet["one_exporter_cap_raised"]["holds_the_fleet"]
    assert "| 100 | one per node | 13 | 8 |" in scaleout.markdown(result)


@pytest.mark.integration
def test_poll_bench_starts_its_fake_triton_and_polls_without_errors() -> None:
    from tidescale.benches import poll

    result = poll.run(targets=5, quick=True)
    ours = result["results"]["tidescale_poller"]
    assert ours["errors"] == 0 and ours["series"] == 5 * poll.MODELS
