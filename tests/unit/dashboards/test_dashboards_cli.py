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


def test_export_writes_the_chart_dashboards_filled_for_a_cluster_label(tmp_path: Path) -> None:
    """What another Grafana imports equals what the chart renders for the same clusterLabel."""
    import json

    from tidescale.contracts.placeholders import CLUSTER_LABEL
    from tidescale.dashboards.generate import CHART_DIR, artifacts

    with pytest.raises(SystemExit) as exit_info:
        main(["dashboards", "export", "--out", str(tmp_path), "--cluster-label", "k8s_cluster"])
    assert exit_info.value.code == 0
    for path, committed in artifacts().items():
        exported = (tmp_path / Path(path).name).read_text()
        assert CLUSTER_LABEL in committed and CLUSTER_LABEL not in exported
        assert exported == committed.replace(CLUSTER_LABEL, "k8s_cluster")
        assert path.startswith(CHART_DIR)
    fleet = json.loads((tmp_path / "tidescale-fleet.json").read_text())
    [cluster] = [v for v in fleet["templating"]["list"] if v["name"] == "cluster"]
    assert str(cluster["query"]).endswith(", k8s_cluster)")


def test_export_refuses_a_cluster_label_that_is_no_label_name(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["dashboards", "export", "--out", str(tmp_path), "--cluster-label", 'a"b'])
    assert exit_info.value.code == 2
    assert "not a Prometheus label name" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_export_to_a_place_that_is_no_folder_is_a_usage_error(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main(["dashboards", "export", "--out", str(blocker / "boards")])
    assert exit_info.value.code == 2
    assert "cannot write the dashboards there" in capsys.readouterr().err
