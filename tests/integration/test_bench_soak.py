"""`tidescale bench soak` end to end, a few seconds per service: the three services start, take their
normal and hostile traffic, and the result has its shape (the figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidescale.benches.soak import run as soak
from tidescale.benches.soak.services import SERVICES

GOALS = {"rss_flat", "fds_flat", "healthz_p99", "normal_served"}


@pytest.mark.integration
def test_each_service_is_soaked_and_serves_its_normal_traffic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One flood 3 s in, once every normal client holds its connection (a full run's first is 30 s in),
    # cut short by the run's end: its connections past the cap are refused at once.
    monkeypatch.setattr(soak, "flood_starts", lambda *_: [3.0])
    opts = soak.Options(duration_s=8.0, slowloris=5, trickled=2, flood_past_cap=50, oversized_every_s=1.0,
                        sample_every_s=1.0, workdir=tmp_path)
    result = soak.public(soak.run(opts))
    assert result["benchmark"] == "soak" and list(result["services"]) == list(SERVICES)
    for name, r in result["services"].items():
        assert r["exit_code"] is None, name  # still running when the run ended
        normal = r["normal"]
        assert normal["sent"] > 0 and normal["served"] == normal["sent"], (name, normal["routes"])
        assert set(normal["routes"]) == {c["route"] for c in normal["clients"]}
        assert r["healthz"]["probes"] > 0 and r["healthz"]["failures"] == 0, (name, r["healthz"])
        assert r["resources"]["samples"] > 0 and r["resources"]["rss"]["warmup_max_bytes"] > 0
        assert set(r["goals"]) == GOALS
        assert {"bad_token", "oversized_body", "flood"} <= set(r["hostile"]), (name, r["hostile"])
        assert r["hostile"]["flood"]["outcomes"].get("503", 0) > 0, (name, r["hostile"]["flood"])
        assert r["hostile"]["bad_token"]["limits_held"] is (None if name == "recommender" else True)
        assert r["hostile"]["oversized_body"]["limits_held"] is True, (name, r["hostile"]["oversized_body"])
        assert len(r["floods"]) == 1
        assert (tmp_path / name).is_dir()
    assert "series" not in result["services"]["exporter"]
