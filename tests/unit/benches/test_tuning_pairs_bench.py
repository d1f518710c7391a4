"""`bench sizing` and `bench tuning`: tidescale against itself with a tuning changed, judged draw by draw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidescale import cli
from tidescale.benches.autoscale import scenarios as bench
from tidescale.benches.autoscale import tuning_pairs
from tidescale.benches.autoscale.closedloop import SimParams
from tidescale.benches.autoscale.tuning_pairs import SIZING
from tidescale.sim import BatcherConfig
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.traffic import scenario
from tidescale.sim.traffic import surge as surge_scenario

CURVE, CFG = ServiceCurve.v100(), BatcherConfig()


def _draws(rows: list[tuple[float, float, float, float]]) -> dict[str, Any]:
    """Draws of (fixed requests, burst requests, fixed hours, burst hours); windows as the requests."""
    return {str(k): {"fixed": {"requests_within_slo": fr, "windows_within_slo": fr, "replica_hours": fh},
                     "burst": {"requests_within_slo": br, "windows_within_slo": br, "replica_hours": bh}}
            for k, (fr, br, fh, bh) in enumerate(rows)}


def test_tidescale_alone_scores_as_the_autoscale_page_scores_it() -> None:
    """The comparison's fixed sizing is the page's `tidescale` row: same draw, same policy, same scores."""
    sc = bench.BenchScenario("surge", surge_scenario(800.0, 400.0, 2.0, at_s=200.0, ramp_s=20.0), 30.0, 200.0)
    params = SimParams(CURVE, CFG, 30.0, 0.5)
    alone = bench.tidescale_scores(sc, params, 370.0)
    scores, _ = bench.run_scenario(sc, ["tidescale"], params, 370.0)
    for measure in tuning_pairs.MEASURES:
        assert alone[measure] == scores["tidescale"][measure]
    assert alone["replica_hours"] > 0


def test_the_sizing_reaches_the_recommender() -> None:
    """A smooth 700 req/s: the fixed share (0.9 of 370 req/s) keeps 3 replicas; burst sizing, whose
    margin for a smooth stream is about 1, lets one go once its readings span two minutes."""
    sc = bench.BenchScenario("steady", scenario("steady", 700.0, 600.0), 30.0)
    params = SimParams(CURVE, CFG, 30.0, 0.5)
    fixed = bench.tidescale_scores(sc, params, 370.0, SIZING.tunings["fixed"])
    burst = bench.tidescale_scores(sc, params, 370.0, SIZING.tunings["burst"])
    assert burst["replica_hours"] < fixed["replica_hours"]
    assert burst["requests_within_slo"] >= 0.999


def test_a_difference_is_judged_draw_by_draw() -> None:
    """Draws whose levels differ a lot but where burst is always 2 % cheaper: paired, the interval is
    tight around -2 %, where the spread of either sizing alone would hide it."""
    draws = _draws([(0.999, 0.999, h, 0.98 * h) for h in (1.0, 1.5, 2.0, 3.0)])
    found = tuning_pairs.difference(draws, "replica_hours", SIZING.labels)
    assert found is not None
    mean, half = found
    assert mean == pytest.approx(-2.0)
    assert half == pytest.approx(0.0, abs=1e-9)
    assert tuning_pairs.difference(draws, "requests_within_slo", SIZING.labels) == (0.0, 0.0)
    assert tuning_pairs.difference(draws, "replica_hours", SIZING.labels, seeds=["3"]) is None  # one draw: no interval


@pytest.mark.parametrize(("diffs", "expected"), [
    ({"requests_within_slo": (1.0, 0.5), "replica_hours": (0.0, 1.0)}, "better"),
    ({"requests_within_slo": (0.0, 0.5), "replica_hours": (-3.0, 1.0)}, "better"),
    ({"requests_within_slo": (-1.0, 0.5), "replica_hours": (0.0, 1.0)}, "worse"),
    ({"requests_within_slo": (0.0, 0.5), "replica_hours": (3.0, 1.0)}, "worse"),
    ({"requests_within_slo": (-1.0, 0.5), "replica_hours": (-3.0, 1.0)}, "a trade"),
    ({"requests_within_slo": (-0.2, 0.5), "replica_hours": (-3.0, 4.0)}, "no clear difference"),
    ({"requests_within_slo": None, "replica_hours": None}, "no clear difference"),
])
def test_the_verdict_counts_differences_whose_interval_clears_zero(
        diffs: dict[str, tuple[float, float] | None], expected: str) -> None:
    assert tuning_pairs.verdict(diffs) == expected


def test_the_comparison_reports_the_held_out_draws_apart() -> None:
    """Seeds 0-3 tuned the defaults: of six draws two are held out, and their verdict is their own."""
    rows = [(1.0, 0.99, 1.0, 0.9)] * 4 + [(0.99, 1.0, 1.0, 1.1), (0.98, 1.0, 2.0, 2.2)]
    compared = tuning_pairs.compare(_draws(rows), SIZING.labels)
    assert compared["all"]["draws"] == 6 and compared["held_out"]["draws"] == 2
    assert compared["held_out"]["difference"]["requests_within_slo"]["mean"] == pytest.approx(1.5)
    assert compared["held_out"]["difference"]["replica_hours"]["mean"] == pytest.approx(10.0)
    assert compared["tunings"]["burst"]["replica_hours"]["mean"] == pytest.approx((0.9 * 4 + 1.1 + 2.2) / 6, abs=1e-4)


def test_the_page_and_plot_say_where_burst_wins_loses_or_trades(tmp_path: Path) -> None:
    def compare(rows: list[tuple[float, float, float, float]]) -> dict[str, Any]:
        return tuning_pairs.compare(_draws(rows), SIZING.labels)

    doc = {"benchmark": "autoscale-sizing",
           "setup": {**SIZING.setup(), "seeds": list(range(6)), "tuned_seeds": [0, 1, 2, 3], "base_rps": 800.0,
                     "slo_latency_threshold_s": 0.5, "capacity_rps_per_replica": 370.7, "queue_policy": "recommended",
                     "wall_s": 1.0, "jobs": 1},
           "scenarios": {"smooth": {"compared": compare([(1.0, 1.0, h, 0.95 * h) for h in (1, 2, 3, 4, 5, 6)])},
                         "surges": {"compared": compare([(0.99 + k / 1000, 0.98 + k / 1000, 2.0, 1.8)
                                                         for k in range(6)])}}}
    md, png = tuning_pairs.write(doc, tmp_path)
    assert (md.name, png.name) == ("autoscale-sizing.md", "autoscale-sizing.png")
    text = md.read_text()
    assert "burst is better on smooth; a trade on surges" in text
    assert "| smooth |" in text and "-5.00 ± 0.00 %" in text
    assert png.stat().st_size > 0


def test_the_default_scenarios_leave_out_the_days_and_take_the_named_groups() -> None:
    names = tuning_pairs.default_scenarios(bench.build_scenarios(1200.0, 800.0))
    assert "lulls" in names and "overload" in names and "readiness-flap" in names and "diurnal" in names
    assert not {"workday", "monday", "saturday"} & set(names)


@pytest.mark.parametrize(("argv", "message"), [
    (["--draws", "1"], "--draws must be in [2, 100]"),
    (["--draws", "101"], "--draws must be in [2, 100]"),
    (["--scenario", "nope"], "unknown scenario nope"),
    (["--jobs", "0"], "--jobs must be in"),
    (["--slo-p99", "0"], "--slo-latency-threshold must be a finite number > 0"),
    (["--slo-p99", "nan"], "--slo-latency-threshold must be a finite number > 0"),
    (["--profile-replicas", "0"], "--profile-replicas must be in [1, 64], got 0"),
])
def test_bench_sizing_bad_input_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "sizing", "--no-write", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_a_candidate_names_its_knobs_in_its_label_page_and_command() -> None:
    pair = tuning_pairs.candidate_pair(["down_delay_s=0", "utilisation = 1"])
    assert pair.labels == ("shipped", "down_delay_s=0, utilisation=1")
    assert pair.tunings == {"shipped": {}, "down_delay_s=0, utilisation=1": {"down_delay_s": 0.0, "utilisation": 1.0}}
    assert pair.page == "autoscale-tuning-down_delay_s-0-utilisation-1"
    assert pair.command == "tidescale bench tuning --set down_delay_s=0 --set utilisation=1"
    assert "down_delay_s=60, utilisation=0.9" in pair.described[0]  # the shipped values it is judged against
    assert tuning_pairs.candidate_pair(["sizing=burst"]).tunings["sizing=burst"] == {"sizing": "burst"}


def test_a_pair_at_another_slo_has_its_own_page_and_judges_both_tunings_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At a 0.15 s P99 the page and command say so, and the replica's setup (its capacity and queue
    policy), the simulator's scoring and the recommender all run at 0.15 s; at the default, the pair
    is the one it was."""
    pair = tuning_pairs.candidate_pair(["sizing=queue"])
    assert pair.at_slo(bench.DEFAULT_SLO_S) is pair
    tight = pair.at_slo(0.15)
    assert tight.page == "autoscale-tuning-sizing-queue-slo-0.15s"
    assert tight.command == "tidescale bench tuning --set sizing=queue --slo-latency-threshold 0.15"
    seen: list[float] = []
    real_setup = tuning_pairs.replica_setup

    def setup(opts: Any) -> Any:
        seen.append(opts.slo_s)
        return real_setup(opts)

    def scores(sc: Any, params: SimParams, capacity: float, tuning: Any = None) -> dict[str, float]:
        seen.append(params.slo_latency_threshold_s)
        return dict.fromkeys(tuning_pairs.MEASURES, 1.0)

    monkeypatch.setattr(tuning_pairs, "replica_setup", setup)
    monkeypatch.setattr(bench, "tidescale_scores", scores)
    doc = tuning_pairs.run(tight, ["diurnal"], draws=2)
    assert doc["benchmark"] == tight.page and doc["setup"]["slo_latency_threshold_s"] == 0.15
    assert seen == [0.15] * 5  # the setup, then 2 draws x 2 tunings
    assert doc["setup"]["budget_shares"]  # queue sizing's curve, measured for the candidate


def test_a_pair_profiled_through_the_router_has_its_own_page_and_measures_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the capacity load-tested through round robin on 4 replicas, as `bench autoscale
    --profile-replicas 4`: the page and command say so after the SLO, and both the capacity and
    queue sizing's curve are measured on 4 replicas; on one, the pair is the one it was."""
    pair = tuning_pairs.candidate_pair(["sizing=queue"]).at_slo(0.15)
    assert pair.profiled_on(1) is pair
    routed = pair.profiled_on(4)
    assert routed.page == "autoscale-tuning-sizing-queue-slo-0.15s-profile-4-replicas"
    assert routed.command == ("tidescale bench tuning --set sizing=queue --slo-latency-threshold 0.15 "
                              "--profile-replicas 4")
    measured_on: list[int] = []
    real_capacity = bench.measure_capacity

    def capacity(*args: Any, replicas: int = 1, **kwargs: Any) -> float:
        measured_on.append(replicas)
        return real_capacity(*args, replicas=replicas, **kwargs)

    monkeypatch.setattr(bench, "measure_capacity", capacity)
    monkeypatch.setattr(bench, "tidescale_scores", lambda *_a, **_k: dict.fromkeys(tuning_pairs.MEASURES, 1.0))
    doc = tuning_pairs.run(routed, ["diurnal"], draws=2)
    assert doc["setup"]["profile_replicas"] == 4
    assert doc["setup"]["command"] == f"{routed.command} --scenario diurnal"  # what ran, not every scenario
    assert measured_on and set(measured_on) == {4}  # the capacity, then each point of the curve
    assert "through round robin on 4 replicas" in "\n".join(tuning_pairs.lines(doc))


def test_a_tuning_reaches_the_recommender() -> None:
    """The smooth 700 req/s again: at a utilisation of 1 the fleet's 3 replicas (0.9 x 370 = 333 each)
    are 2 (370 each covers 700 at 0.95): fewer replica-hours, from the knob alone."""
    sc = bench.BenchScenario("steady", scenario("steady", 700.0, 600.0), 30.0)
    params = SimParams(CURVE, CFG, 30.0, 0.5)
    shipped = bench.tidescale_scores(sc, params, 370.0)
    full = bench.tidescale_scores(sc, params, 370.0, {"utilisation": 1.0, "down_utilisation": 1.0})
    assert full["replica_hours"] < shipped["replica_hours"]


@pytest.mark.parametrize(("argv", "message"), [
    ([], "name at least one knob to change"),
    (["--set", "utilisation"], "--set takes KEY=VALUE"),
    (["--set", "=1"], "--set takes KEY=VALUE"),
    (["--set", "nope=1"], "nope: Extra inputs are not permitted"),
    (["--set", "utilisation=1.5"], "utilisation: Input should be less than or equal to 1"),
    (["--set", "utilisation=lots"], "utilisation: Input should be a valid number"),
    (["--set", "sizing=erlang"], "sizing: Input should be 'fixed', 'burst' or 'queue'"),
    (["--set", "down_delay_s=60"], "down_delay_s: the shipped value already"),
    (["--set", "down_delay_s=0", "--set", "down_delay_s=1"], "--set down_delay_s given twice"),
    (["--set", "down_delay_s=0", "--draws", "1"], "--draws must be in [2, 100]"),
    ([f"--set=fast_jump={1 + k}" for k in range(9)], "at most 8 --set"),
    (["--set", "down_delay_s=0", "--slo-latency-threshold", "-0.15"],
     "--slo-latency-threshold must be a finite number > 0"),
    (["--set", "down_delay_s=0", "--slo-p99", "inf"], "--slo-latency-threshold must be a finite number > 0"),
    (["--set", "down_delay_s=0", "--profile-replicas", "65"], "--profile-replicas must be in [1, 64], got 65"),
])
def test_bench_tuning_bad_input_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "tuning", "--no-write", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
