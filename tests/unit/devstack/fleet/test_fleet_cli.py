"""`tidescale fleet` input handling: bad scenario, malformed trace CSV, model mix (exit 2, no traceback)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.contracts.errors import UsageError
from tidescale.devstack.fleet.cli import build_scenario, parse_model_mix


@dataclass
class Outcome:
    returncode: int
    stderr: str


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Outcome]:
    """`tidescale fleet ...` in process (the same `main` the console script calls)."""
    from tidescale.cli import main

    def _run(*args: str) -> Outcome:
        with pytest.raises(SystemExit) as exit_info:
            main(["fleet", *args])
        code = exit_info.value.code
        return Outcome(code if isinstance(code, int) else 1, capsys.readouterr().err)

    return _run


def test_unknown_scenario_exits_2(run: Callable[..., Outcome]) -> None:
    out = run("run", "--scenario", "tsunami", "--duration", "5")
    assert out.returncode == 2 and "unknown scenario 'tsunami'" in out.stderr and "Traceback" not in out.stderr


def test_malformed_trace_csv_names_the_line(tmp_path: Path, run: Callable[..., Outcome]) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("TIMESTAMP,x\n2023-11-16 18:15:46.1,1\nnot-a-time,2\n")
    out = run("run", "--trace-csv", str(csv), "--duration", "5")
    assert out.returncode == 2 and f"{csv}:3" in out.stderr
    csv.write_text("0\n1\n")
    out = run("run", "--trace-csv", str(csv), "--duration", "5", "--trace-unit", "ms")
    assert out.returncode == 2 and "spans 0.001 s; a replay needs a second or more" in out.stderr
    out = run("run", "--trace-csv", str(csv), "--duration", "5", "--trace-unit", "min")
    assert out.returncode == 2 and "a trace's timestamp unit must be one of s, ms, us, ns, got 'min'" in out.stderr


def test_bad_snapshot_kind_and_model_exit_2(run: Callable[..., Outcome]) -> None:
    out = run("snapshot", "--what", "everything")
    assert out.returncode == 2 and "--what" in out.stderr
    out = run("run", "--models", "bert=1", "--duration", "5", "--scenario", "steady")
    assert out.returncode == 2 and "bert" in out.stderr


def test_model_mix_parsing() -> None:
    assert parse_model_mix("resnet50=3, ctr_ranker") == {"resnet50": 3.0, "ctr_ranker": 1.0}
    with pytest.raises(UsageError):
        parse_model_mix("resnet50=lots")
    with pytest.raises(UsageError):
        parse_model_mix(" , ")


def test_replayed_trace_is_cut_to_the_duration(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("".join(f"{i * 0.5}\n" for i in range(100)))  # 50 s of trace, 2 req/s
    sc = build_scenario("steady", 1.0, 10.0, csv, time_scale=1.0, rate_scale=1.0, seed=0)
    assert sc.duration_s == 10.0
    assert 15 <= len(sc.arrivals()) <= 21


def test_fleet_settings_precedence_and_validation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidescale.contracts.settings import load_settings
    from tidescale.devstack.fleet.settings import FleetSettings

    cfg = tmp_path / "c.yaml"
    cfg.write_text("fleet:\n  replicas: 3\n  cold_start: 5\n  trace_mode: opentelemetry\n")
    monkeypatch.setenv("TIDESCALE_FLEET_COLD_START", "7")
    s = load_settings(FleetSettings, cfg, replicas=4, cold_start=None)
    assert (s.replicas, s.cold_start) == (4, 7.0)  # flag > env > file
    trace = s.trace()
    assert trace is not None and trace.mode == "opentelemetry"
    assert load_settings(FleetSettings).trace() is None
    for bad in ("fleet:\n  replicas: 65\n", "fleet:\n  namespace: Bad_NS\n", "fleet:\n  trace_mode: zipkin\n",
                "fleet:\n  otlp_url: ftp://x\n"):
        cfg.write_text(bad)
        with pytest.raises(UsageError, match="invalid fleet"):
            load_settings(FleetSettings, cfg)


def test_bad_config_file_exits_2(tmp_path: Path, run: Callable[..., Outcome]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("fleet:\n  duration: -3\n")
    out = run("run", "--config", str(cfg))
    assert out.returncode == 2 and "fleet.duration" in out.stderr


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="resnt50_=,. 1x-e", max_size=30))
def test_model_mix_parser_fuzz(text: str) -> None:
    try:
        mix = parse_model_mix(text)
    except UsageError:
        return
    assert mix and all(isinstance(w, float) for w in mix.values())
