"""`tidescale sim` input handling: bad scenario, malformed trace CSV, model mix (exit 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tidescale.errors import UsageError
from tidescale.fleet_cli import build_scenario, parse_model_mix


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidescale.cli", "sim", *args], capture_output=True, text=True,
                          timeout=60)


def test_unknown_scenario_exits_2() -> None:
    out = run("run", "--scenario", "tsunami", "--duration", "5")
    assert out.returncode == 2 and "unknown scenario 'tsunami'" in out.stderr and "Traceback" not in out.stderr


def test_malformed_trace_csv_names_the_line(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("TIMESTAMP,x\n2023-11-16 18:15:46.1,1\nnot-a-time,2\n")
    out = run("run", "--trace-csv", str(csv), "--duration", "5")
    assert out.returncode == 2 and f"{csv}:3" in out.stderr


def test_bad_snapshot_kind_and_model_exit_2() -> None:
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
