"""`tidescale alerts render` and `tidescale reviews serve`: bad input exits 2 with the field named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tidescale.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code or 0), capsys.readouterr().err


def test_render_writes_the_three_files_with_my_thresholds(tmp_path: Path) -> None:
    cfg = tmp_path / "tidescale.yaml"
    cfg.write_text(yaml.safe_dump({"alerts": {"queue_depth_per_replica_limit": 3, "for": {"model_review": "5m"}}}))
    with pytest.raises(SystemExit) as exc:
        main(["alerts", "render", "--config", str(cfg), "--out", str(tmp_path / "out")])
    assert exc.value.code in (0, None)
    alerts = (tmp_path / "out" / "tidescale-alerts.yaml").read_text()
    assert "namespace_pod:nv_inference_pending_request_count:sum > 3" in alerts
    assert {p.name for p in (tmp_path / "out").iterdir()} == {
        "tidescale-recording.yaml", "tidescale-alerts.yaml", "alertmanager.yaml"}


def test_render_rejects_a_bad_duration_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "tidescale.yaml"
    cfg.write_text("alerts:\n  for:\n    model_review: 5 minutes\n")
    code, err = run(["alerts", "render", "--config", str(cfg), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "alerts.for.model_review" in err


def test_reviews_serve_without_a_token_exits_2(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TIDESCALE_REVIEWS_TOKEN", raising=False)
    code, err = run(["reviews", "serve", "--port", "0", "--database", "sqlite://"], capsys)
    assert code == 2 and "TIDESCALE_REVIEWS_TOKEN" in err


def test_reviews_serve_with_an_unknown_database_dialect_exits_2(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TIDESCALE_REVIEWS_TOKEN", "t")
    code, err = run(["reviews", "serve", "--database", "nosuch://x"], capsys)
    assert code == 2 and "database URL 'nosuch://x' is not usable" in err
