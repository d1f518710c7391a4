"""The oracle's schedule search (`benches/autoscale/optimum.py`): on a toy fleet whose optimum is known,
then on the real simulator, where the oracle row must be the schedule the search settled on."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale import cli
from tidescale.benches.autoscale import optimum
from tidescale.benches.autoscale import report as benchreport
from tidescale.benches.autoscale import scenarios as bench
from tidescale.benches.autoscale.closedloop import SimParams
from tidescale.sim import BatcherConfig
from tidescale.sim.servicecurve import ServiceCurve
from tidescale.sim.traffic import surge

PER_SLOT = 100  # requests arriving in each slot of the toy fleet
SLOTS_PER_WINDOW = 4
EVERYTHING = optimum.Target(1.0, 1.0)


def toy(demand: Sequence[int], ahead: int) -> Callable[[Sequence[int]], optimum.Evaluation]:
    """A fleet where a slot asked for fewer replicas than its demand misses a tenth of its requests per
    replica short, and a window fails where it missed any; the cost is what the oracle asks for."""

    def evaluate(levels: Sequence[int]) -> optimum.Evaluation:
        short = np.maximum(np.array(demand) - np.array(optimum.asked(levels, ahead)), 0)
        misses = np.minimum(short * PER_SLOT // 10, PER_SLOT)
        windows = misses.reshape(-1, SLOTS_PER_WINDOW).sum(axis=1) > 0
        return optimum.Evaluation(1.0 - misses.sum() / (PER_SLOT * len(demand)), 1.0 - windows.mean(),
                                  sum(optimum.asked(levels, ahead)) * optimum.SLOT_S / 3600.0, misses,
                                  np.repeat(windows, SLOTS_PER_WINDOW))

    return evaluate


def search(demand: Sequence[int], start: Sequence[int], ahead: int = 0, target: optimum.Target = EVERYTHING,
           ceiling: int = 10, first_free: int = 0, max_evaluations: int = optimum.MAX_EVALUATIONS
           ) -> optimum.Schedule:
    return optimum.cheapest_schedule(toy(demand, ahead), start, target, 1, ceiling, ahead, first_free,
                                     max_evaluations)


DEMAND = [2, 2, 3, 5, 5, 4, 3, 2]


def test_trimming_a_fat_schedule_finds_the_demand_exactly() -> None:
    found = search(DEMAND, [d + 3 for d in DEMAND])
    assert found.levels == tuple(DEMAND) and found.met
    assert found.evaluation.replica_hours == pytest.approx(sum(DEMAND) * optimum.SLOT_S / 3600)
    assert found.start.replica_hours > found.evaluation.replica_hours


def test_repairing_a_thin_schedule_finds_the_demand_too() -> None:
    found = search(DEMAND, [1] * len(DEMAND))
    assert found.levels == tuple(DEMAND) and found.met
    assert found.start.requests_within_slo < 1.0


def test_a_share_below_one_spends_its_misses_and_costs_less() -> None:
    """At 95 % of requests and 50 % of windows the search may leave a slot one replica short."""
    full = search(DEMAND, [d + 1 for d in DEMAND])
    loose = search(DEMAND, [d + 1 for d in DEMAND], target=optimum.Target(0.95, 0.5))
    assert optimum.Target(0.95, 0.5).met_by(loose.evaluation)
    assert loose.evaluation.replica_hours < full.evaluation.replica_hours


def test_an_unreachable_target_keeps_what_the_ceiling_reaches() -> None:
    found = search([2, 2, 12, 2], [2, 2, 2, 2], ceiling=8)
    assert not found.met and found.levels == (2, 2, 8, 2)
    assert found.evaluation.requests_within_slo == pytest.approx(1 - 40 / 400)


def test_the_warm_up_and_the_budget_are_kept() -> None:
    fat = [d + 2 for d in DEMAND]
    kept = search(DEMAND, fat, first_free=3)
    assert kept.levels[:3] == tuple(fat[:3]) and kept.levels[3:] == tuple(DEMAND[3:])
    once = search(DEMAND, fat, max_evaluations=1)
    assert once.levels == tuple(fat) and once.evaluations == 1 and once.evaluation is once.start


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4).map(lambda w: w * SLOTS_PER_WINDOW),
       st.integers(0, 3), st.lists(st.integers(-2, 3), min_size=16, max_size=16))
def test_the_search_never_ends_above_its_start_nor_below_its_target(demand: list[int], ahead: int,
                                                                    offset: list[int]) -> None:
    start = [max(1, d + o) for d, o in zip(demand, offset, strict=False)]
    found = search(demand, start, ahead)
    assert all(1 <= v <= 10 for v in found.levels)
    assert found.met and EVERYTHING.met_by(found.evaluation)  # demand <= 6 < ceiling: always reachable
    if EVERYTHING.met_by(found.start):
        assert found.evaluation.replica_hours <= found.start.replica_hours
    if ahead == 0:  # slots independent: the optimum is the demand itself
        assert found.levels == tuple(demand)


def test_on_the_simulator_the_oracle_row_is_the_schedule_the_search_kept() -> None:
    """A short 3x surge: the searched schedule meets the goals for less than the schedule it started
    from (each second sized at the capacity at the SLO), and the oracle row replays it exactly."""
    sc = bench.BenchScenario("short-surge", surge(800.0, 240.0, 3.0, at_s=90.0, ramp_s=30.0), 30.0, 90.0)
    params = SimParams(ServiceCurve.v100(), BatcherConfig(), 30.0, 0.5)
    scores, _runs = bench.run_scenario(sc, ["oracle"], params, 370.0, oracle_search=40)
    oracle = scores["oracle"]
    assert oracle["meets_goals"] == 1.0 and oracle["search_evaluations"] <= 40
    assert oracle["requests_within_slo"] >= 0.999 and oracle["windows_within_slo"] >= 0.99
    assert oracle["replica_hours"] < oracle["start_replica_hours"]
    marks = benchreport.yardsticks(scores)
    assert marks["oracle_search"]["start_vs_oracle"] > 1.0 and marks["oracle_search"]["meets_goals"]


def test_a_run_that_beats_the_oracle_fails_the_bench_once_recorded(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"yardsticks": {"azure": {"oracle_beaten_by": ["static@4"]}, "diurnal": {"oracle_beaten_by": []}}}
    monkeypatch.setattr(benchreport, "run", lambda _opts, progress=None: (doc, {}))
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "autoscale", "--no-write", "--json", "--quick", "--scenario", "diurnal"])
    assert exc.value.code == 1
    out = capsys.readouterr()
    assert '"oracle_beaten_by": ["static@4"]' in out.out  # the results first
    assert "oracle beaten: azure: static@4 met the oracle's shares" in out.err and "diurnal" not in out.err


@pytest.mark.parametrize("value", ["0", "10001"])
def test_a_search_budget_out_of_range_exits_2(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "autoscale", "--no-write", "--quick", "--scenario", "diurnal", "--oracle-search", value])
    assert exc.value.code == 2
    assert "--oracle-search must be in [1, 10000] simulations" in capsys.readouterr().err
