"""Peer sweeps in `bench autoscale`: the frontier, the point a peer is judged by, who dominates
tidescale, the validation of swept settings, and the JSON keys of a run."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.hostile import NUMBERS
from tidescale import cli
from tidescale.autoscaler.settings import RecommenderSettings
from tidescale.benches.autoscale import policies as pol
from tidescale.benches.autoscale import report as benchreport
from tidescale.benches.autoscale import scenarios as bench
from tidescale.benches.autoscale.closedloop import clock_offsets
from tidescale.benches.autoscale.frontier import Point, best_point, dominated_by, dominates, pareto_frontier
from tidescale.benches.autoscale.seeds import mean_draw, seed_lines
from tidescale.contracts.errors import UsageError

QUICK_ORACLE = 2  # the oracle's schedule search is tested in test_autoscale_optimum.py


def P(setting: float, req: float, win: float, cost: float) -> Point:
    return Point(setting, req, win, cost)


@pytest.mark.parametrize(("points", "frontier"), [
    ([], []),
    ([P(1, 0.5, 0.5, 1.0)], [1]),
    # a cheaper point that serves more and as many windows drops the other
    ([P(1, 0.9, 0.9, 2.0), P(2, 0.95, 0.9, 1.0)], [2]),
    # a trade-off keeps both, cheapest first
    ([P(1, 1.0, 1.0, 3.0), P(2, 0.8, 0.7, 1.0)], [2, 1]),
    # identical measures (settings that ran the same way): the first in sweep order stands for them
    ([P(70, 0.0, 0.0, 0.3), P(90, 0.0, 0.0, 0.3)], [70]),
    # equal cost, equal requests, more windows: strictly better, so it alone stays
    ([P(1, 0.9, 0.8, 1.0), P(2, 0.9, 0.9, 1.0)], [2]),
    # worse on requests but better on windows at the same cost: both stay (three measures)
    ([P(1, 0.95, 0.8, 1.0), P(2, 0.9, 0.9, 1.0)], [1, 2]),
    # a point beaten by one later in the sweep goes, a tie and a trade-off stay
    ([P(1, 0.5, 0.5, 2.0), P(2, 0.6, 0.6, 1.5), P(3, 0.6, 0.6, 1.5), P(4, 1.0, 1.0, 4.0)], [2, 4]),
])
def test_pareto_frontier(points: list[Point], frontier: list[float]) -> None:
    assert [p.setting for p in pareto_frontier(points)] == frontier


def test_dominates_needs_one_strict_improvement() -> None:
    a = P(1, 0.9, 0.9, 1.0)
    assert not dominates(a, a)
    assert not dominates(a, P(2, 0.9, 0.9, 1.0))  # same measures, another setting
    assert dominates(P(2, 0.9, 0.9, 0.9), a) and dominates(P(2, 0.91, 0.9, 1.0), a)
    assert not dominates(P(2, 1.0, 1.0, 1.01), a)  # better SLO but dearer: a trade-off
    me = P(0, 0.85, 0.8, 2.0)
    others = {"x@1": P(1, 0.9, 0.8, 2.0), "y@1": P(1, 0.99, 0.7, 1.0), "z@1": P(1, 0.85, 0.8, 2.0)}
    assert dominated_by(me, others) == ["x@1"]


@pytest.mark.parametrize(("frontier", "best"), [
    # the cheapest point meeting both goals
    ([P(1, 0.5, 0.5, 0.5), P(2, 0.9995, 0.99, 1.2), P(3, 1.0, 1.0, 3.0)], 2),
    # none meets the goals: the most requests within the SLO
    ([P(1, 0.5, 0.5, 0.5), P(2, 0.9, 0.8, 2.0), P(3, 0.8, 0.9, 1.5)], 2),
    # none meets them, equal requests: more windows, then cheaper
    ([P(1, 0.9, 0.8, 1.0), P(2, 0.9, 0.85, 2.0)], 2),
    # two meet them at the same cost: more requests
    ([P(1, 0.9995, 1.0, 1.0), P(2, 1.0, 0.99, 1.0)], 2),
])
def test_best_point(frontier: list[Point], best: float) -> None:
    assert best_point(frontier, 0.999, 0.99).setting == best


def test_best_point_needs_a_point() -> None:
    with pytest.raises(ValueError, match="at least one point"):
        best_point([], 0.999, 0.99)


def fake(req: float, win: float, hours: float) -> dict[str, Any]:
    return {"requests_within_slo": req, "windows_within_slo": win, "replica_hours": hours,
            "cost_vs_oracle": hours, "scale_events": 1.0, "max_replicas": 3.0, "unserved_requests": 0.0,
            "recovery_s": None}


SWEEPS = {"keda-rps": (263.0, 376.0, 500.0), "ray-serve": (2.0, 8.0)}
SCORES = {
    "keda-rps@263": fake(1.0, 1.0, 1.3),
    "keda-rps@376": fake(0.16, 0.2, 0.7),
    "keda-rps@500": fake(0.0, 0.0, 0.34),
    "ray-serve@2": fake(1.0, 1.0, 6.0),
    "ray-serve@8": fake(1.0, 1.0, 2.5),
    "tidescale": fake(1.0, 1.0, 1.1),
    "oracle": fake(1.0, 1.0, 1.0),
}


def test_judge_picks_each_peers_best_and_checks_tidescale_against_frontier_points() -> None:
    judged = benchreport.judge(SCORES, SWEEPS)
    assert list(judged.rows) == ["keda-rps", "ray-serve", "tidescale", "oracle"]
    assert judged.rows["keda-rps"]["setting"] == 263.0 and judged.run_of["keda-rps"] == "keda-rps@263"
    assert judged.rows["ray-serve"]["setting"] == 8.0
    assert [e["setting"] for e in judged.frontiers["keda-rps"]] == [500.0, 376.0, 263.0]
    assert [e["setting"] for e in judged.frontiers["ray-serve"]] == [8.0]  # 2 costs more for the same
    assert [e["on_frontier"] for e in judged.sweeps["ray-serve"]] == [False, True]
    assert judged.rows["tidescale"]["dominated_by"] == []
    assert judged.rows["keda-rps"]["dominated_by"] == ["tidescale"]
    assert judged.rows["ray-serve"]["dominated_by"] == ["keda-rps@263", "tidescale"]
    # a tuned peer cheaper than tidescale and as good dominates it, by its frontier point
    dearer = {**SCORES, "tidescale": fake(0.99, 1.0, 1.4)}
    assert benchreport.judge(dearer, SWEEPS).rows["tidescale"]["dominated_by"] == ["keda-rps@263"]


def fake_doc(tidescale: dict[str, Any]) -> dict[str, Any]:
    scores = {**SCORES, "tidescale": tidescale}
    judged = benchreport.judge(scores, SWEEPS)
    knobs = {p: {"knob": pol.KNOBS[p].knob, "unit": pol.KNOBS[p].unit, "fixed": pol.KNOBS[p].fixed,
                 "documented": pol.KNOBS[p].documented, "settings": list(v)} for p, v in SWEEPS.items()}
    setup = {"quick": True, "base_rps": 800.0, "duration_s": 1200.0, "slo_latency_threshold_s": 0.5, "curve": "V100",
             "batcher": "max 32", "capacity_rps_per_replica": 375.9, "scrape_interval_s": 15, "hpa_sync_s": 15,
             "min_replicas": 1, "max_replicas": 40, "queue_timeout_s": 0.415789, "queue_policy": "recommended",
             "tidescale_headroom": 1.0,
             "headroom_sweep": [], "tidescale_tuning": {}, "wall_s": 1.0, "host": "x86_64", "sweep": True}
    return {"setup": setup, "knobs": knobs, "scenarios": {"diurnal": judged.rows},
            "frontiers": {"diurnal": judged.frontiers}, "sweeps": {"diurnal": judged.sweeps},
            "scenario_info": {"diurnal": {"description": "day", "cold_start_s": 60.0, "surge_at_s": None}},
            "bounds": {}}


def test_page_reports_frontiers_fixed_settings_and_dominance_honestly() -> None:
    text = benchreport.markdown(fake_doc(fake(1.0, 1.0, 1.1)))
    assert "| keda-rps | per-pod rate threshold | 500 req/s: 0.00 % / 0 % / 0.34 ·" in text
    assert "| diurnal | keda-rps | 500 req/s | 0.00 % / 0 % / 0.34 | 263 req/s | 100.00 % / 100 % / 1.30 |" in text
    assert "No frontier point of any peer dominates tidescale in any of the 1 scenarios." in text
    assert "autoscale-frontiers.png" in text
    dominated = benchreport.markdown(fake_doc(fake(0.99, 1.0, 1.4)))
    assert "tidescale is dominated in 1 of 1 scenarios (diurnal)" in dominated
    assert "| diurnal | 99.00 % / 100 % / 1.40 | keda-rps@263 | keda-rps@263: 100.00 % / 100 % / 1.30 |" in dominated


def test_frontier_plot_is_written(tmp_path: Any) -> None:
    doc = fake_doc(fake(1.0, 1.0, 1.1))
    benchreport.plot_frontiers(doc, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_sweep_holds_the_documented_and_the_fixed_setting() -> None:
    for peer, knob in pol.KNOBS.items():
        values = knob.settings(375.9)
        assert knob.fixed in values and knob.documented in values, peer
        assert list(values) == sorted(set(values)) and all(knob.valid(v) for v in values), peer
    keda = pol.KNOBS["keda-rps"].settings(375.9)
    assert keda == (150.0, 188.0, 263.0, 320.0, 376.0, 451.0, 500.0)  # 40–120 % of the capacity, and 500


def test_no_sweep_runs_the_fixed_setting_and_given_settings_replace_the_sweep() -> None:
    opts = benchreport.BenchOptions(["diurnal"], ("hpa-cpu", "ray-serve", "tidescale"), sweep=False,
                                    peer_settings=("ray-serve=8", "ray-serve=4", "ray-serve=8.0"))
    assert opts.peer_sweeps(375.9) == {"hpa-cpu": (70.0,), "ray-serve": (4.0, 8.0)}
    swept = benchreport.BenchOptions(["diurnal"], ("hpa-cpu",))
    assert swept.peer_sweeps(375.9)["hpa-cpu"] == pol.KNOBS["hpa-cpu"].settings(375.9)


@pytest.mark.parametrize(("raw", "message"), [
    ("hpa-cpu", "expected PEER=VALUE"),
    ("magic=3", "unknown peer 'magic'; choose from hpa-cpu"),
    ("tidescale=3", "unknown peer 'tidescale'"),
    ("oracle=1", "unknown peer 'oracle'"),
    ("ray-serve=two", "'two' is not a number"),
    ("ray-serve=", "'' is not a number"),
    ("ray-serve=0", "ray-serve's target ongoing requests must be in (0, 10000]"),
    ("hpa-gpu-util=80", "hpa-gpu-util's GPU utilisation target must be in (0, 1]"),
    ("hpa-cpu=-5", "hpa-cpu's CPU utilisation target must be in (0, 1000]"),
    ("keda-rps=2", "keda-rps is not among the policies run (--policy)"),
])
def test_bad_peer_settings_are_named(raw: str, message: str) -> None:
    with pytest.raises(UsageError) as exc:
        benchreport.BenchOptions(None, ("hpa-cpu", "hpa-gpu-util", "ray-serve"), peer_settings=(raw,))
    assert message in str(exc.value)


@pytest.mark.parametrize(("label", "value"), NUMBERS)
def test_hostile_numbers_as_a_gpu_target_are_refused(label: str, value: object) -> None:
    """No hostile number is a duty cycle in (0, 1]; each is refused with the knob named, never a traceback."""
    with pytest.raises(UsageError, match="GPU utilisation target must be in"):
        benchreport.parse_peer_settings([f"hpa-gpu-util={value}"], ["hpa-gpu-util"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--peer-setting", "nope=1"], "unknown peer 'nope'"),
    (["--peer-setting", "ray-serve=nan"], "ray-serve's target ongoing requests must be in"),
    (["--policy", "tidescale", "--peer-setting", "ray-serve=2"], "ray-serve is not among the policies run"),
    (["--extra-seed", "0"], "--extra-seed values must differ from each other and from --seed 0"),
    (["--extra-seed", "3", "--extra-seed", "3"], "--extra-seed values must differ"),
    (["--extra-seed", "-1"], "--extra-seed must be in [0, 999999], got -1"),
    (["--extra-seed", "1000000"], "--extra-seed must be in [0, 999999], got 1000000"),
    (["--seed", "1000000"], "--seed must be in [0, 999999], got 1000000"),
    (["--policy", "tidescale", "--extra-seed", "1"], "--extra-seed reruns tidescale against the oracle"),
    (["--extra-seed", "one"], "Invalid value for '--extra-seed'"),
])
def test_bench_bad_sweep_values_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "autoscale", "--no-write", "--quick", "--scenario", "diurnal", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def check_keys(doc: dict[str, Any], scenario: str) -> None:
    assert doc["config"] == RecommenderSettings().effective_config()
    row = doc["scenarios"][scenario]["keda-rps"]
    assert row["setting"] in (263.0, 500.0) and isinstance(row["dominated_by"], list)
    front = doc["frontiers"][scenario]["keda-rps"]
    assert front and set(front[0]) == {"setting", "requests_within_slo", "windows_within_slo", "cost_vs_oracle"}
    assert [e["setting"] for e in doc["sweeps"][scenario]["keda-rps"]] == [263.0, 500.0]
    assert doc["knobs"]["keda-rps"]["fixed"] == 500.0


def test_a_short_run_records_frontiers_and_the_config() -> None:
    opts = benchreport.BenchOptions(["surge-3x"], ("keda-rps", "oracle"), quick=True,
                                    peer_settings=("keda-rps=500", "keda-rps=263"), oracle_search=QUICK_ORACLE)
    doc, runs = benchreport.run(opts)
    check_keys(doc, "surge-3x")
    assert doc["bounds"]["surge-3x"]["requests_within_slo_max"] < 1.0
    assert set(runs["surge-3x"]) == {"keda-rps", "oracle"}  # each peer's best run, for the replica plot
    assert math.isclose(doc["scenarios"]["surge-3x"]["oracle"]["cost_vs_oracle"], 1.0)


def test_a_trace_run_records_the_same_keys() -> None:
    opts = benchreport.BenchOptions(None, ("keda-rps", "oracle"), quick=True, trace=bench.AZURE_TRACE,
                                    peer_settings=("keda-rps=500", "keda-rps=263"), oracle_search=QUICK_ORACLE)
    doc, _runs = benchreport.run(opts)
    assert list(doc["scenarios"]) == ["trace"]
    check_keys(doc, "trace")
    # the trace is named on the page's command, and the page is its own: never autoscale.md
    assert doc["setup"]["trace"] == bench.AZURE_TRACE.name and doc["setup"]["target_rps"] is None
    assert f"--quick --trace {bench.AZURE_TRACE.name} --policy keda-rps" in benchreport.markdown(doc)
    assert [p.name for p in opts.paths] == ["autoscale-trace-azure-llm-conv-2023.md",
                                            "autoscale-trace-azure-llm-conv-2023.png",
                                            "autoscale-trace-azure-llm-conv-2023-frontiers.png"]


def test_the_page_shows_each_detection_step_and_judges_surges_against_their_bound() -> None:
    doc = fake_doc(fake(1.0, 1.0, 1.18))
    for row, measures in (("tidescale+no-fast-path", fake(1.0, 1.0, 1.2)), ("tidescale+keda", fake(1.0, 1.0, 1.14)),
                          ("tidescale+direct", fake(1.0, 1.0, 1.05))):
        doc["scenarios"]["diurnal"][row] = {**measures, "dominated_by": []}
    surge = {"tidescale": {**fake(0.9700, 0.9, 1.4), "dominated_by": []},
             "tidescale+no-fast-path": {**fake(0.96, 0.9, 1.4), "dominated_by": []},
             "tidescale+keda": {**fake(0.9750, 0.9, 1.45), "dominated_by": []},
             "tidescale+direct": {**fake(0.9780, 0.9, 1.6), "dominated_by": []}}
    doc["scenarios"]["surge-3x"] = surge
    doc["bounds"]["surge-3x"] = {"fleet_at_surge": 3, "requests_within_slo_max": 0.9821, "replicas_for_goal": 6,
                                 "headroom_for_goal": 2.0}
    doc["scenario_info"]["surge-3x"] = {"description": "surge", "cold_start_s": 60.0, "surge_at_s": 360.0}
    lines = benchreport.step_lines(doc)
    assert ("| diurnal | 100.00 % / 100 % / 1.20 | 100.00 % / 100 % / 1.18 | 100.00 % / 100 % / 1.14 "
            "| 100.00 % / 100 % / 1.05 | – | – |") in lines
    assert ("| surge-3x | 96.00 % / 90 % / 1.40 | 97.00 % / 90 % / 1.40 | 97.50 % / 90 % / 1.45 "
            "| 97.80 % / 90 % / 1.60 | 98.21 % | -1.21 pt |") in lines
    goals = benchreport.goal_lines(doc)
    assert "| diurnal | tidescale | 100.00 % / 100 %: yes | 1.18: no | yes | no |" in goals  # over 1.15x
    assert "| diurnal | tidescale+keda | 100.00 % / 100 %: yes | 1.14: yes | yes | yes |" in goals
    assert "| diurnal | tidescale+direct | 100.00 % / 100 %: yes | 1.05: yes | yes | yes |" in goals
    assert "| surge-3x | tidescale | -1.21 pt from the bound: no | 1.40: yes | yes | no |" in goals
    assert "| surge-3x | tidescale+direct | -0.41 pt from the bound: yes | 1.60: no | yes | no |" in goals
    assert "| surge-3x | tidescale+keda | -0.71 pt from the bound: yes | 1.45: yes | yes | yes |" in goals


def test_extra_seeds_rerun_each_delivery_mode_and_judge_every_draw() -> None:
    opts = benchreport.BenchOptions(["surge-3x"], ("tidescale", "oracle"), quick=True, extra_seeds=(4,),
                                    oracle_search=QUICK_ORACLE)
    doc, _runs = benchreport.run(opts)
    drawn = doc["seeds"]["scenarios"]["surge-3x"]["4"]
    assert doc["seeds"]["seeds"] == [4] and doc["setup"]["extra_seeds"] == [4]
    assert set(drawn["rows"]) == {"tidescale", "tidescale+keda", "tidescale+direct"}
    assert 0.0 < drawn["bound"] < 1.0 and drawn["bound"] != doc["bounds"]["surge-3x"]["requests_within_slo_max"]
    page = doc["scenarios"]["surge-3x"]["tidescale"]
    assert drawn["rows"]["tidescale"] != {k: page[k] for k in drawn["rows"]["tidescale"]}  # another draw
    assert "--extra-seed 4" in benchreport.markdown(doc)
    # each draw runs on its own clock phases, and the JSON says which
    assert doc["setup"]["clock_offsets_s"] == _offsets(0) and drawn["clock_offsets_s"] == _offsets(4)
    assert f"the HPA syncs at {_offsets(0)['hpa_sync']:g} s into each 15 s cycle" in benchreport.markdown(doc)


def _offsets(seed: int) -> dict[str, float]:
    scrape, sync = clock_offsets(seed)
    return {"scrape": round(scrape, 2), "hpa_sync": round(sync, 2)}


def test_the_mean_of_draws_is_none_where_a_draw_has_no_cost() -> None:
    row, bound = mean_draw([(fake(0.97, 0.9, 1.4), 0.98), ({**fake(0.99, 1.0, 1.0), "cost_vs_oracle": None}, 0.99)])
    assert row["requests_within_slo"] == pytest.approx(0.98) and row["windows_within_slo"] == pytest.approx(0.95)
    assert row["cost_vs_oracle"] is None and bound == pytest.approx(0.985)
    assert mean_draw([(fake(1.0, 1.0, 1.0), None)])[1] is None  # a steady scenario has no bound


def test_the_seed_table_judges_each_draw_against_its_own_bound() -> None:
    doc = fake_doc(fake(1.0, 1.0, 1.12))
    doc["setup"]["seed"] = 0
    doc["scenarios"]["surge-3x"] = {"tidescale": fake(0.9700, 0.9, 1.4), "tidescale+direct": fake(0.9780, 0.9, 1.6)}
    doc["bounds"]["surge-3x"] = {"requests_within_slo_max": 0.9821}
    draw = {"bound": 0.9750, "rows": {"tidescale": fake(0.9700, 0.9, 1.4), "tidescale+keda": fake(0.9, 0.9, 1.0),
                                      "tidescale+direct": fake(0.9740, 0.9, 1.45)}}
    doc["seeds"] = {"seeds": [7], "scenarios": {"surge-3x": {"7": draw}}}
    lines = seed_lines(doc)
    assert ("| scenario | row | seed 0 (above) | seed 7 | mean of the draws | draws meeting both "
            "| requests within SLO, 95 % CI | cost, 95 % CI |") in lines
    # the same 97.00 % misses by 1.21 points against seed 0's bound and meets it within 0.5 on seed 7's;
    # the mean of the draws is 0.86 under the mean bound
    assert ("| surge-3x | tidescale | -1.21 pt from the bound, 1.400×: **no** | -0.50 pt from the bound, 1.400×: yes "
            "| -0.86 pt from the bound, 1.400×: yes | 1 of 2 | 97.00 ± 0.00 % | 1.400 ± 0.000× |") in lines
    assert ("| surge-3x | tidescale+direct | -0.41 pt from the bound, 1.600×: **no** | -0.10 pt from the bound, "
            "1.450×: yes | -0.26 pt from the bound, 1.525×: **no** | 1 of 2 "
            # two draws, t(1) = 12.706 times the standard error: 0.20 points and 0.075x
            "| 97.60 ± 2.54 % | 1.525 ± 0.953× |") in lines  # over 1.5x on seed 0
    assert not [line for line in lines if line.startswith("| surge-3x | tidescale+keda")]  # not run on the page's seed


def test_the_held_out_draws_are_reported_apart_from_those_the_defaults_were_tuned_on() -> None:
    doc = fake_doc(fake(1.0, 1.0, 1.12))
    doc["setup"]["seed"] = 0
    doc["scenarios"] = {"diurnal": {"tidescale": fake(1.0, 1.0, 1.05)}}
    doc["bounds"] = {}
    draws = {str(s): {"bound": None, "rows": {"tidescale": fake(1.0 if s < 4 else 0.99, 1.0, 1.05 + s / 100)}}
             for s in (1, 2, 3, 5, 6)}
    doc["seeds"] = {"seeds": [1, 2, 3, 5, 6], "scenarios": {"diurnal": draws}}
    lines = seed_lines(doc)
    assert "seeds 5, 6 were never looked at while tuning" in " ".join(lines)
    # tuned: seeds 0-3 all meet the goals; held out: 99 % of requests misses 99.9 % on both
    row = next(line for line in lines if line.startswith("| diurnal | tidescale | 4 of 4 |"))
    assert row.startswith("| diurnal | tidescale | 4 of 4 | 0 of 2 | 100.00 ± 0.00 % | 99.00 ± 0.00 % |")


def test_every_policy_on_the_replica_plot_gets_its_own_colour() -> None:
    """The default colour cycle repeats after ten lines; a page runs more policies than that."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["oracle", *(f"peer-{k}" for k in range(18)), "tidescale", "peer-0"]
    colours = benchreport.policy_colours(names, plt.get_cmap("tab20"))
    assert set(colours) == set(names)
    assert colours["tidescale"] == "black" and colours["oracle"] == "red"
    assert len({str(c) for c in colours.values()}) == len(colours)
