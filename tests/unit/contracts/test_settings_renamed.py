"""A renamed setting keeps its old name as an alias: in the config file, the environment and in code."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidescale.autoscaler.settings import RecommenderSettings, TargetSettings
from tidescale.contracts.errors import UsageError
from tidescale.contracts.settings import load_settings, renamed_keys
from tidescale.devstack.demo.settings import DemoSettings

OLD, NEW = "slo_p99_s", "slo_latency_threshold_s"


def test_renamed_keys_moves_old_names_and_the_new_name_wins() -> None:
    assert renamed_keys({OLD: 1, "x": 2}, {OLD: NEW}) == {NEW: 1, "x": 2}
    assert renamed_keys({OLD: 1, NEW: 3}, {OLD: NEW}) == {NEW: 3}
    assert renamed_keys([OLD], {OLD: NEW}) == [OLD]  # not a mapping: pydantic reports it


def test_the_old_slo_name_is_read_from_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"recommender:\n  {OLD}: 0.25\n  targets:\n"
                    f"    - {{deployment: d, namespace: n, model: m, {OLD}: 0.1}}\n")
    settings = load_settings(RecommenderSettings, path)
    assert settings.slo_latency_threshold_s == 0.25
    assert settings.targets[0].slo_latency_threshold_s == 0.1


def test_the_old_slo_name_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TIDESCALE_RECOMMENDER_SLO_P99_S", "0.25")
    assert load_settings(RecommenderSettings).slo_latency_threshold_s == 0.25
    path = tmp_path / "config.yaml"
    path.write_text(f"recommender:\n  {NEW}: 1.0\n")
    assert load_settings(RecommenderSettings, path).slo_latency_threshold_s == 0.25  # the environment beats the file
    monkeypatch.setenv("TIDESCALE_RECOMMENDER_SLO_LATENCY_THRESHOLD_S", "0.1")
    assert load_settings(RecommenderSettings).slo_latency_threshold_s == 0.1  # the new name beats the old


def test_the_old_name_still_passes_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    assert TargetSettings.model_validate({"deployment": "d", "namespace": "n", "model": "m", OLD: 0.5})
    assert DemoSettings(**{OLD: 0.25}).slo_latency_threshold_s == 0.25
    monkeypatch.setenv("TIDESCALE_DEMO_SLO_P99_S", "0")
    with pytest.raises(UsageError, match="slo_latency_threshold_s"):
        load_settings(DemoSettings)
