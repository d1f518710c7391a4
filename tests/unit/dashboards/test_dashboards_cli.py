"""`tidescale dashboards list|lint|preview`: output, exit codes, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidescale.cli import main


def test_list_names_every_dashboard(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["dashboards", "list"])
    assert exit_info.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [
        "tidescale-fleet", "tidescale-model", "tidescale-gpu", "tidescale-autoscaling", "tidescale-profiler"]


def test_lint_passes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["dashboards", "lint"])
    assert exit_info.value.code == 0
    assert "5 dashboards pass" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--prometheus", "localhost:9090"], "must be an http(s) URL"),
    (["--prometheus", "http://127.0.0.1:9", "--rate-interval", "soon"], "rate interval"),
    (["--prometheus", "http://127.0.0.1:9", "--window", "0"], "window must be positive"),
])
def test_preview_rejects_bad_input_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               args: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["dashboards", "preview", "--out", str(tmp_path), *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_preview_without_prometheus_is_a_runtime_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tidescale.devstack.ports import free_port

    with pytest.raises(SystemExit) as exit_info:
        main(["dashboards", "preview", "--prometheus", f"http://127.0.0.1:{free_port()}", "--out", str(tmp_path)])
    assert exit_info.value.code == 1
    assert "cannot reach Prometheus" in capsys.readouterr().err
