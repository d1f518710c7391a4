"""`bench cost`: tidescale's replica-hours above the optimum, put down to the decision behind them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tidescale import cli
from tidescale.benches.autoscale import cost_split
from tidescale.benches.autoscale import scenarios as bench
from tidescale.benches.autoscale.closedloop import SimParams, run_policy
from tidescale.sim import BatcherConfig
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.traffic import surge as surge_scenario


def test_a_count_is_labelled_by_its_direction_and_reason() -> None:
    assert cost_split.origin_label(None, 3, "rate") == "first answer: rate"
    assert cost_split.origin_label(3, 6, "panic") == "up: panic"
    assert cost_split.origin_label(6, 4, "rate") == "down: rate"


def test_a_step_function_holds_each_value_until_the_next_and_its_first_before() -> None:
    grid = np.array([0.0, 1.0, 2.0, 2.5, 3.0, 9.0])
    assert list(cost_split.step_values([1.0, 3.0], [4, 6], grid)) == [4, 4, 4, 4, 6, 6]


def test_the_gap_is_split_by_the_origin_of_each_second_above_and_below() -> None:
    ours = np.array([3, 6, 6, 4, 2])
    best = np.array([3, 4, 4, 4, 3])
    origins = ["a", "up: panic", "up: panic", "down: rate", "down: rate"]
    split = cost_split.split_by_origin(ours, best, origins, 2.0)
    assert split == {"up: panic": {"above_s": 8.0, "below_s": 0.0}, "down: rate": {"above_s": 0.0, "below_s": 2.0}}


def test_a_draw_puts_every_replica_second_between_tidescale_and_the_optimum_down_to_an_origin() -> None:
    """A 3x surge: tidescale scales up for it, and the split's above minus below is exactly the
    difference of the two runs' replica-hours (every second is put down to some origin)."""
    sc = bench.BenchScenario("surge", surge_scenario(800.0, 480.0, 3.0, at_s=200.0, ramp_s=20.0), 30.0, 200.0)
    params = SimParams(ServiceCurve.v100(), BatcherConfig(), 30.0, 0.5)
    found = cost_split.one_draw(sc, params, 370.0)
    split = found["split_hours"]
    assert any(origin.startswith("up: ") for origin in split)
    net = sum(s["above_h"] - s["below_h"] for s in split.values())
    assert net == pytest.approx(found["tidescale_hours"] - found["optimum_hours"], abs=2e-3)
    assert found["tidescale_hours"] >= found["optimum_hours"] > 0


def test_the_origins_are_the_reasons_of_the_counts_published() -> None:
    """The recorder sees every change of the published count, in order, each with its direction."""
    sc = bench.BenchScenario("surge", surge_scenario(800.0, 480.0, 3.0, at_s=200.0, ramp_s=20.0), 30.0, 200.0)
    params = SimParams(ServiceCurve.v100(), BatcherConfig(), 30.0, 0.5)
    arrivals, end, _, initial, p = bench.draw_setup(sc, params, 370.0)
    policy = bench.make_policy("tidescale", initial, 370.0, sc.cold_start_s, [], 0.5, max_replicas=sc.max_replicas)
    origins = cost_split.PublishedOrigins(policy)  # type: ignore[arg-type]
    run_policy(policy, arrivals, end, initial, p)
    assert origins.changes[0][1].startswith("first answer: ")
    assert any(label.startswith("up: ") for _, label in origins.changes[1:])
    times = [t for t, _ in origins.changes]
    assert times == sorted(times)
    assert origins.at(np.array([times[0] - 1.0, times[-1]])) == [cost_split.OPENING, origins.changes[-1][1]]


def test_the_page_and_plot_name_each_origin_with_its_share(tmp_path: Path) -> None:
    draws = {"0": {"tidescale_hours": 1.2, "optimum_hours": 1.0,
                   "split_hours": {"up: panic": {"above_h": 0.15, "below_h": 0.0},
                                   "down: rate": {"above_h": 0.05, "below_h": 0.0}}},
             "1": {"tidescale_hours": 1.1, "optimum_hours": 1.0,
                   "split_hours": {"up: panic": {"above_h": 0.1, "below_h": 0.0}}}}
    doc = {"benchmark": "autoscale-cost-x",
           "setup": {"command": "tidescale bench cost --scenario x", "duration_s": 1200.0, "base_rps": 800.0,
                     "slo_latency_threshold_s": 0.5, "capacity_rps_per_replica": 370.7,
                     "queue_policy": "recommended", "seeds": [0, 1], "tuned_seeds": [0], "delivery": "adapter",
                     "jobs": 1, "scenarios": ["x"], "wall_s": 3.0},
           "scenarios": {"x": {"draws": draws, "total": cost_split.summed(draws)}}}
    total = doc["scenarios"]["x"]["total"]
    assert total["ratio"] == pytest.approx(1.15)
    assert total["split"]["up: panic"]["above_h"] == pytest.approx(0.25)
    md, png = cost_split.write(doc, tmp_path)
    text = md.read_text()
    assert "| `up: panic` | 0.250 | 12.5 % | 0.000 |" in text
    assert text.index("`up: panic`") < text.index("`down: rate`")  # the largest first
    assert "(**1.150×**)" in text and png.stat().st_size > 0


def test_a_trace_is_split_on_a_page_of_its_own_and_named_on_its_command(tmp_path: Path) -> None:
    """`--trace`: the file replayed alone (an hour in 20 minutes), each draw shifted in time, recorded
    beside the default page under the file's name."""
    times = np.cumsum(np.random.default_rng(1).exponential(0.1, 3000))
    trace = tmp_path / "My Trace.csv"
    trace.write_text("timestamp\n" + "\n".join(f"{t:.3f}" for t in times))
    doc = cost_split.run(draws=2, trace=trace, target_rps=600.0)
    assert doc["benchmark"] == "autoscale-cost-trace-my-trace" and list(doc["scenarios"]) == ["trace"]
    assert doc["setup"]["command"] == "tidescale bench cost --trace 'My Trace.csv' --target-rps 600"
    total = doc["scenarios"]["trace"]["total"]
    assert total["tidescale_hours"] > 0 and total["optimum_hours"] > 0 and total["split"]
    text = "\n".join(cost_split.lines(doc))
    assert "`trace`: the trace my-trace played three times as fast" in text and "600 req/s on average" in text
    assert "20-minute scenarios" not in text  # the trace alone, at its own length
    assert doc["setup"]["trace_reading"].startswith("3,000 requests over ")
    assert "timestamps read as numbers in seconds (no unit in the header's last word))" in text
    assert cost_split.write(doc, tmp_path)[0].name == "autoscale-cost-trace-my-trace.md"


@pytest.mark.parametrize(("argv", "message"), [
    (["--scenario", "nope"], "unknown scenario nope"),
    (["--draws", "1"], "--draws must be in [2, 100]"),
    (["--jobs", "0"], "--jobs must be in"),
    (["--target-rps", "5"], "--target-rps needs --trace"),
    (["--trace", "/nonexistent.csv"], "trace file /nonexistent.csv does not exist"),
    (["--trace", "/nonexistent.csv", "--target-rps", "inf"], "--target-rps must be a finite number > 0, got inf"),
    (["--trace-unit", "ms"], "--trace-unit needs --trace"),
    (["--trace", "/nonexistent.csv", "--trace-unit", "min"], "--trace-unit must be one of s, ms, us, ns, got 'min'"),
])
def test_bench_cost_bad_input_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "cost", "--no-write", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
