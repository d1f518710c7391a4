"""The peers on every draw: which points rerun, and dominance judged over the draws."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.unit.benches.test_autoscale_frontier import QUICK_ORACLE, fake, fake_doc
from tidescale.benches.autoscale import peer_draws
from tidescale.benches.autoscale import report as benchreport


def m(req: float, win: float, cost: float | None) -> dict[str, Any]:
    return {"requests_within_slo": req, "windows_within_slo": win, "cost_vs_oracle": cost}


def test_each_peer_reruns_its_best_point_and_every_point_that_dominated_tidescale() -> None:
    doc = fake_doc(fake(0.999, 1.0, 2.6))  # keda-rps@263 (1.3) and ray-serve@8 (2.5) both dominate it
    rows, frontiers = doc["scenarios"]["diurnal"], doc["frontiers"]["diurnal"]
    assert rows["tidescale"]["dominated_by"] == ["keda-rps@263", "ray-serve@8"]
    assert rows["keda-rps"]["setting"] == 263.0 and rows["ray-serve"]["setting"] == 8.0
    assert peer_draws.settings_to_rerun(rows, frontiers) == {"keda-rps": (263.0,), "ray-serve": (8.0,)}
    # a dominating frontier point that is not the peer's best reruns beside it
    rows = {**rows, "tidescale": {**rows["tidescale"], "dominated_by": ["keda-rps@376"]}}
    assert peer_draws.settings_to_rerun(rows, frontiers)["keda-rps"] == (263.0, 376.0)


def test_dominance_over_draws_is_significant_only_where_a_paired_interval_clears_zero() -> None:
    row = [m(0.99, 1.0, 1.20), m(0.98, 1.0, 1.30), m(0.97, 1.0, 1.10)]
    cheaper = [m(0.99, 1.0, 1.00), m(0.98, 1.0, 1.11), m(0.97, 1.0, 0.89)]  # 0.19-0.21 cheaper on every draw
    assert peer_draws.dominance(cheaper, row) == "significant"
    # cheaper on the mean, but by -0.3, +0.5, +0.4: the interval spans zero
    noisy = [m(0.99, 1.0, 1.50), m(0.98, 1.0, 0.80), m(0.97, 1.0, 0.70)]
    assert peer_draws.dominance(noisy, row) == "on the mean"
    # worse on one mean (requests), however much cheaper: not dominating
    assert peer_draws.dominance([m(0.975, 1.0, 0.5)] * 3, row) is None
    assert peer_draws.dominance(row, row) is None  # identical is not better
    assert peer_draws.dominance([m(0.99, 1.0, None)] * 3, row) is None  # a draw without an oracle: not judged


def test_across_draws_pairs_the_page_seed_with_every_extra_draw() -> None:
    doc = fake_doc(fake(0.999, 1.0, 2.6))
    doc["setup"]["seed"] = 0
    doc["seeds"] = {"seeds": [5, 6], "scenarios": {"diurnal": {
        str(s): {"bound": None, "rows": {"tidescale": m(0.999, 1.0, c)},
                 "peers": {"keda-rps@263": m(r, 1.0, 1.3), "ray-serve@8": m(1.0, 1.0, 2.5)}}
        for s, c, r in ((5, 2.4, 0.995), (6, 2.7, 1.0))}}}
    found = peer_draws.across_draws(doc)
    keda = found["ci95"]["diurnal"]["keda-rps@263"]
    assert keda["draws"] == 3 and keda["draws_meeting_slo_goals"] == 2  # seed 5's 99.5 % misses
    assert keda["requests_within_slo"]["mean"] == 0.9983
    assert keda["cost_vs_oracle"] == {"mean": 1.3, "ci95": 0.0}
    # keda-rps@263 serves less on seed 5 (99.5 %) than tidescale's 99.9 %, so on the mean it does not
    # dominate; ray-serve@8 is cheaper on the mean only (by 0.1, -0.1, 0.2), but serves 0.1 point more on
    # every draw: significant
    assert found["dominated_by"]["diurnal"]["tidescale"] == [{"point": "ray-serve@8", "verdict": "significant"}]
    # seeds 5 and 6 were tuned on by no one: judged again on those alone
    held = found["held_out"]
    assert held["seeds"] == [5, 6] and held["ci95"]["diurnal"]["keda-rps@263"]["draws"] == 2
    assert held["dominated_by"]["diurnal"]["tidescale"] == [{"point": "ray-serve@8", "verdict": "significant"}]
    page = "\n".join(peer_draws.lines({**doc, "seeds": {**doc["seeds"], "across_draws": found}}))
    assert "| diurnal | keda-rps@263 | 2 of 3 | 99.83 ± 0.72 % | 100.0 ± 0.0 % | 1.300 ± 0.000× | 1 of 2 |" in page
    assert "| diurnal | ray-serve@8 | 3 of 3 | 100.00 ± 0.00 % | 100.0 ± 0.0 % | 2.500 ± 0.000× |" in page
    assert "| diurnal | tidescale | ray-serve@8 (**significant**) |" in page


def test_extra_draws_rerun_the_peers_at_their_chosen_settings() -> None:
    opts = benchreport.BenchOptions(["surge-3x"], ("static", "tidescale", "oracle"), quick=True, extra_seeds=(4,),
                                    peer_settings=("static=6", "static=12"), oracle_search=QUICK_ORACLE)
    doc, _runs = benchreport.run(opts)
    best = doc["scenarios"]["surge-3x"]["static"]["setting"]
    drawn = doc["seeds"]["scenarios"]["surge-3x"]["4"]
    assert f"static@{best:g}" in drawn["peers"]
    static = doc["seeds"]["across_draws"]["ci95"]["surge-3x"][f"static@{best:g}"]
    assert static["draws"] == 2 and static["cost_vs_oracle"]["ci95"] is not None
    assert "## Peers on every draw" in benchreport.markdown(doc)


def test_a_trace_draw_replays_the_trace_shifted_in_time_keeping_every_arrival() -> None:
    from tidescale.benches.autoscale import scenarios as bench

    sc = bench.build_scenarios(1200.0, 800.0)["azure-llm-trace"]
    recorded_trace = bench.drawn_arrivals(sc, 0)
    assert (recorded_trace == sc.traffic.arrivals(0)).all()  # the page's seed: the trace as recorded
    one, two = bench.drawn_arrivals(sc, 1), bench.drawn_arrivals(sc, 2)
    duration = sc.traffic.duration_s
    assert len(one) == len(two) == len(recorded_trace) and (one >= 0).all() and (one < duration).all()
    assert not np.array_equal(one, recorded_trace) and not np.array_equal(one, two)
    offset = bench.trace_offset_s(1, duration)
    assert 0 < offset < duration
    # what arrived at offset + t now arrives at t: shifted back, the trace as recorded
    assert np.allclose(np.sort((one + offset) % duration), recorded_trace)
    assert np.array_equal(bench.drawn_arrivals(sc, 1), one)  # a draw is reproducible
    assert (bench.circular_shift(np.array([1.0, 5.0, 9.0]), 10.0, 4.0) == [1.0, 5.0, 7.0]).all()
    # a rate's draws are Poisson realisations, untouched
    surge = bench.build_scenarios(1200.0, 800.0)["surge-3x"]
    assert (bench.drawn_arrivals(surge, 3) == surge.traffic.arrivals(3)).all()


def test_the_goal_table_says_which_points_dominate_tidescale_significantly_across_the_draws() -> None:
    doc = fake_doc(fake(1.0, 1.0, 1.12))
    assert "undominated across the draws" not in "\n".join(benchreport.goal_lines(doc))  # no extra draws
    doc["seeds"] = {"seeds": [5], "scenarios": {}, "across_draws": {"ci95": {}, "dominated_by": {"diurnal": {
        "tidescale": [{"point": "keda-rps@263", "verdict": "significant"},
                      {"point": "ray-serve@8", "verdict": "on the mean"}]}}}}
    goals = benchreport.goal_lines(doc)
    assert "| diurnal | tidescale | 100.00 % / 100 %: yes | 1.12: yes | yes | yes | no (keda-rps@263) |" in goals
    doc["seeds"]["across_draws"]["dominated_by"]["diurnal"]["tidescale"] = [
        {"point": "ray-serve@8", "verdict": "on the mean"}]
    goals = benchreport.goal_lines(doc)
    assert "| diurnal | tidescale | 100.00 % / 100 %: yes | 1.12: yes | yes | yes | yes |" in goals
    # where two draws or more were held out, the column judges those
    doc["seeds"]["across_draws"]["held_out"] = {"seeds": [5, 6], "ci95": {}, "dominated_by": {"diurnal": {
        "tidescale": [{"point": "static@4", "verdict": "significant"}]}}}
    assert "| yes | yes | no (static@4) |" in "\n".join(benchreport.goal_lines(doc))


def two_extra_draws(seed0: dict[str, Any], tidescale: dict[str, Any], peer: str,
                    peer_draw: dict[str, Any]) -> dict[str, Any]:
    """A page's doc whose diurnal scenario was rerun on seeds 5 and 6, each draw alike."""
    doc = fake_doc(seed0)
    doc["setup"]["seed"] = 0
    doc["seeds"] = {"seeds": [5, 6], "scenarios": {"diurnal": {
        str(s): {"bound": None, "rows": {"tidescale": tidescale}, "peers": {peer: peer_draw}} for s in (5, 6)}}}
    doc["seeds"]["across_draws"] = peer_draws.across_draws(doc)
    return doc


def test_the_draws_are_plotted_beside_the_frontiers_and_linked_from_the_page(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    doc = two_extra_draws(fake(0.999, 1.0, 2.6), m(0.999, 1.0, 2.5), "ray-serve@8", m(1.0, 1.0, 2.4))
    png = peer_draws.draws_png(Path(tmp_path) / "autoscale-frontiers.png")
    assert png.name == "autoscale-draws.png"
    peer_draws.plot(doc, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](autoscale-draws.png)" in "\n".join(peer_draws.lines(doc, png.name))
    assert "](autoscale-draws.png)" in benchreport.markdown(doc)


def test_the_draws_plot_stops_at_100_percent_when_every_point_sits_there(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    doc = two_extra_draws(fake(1.0, 1.0, 1.1), m(1.0, 1.0, 1.1), "static@4", m(1.0, 1.0, 1.8))
    figures: list[Any] = []
    monkeypatch.setattr(peer_draws, "save_figure", lambda fig, path: figures.append(fig))
    peer_draws.plot(doc, Path(tmp_path) / "autoscale-draws.png")
    [ax] = [a for a in figures[0].axes if a.get_visible()]
    low, high = ax.get_ylim()
    assert low < 100 < high <= peer_draws.PERCENT_TOP  # matplotlib's own margin reached 105 %
