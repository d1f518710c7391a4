"""Op shares of the real profiler fixtures, and the release gate on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.paths import FIXTURES
from tests.unit.exporters.test_profiles_hostile import HOST_PLANE_HEAD, chrome_trace, ld, x_event
from tidescale.cli import app
from tidescale.exporters.profiles.ingest import combined_report, parse_profile

TF = FIXTURES / "profiles" / "tensorflow"
TORCH = FIXTURES / "profiles" / "pytorch"


def report_of(path: Path) -> dict:
    return combined_report([str(path)]).to_json()


@pytest.mark.parametrize("name", ["ctr_string_ops.xplane.pb", "ctr_string_ops.trace_viewer.json.gz",
                                  "ctr_string_ops.framework_op_stats.json"])
def test_string_heavy_tf_model_shares_agree_across_formats(name: str) -> None:
    rep = report_of(TF / name)
    shares = rep["op_class_share"]
    assert shares["parse"] == pytest.approx(0.536, abs=0.01)   # ParseExampleV2
    assert shares["string"] == pytest.approx(0.090, abs=0.01)  # fused AsString + hash
    assert sum(shares.values()) == pytest.approx(1.0)
    top = {t["op"]: t for t in rep["top_ops"]}
    assert top["_TensorToHashBucketFast"]["op_class"] == "string"
    assert top["ParseExampleV2"]["op_class"] == "parse"
    assert rep["total_self_time_us"] == pytest.approx(68186.3, rel=1e-3)
    assert rep["warnings"] == []


def test_int_ids_model_has_no_string_time() -> None:
    for name in ("ctr_int_ids.xplane.pb", "ctr_int_ids.trace_viewer.json.gz"):
        shares = report_of(TF / name)["op_class_share"]
        assert shares["string"] == 0.0
        assert shares["compute"] > 0.95


def test_unfused_string_ops_are_separate() -> None:
    top = {t["op"]: t for t in report_of(TF / "ctr_string_ops_noremap.xplane.pb")["top_ops"]}
    assert top["AsString"]["share"] == pytest.approx(0.10, abs=0.01)
    assert top["StringToHashBucketFast"]["share"] == pytest.approx(0.02, abs=0.01)
    assert top["AsString"]["op_class"] == top["StringToHashBucketFast"]["op_class"] == "string"


def test_level2_capture_is_flagged() -> None:
    rep = report_of(TF / "ctr_string_ops_level2_warm.trace_viewer.json.gz")
    assert rep["op_class_share"]["string"] == pytest.approx(0.035, abs=0.005)
    assert any("host tracer level 2" in w for w in rep["warnings"])


def test_pytorch_user_annotation_counts_as_string() -> None:
    rep = report_of(TORCH / "ranker_pystring.pt.trace.json.gz")
    top = {t["op"]: t for t in rep["top_ops"]}
    assert top["preprocess::as_string_hash"]["op_class"] == "string"
    assert rep["op_class_share"]["string"] == pytest.approx(0.42, abs=0.02)
    clean = report_of(TORCH / "ranker_tensor.pt.trace.json.gz")
    assert clean["op_class_share"]["string"] == 0.0
    assert "aten::addmm" in {t["op"] for t in clean["top_ops"]}


def test_self_time_excludes_nested_aten_ops() -> None:
    """The annotation's self time is less than its duration: the aten ops inside are subtracted."""
    import gzip

    doc = json.loads(gzip.decompress((TORCH / "ranker_pystring.pt.trace.json.gz").read_bytes()))
    total_dur = sum(e["dur"] for e in doc["traceEvents"] if e.get("name") == "preprocess::as_string_hash")
    rep = report_of(TORCH / "ranker_pystring.pt.trace.json.gz")
    self_us = next(t["self_time_us"] for t in rep["top_ops"] if t["op"] == "preprocess::as_string_hash")
    assert 0 < self_us < total_dur


def test_capture_time_comes_from_the_file() -> None:
    assert parse_profile((TF / "ctr_int_ids.xplane.pb").read_bytes()).captured_at == pytest.approx(
        1795274718.89, abs=1)


runner = CliRunner()


def test_gate_fails_string_heavy_and_passes_clean() -> None:
    bad = runner.invoke(app, ["profile", "report", "--json", str(TF / "ctr_string_ops.xplane.pb")])
    assert bad.exit_code == 1
    out = json.loads(bad.stdout)
    assert set(out) >= {"op_class_share", "top_ops", "total_self_time_us"}
    assert out["violations"]
    good = runner.invoke(app, ["profile", "report", "--json", str(TF / "ctr_int_ids.xplane.pb")])
    assert good.exit_code == 0, good.output


def test_gate_limits_are_configurable() -> None:
    path = str(TF / "ctr_string_ops.xplane.pb")
    assert runner.invoke(app, ["profile", "report", "--max-share", "string=0.2", path]).exit_code == 0
    assert runner.invoke(app, ["profile", "report", "--max-share", "parse=0.5", "--max-share", "string=0.2",
                               path]).exit_code == 1


@pytest.mark.parametrize("args", [["--max-share", "strings=0.1"], ["--max-share", "string=abc"],
                                  ["--max-share", "string=1.5"], ["--max-share", "string"]])
def test_gate_rejects_bad_limits(args: list[str]) -> None:
    from tidescale.contracts.errors import UsageError

    result = runner.invoke(app, ["profile", "report", *args, str(TF / "ctr_int_ids.xplane.pb")])
    assert isinstance(result.exception, UsageError)


def test_gate_rejects_missing_and_garbage_files(tmp_path: Path) -> None:
    from tidescale.contracts.errors import UsageError

    assert isinstance(runner.invoke(app, ["profile", "report", str(tmp_path / "nope.json")]).exception, UsageError)
    junk = tmp_path / "junk.json"
    junk.write_text('{"traceEvents": [{"ph": "X", ')
    result = runner.invoke(app, ["profile", "report", str(junk)])
    assert isinstance(result.exception, UsageError)
    assert "truncated" in str(result.exception)


# --- issue 43 #21: each exit status has one meaning; "could not judge" is never 0 or 1 ------------

NO_OP_TIME = {
    "chrome-without-events": b'{"traceEvents": []}',
    "chrome-every-event-dropped": chrome_trace(b",".join([x_event(b"-1"), x_event(b'"x"')])),
    "trtexec-without-layers": b'[{"count": 1}]',
    "xplane-without-op-events": ld(1, HOST_PLANE_HEAD),
    "xplane-of-an-unknown-plane": ld(1, ld(2, b"/custom:plane")),
}


def gate(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str, body: bytes | None = None
         ) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of `tidescale profile report` as CI runs it (through main)."""
    from tidescale.cli import main

    if body is not None:
        (tmp_path / "profile").write_bytes(body)
        args = (*args, str(tmp_path / "profile"))
    with pytest.raises(SystemExit) as exc:
        main(["profile", "report", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return int(exc.value.code or 0), out, err


@pytest.mark.parametrize("body", NO_OP_TIME.values(), ids=NO_OP_TIME.keys())
def test_a_profile_without_op_time_cannot_be_judged(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     body: bytes) -> None:
    code, out, err = gate(tmp_path, capsys, "--json", body=body)
    assert code == 3
    report = json.loads(out)
    assert report["verdict"] == "could_not_judge" and "no op self time" in report["could_not_judge"]
    code, out, err = gate(tmp_path, capsys, body=body)
    assert code == 3 and "COULD NOT JUDGE" in err and "PASS" not in err


@pytest.mark.parametrize(("args", "code", "verdict"), [
    ([str(TF / "ctr_int_ids.xplane.pb")], 0, "pass"),
    ([str(TF / "ctr_string_ops.xplane.pb")], 1, "fail"),
    (["--max-share", "string=2", str(TF / "ctr_int_ids.xplane.pb")], 2, None),
    ([str(TORCH)], 2, None),  # a directory
    ([str(TF / "ctr_int_ids.xplane.pb"), "/nonexistent/profile.json"], 2, None),
], ids=["pass", "over-the-limit", "bad-flag", "a-directory", "a-missing-file"])
def test_each_exit_status_has_one_meaning(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                          code: int, verdict: str | None) -> None:
    got, out, err = gate(tmp_path, capsys, "--json", *args)
    assert got == code, err
    if verdict is None:
        assert out == "" and err.startswith("error:") and err.count("\n") == 1
    else:
        assert json.loads(out)["verdict"] == verdict


@pytest.mark.parametrize("failure", [RuntimeError("a parser defect"), MemoryError(), RecursionError("deep"),
                                     PermissionError(13, "Permission denied", "profile.pb")],
                         ids=["defect", "memory", "recursion", "permission"])
def test_a_gate_that_fails_on_the_profile_never_passes_or_fails_it(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    failure: BaseException) -> None:
    from tidescale.exporters.profiles import gate as gate_module

    def broken(paths: list[str]) -> None:
        raise failure

    monkeypatch.setattr(gate_module, "combined_report", broken)
    code, out, err = gate(tmp_path, capsys, body=b"{}")
    assert code == (2 if isinstance(failure, OSError) else 3) and out == ""
    assert err.startswith("error:") and err.count("\n") == 1, err
