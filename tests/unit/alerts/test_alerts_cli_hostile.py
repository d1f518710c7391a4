"""`tidescale alerts render` and `tidescale reviews serve` on hostile input: exit 2 with a short
message naming the problem, never a traceback, a hang or an echo of a huge value."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.hostile import YAML_DOCUMENTS
from tidescale.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code or 0), capsys.readouterr().err


def in_alerts_section(text: str) -> str:
    return "alerts:\n  extra_labels:\n" + "".join(f"    {line}\n" for line in text.splitlines())


@pytest.mark.parametrize("wrap", [str, in_alerts_section], ids=["top", "in-section"])
@pytest.mark.parametrize(("name", "text"), YAML_DOCUMENTS, ids=[n for n, _ in YAML_DOCUMENTS])
def test_render_refuses_hostile_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str,
                                     wrap: object) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(wrap(text))  # type: ignore[operator]
    code, err = run(["alerts", "render", "--config", str(cfg), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.startswith("error: ")
    assert len(err) < 1500 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_render_refuses_a_fifo_as_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, err = run(["alerts", "render", "--config", str(fifo), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "is not a regular file" in err


@pytest.mark.parametrize("out", ["file", "file/sub"])
def test_render_refuses_an_out_that_is_not_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       out: str) -> None:
    (tmp_path / "file").write_text("keep me")
    code, err = run(["alerts", "render", "--out", str(tmp_path / out)], capsys)
    assert code == 2 and err.startswith(f"error: --out {tmp_path / out}")
    assert (tmp_path / "file").read_text() == "keep me"


def test_reviews_serve_refuses_a_blank_token_naming_the_setting(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TIDESCALE_REVIEWS_TOKEN", " \t ")
    code, err = run(["reviews", "serve", "--port", "0", "--database", "sqlite://"], capsys)
    assert code == 2 and "TIDESCALE_REVIEWS_TOKEN (reviews.token) is empty or only whitespace" in err
    assert "\t" not in err
