"""Bench helpers: trace parsing (real Triton files, fuzzed), batch_stats deltas, comparison math."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.paths import FIXTURES
from tidescale.benches import compare, fidelity, published, sim
from tidescale.benches.tracefile import parse_trace
from tidescale.contracts.errors import UsageError

REAL_TRACE = FIXTURES / "triton" / "real-2.51" / "trace_triton.json"
PROFILE_TRACE = FIXTURES / "profiles" / "triton" / "trace_timestamps.json.0"
FOOD_STATS = FIXTURES / "triton" / "stats_food_classifier_2025.json"


@pytest.mark.parametrize("path", [REAL_TRACE, PROFILE_TRACE])
def test_real_trace_files_parse_into_consistent_requests(path: Path) -> None:
    text = path.read_text()
    ends = {e["id"] for e in json.loads(text)
            for s in e.get("timestamps", []) if s["name"] == "REQUEST_END"}
    traced = parse_trace(text)
    assert 0 < len(traced) <= len(ends)
    assert np.all(traced.latency > 0) and np.all(traced.queue >= 0)
    assert np.all(traced.latency >= traced.queue)
    assert traced.queue_start[0] >= 0 and np.all(np.diff(traced.queue_start) >= 0)


def test_trace_model_filter_and_warmup_skip() -> None:
    text = PROFILE_TRACE.read_text()
    assert len(parse_trace(text, model="ranker")) == len(parse_trace(text))
    assert len(parse_trace(text, model="other")) == 0
    all_ = parse_trace(text)
    later = all_.after(3)
    assert len(later) == len(all_) - 3 and later.queue_start[0] == 0.0


def test_trace_that_is_not_an_array_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="JSON array"):
        parse_trace('{"id": 1}')
    with pytest.raises(UsageError, match="not valid JSON"):
        parse_trace("[{")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
stamp = st.fixed_dictionaries({"name": st.sampled_from(["REQUEST_START", "QUEUE_START", "COMPUTE_START",
                                                       "REQUEST_END", "X"]) | st.integers(),
                               "ns": st.integers(0, 10**12) | st.text(max_size=3)})
entry = st.fixed_dictionaries({"id": st.integers(0, 5) | st.text(max_size=2) | st.booleans(),
                               "timestamps": st.lists(stamp, max_size=5) | json_values}) | json_values


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(entry, max_size=30))
def test_parse_trace_fuzz(entries: list[object]) -> None:
    traced = parse_trace(json.dumps(entries))
    assert len(traced.queue_start) == len(traced.latency) == len(traced.queue)
    assert np.all(traced.latency >= traced.queue)


def test_batch_stats_deltas_from_a_real_stats_response() -> None:
    stats = json.loads(FOOD_STATS.read_text())["model_stats"][0]
    counts = compare.counts_from_batch_stats([], stats["batch_stats"], 32)
    assert counts.sum() == stats["execution_count"]
    assert (counts * np.arange(33)).sum() == stats["inference_count"]
    assert compare.counts_from_batch_stats(stats["batch_stats"], stats["batch_stats"], 32).sum() == 0
    exec_s = compare.exec_seconds_from_batch_stats([], stats["batch_stats"], 32)
    b1 = next(s for s in stats["batch_stats"] if s["batch_size"] == 1)
    want = sum(b1[k]["ns"] for k in ("compute_input", "compute_infer", "compute_output")) / b1["compute_infer"]["count"]
    assert exec_s[1] == pytest.approx(want / 1e9)


def test_batch_distribution_and_distances() -> None:
    counts = np.array([0, 2, 0, 0, 1])  # two singles, one batch of 4
    d = compare.batch_distribution(counts)
    assert d["mean_batch"] == pytest.approx(2.0) and d["dominant_batch"] == 1
    assert d["request_share"] == {1: pytest.approx(1 / 3, abs=1e-4), 4: pytest.approx(2 / 3, abs=1e-4)}
    assert compare.total_variation({1: 1.0}, {1: 1.0}) == 0.0
    assert compare.total_variation({1: 1.0}, {2: 1.0}) == 1.0
    assert compare.rel_diff(110.0, 100.0) == pytest.approx(0.1)
    assert compare.rel_diff(1.0, 0.0) is None
    assert compare.within_goal(0.05, -0.09) and not compare.within_goal(0.05, 0.2) and not compare.within_goal(None)


def test_queue_growth_detects_a_growing_queue() -> None:
    arrival = np.linspace(0, 10, 300)
    g = compare.queue_growth(arrival, 0.2 * arrival)
    assert g["slope_s_per_s"] == pytest.approx(0.2) and g["last_third_ms"] > 4 * g["first_third_ms"]
    flat = compare.queue_growth(arrival, np.full(300, 0.01))
    assert flat["slope_s_per_s"] == pytest.approx(0.0, abs=1e-9)


def test_fidelity_sim_point_at_overload_shows_queue_growth() -> None:
    point = fidelity.run_point(1.2, 20.0, seed=1, real=False, workdir=Path("/nonexistent"), log=print)
    g = point["sim_queue_growth"]
    assert g["last_third_ms"] > 2 * g["first_third_ms"] and g["slope_s_per_s"] > 0.05
    assert point["sim"]["batches"]["mean_batch"] > 4


def test_overhead_is_measured_instance_time_minus_curve() -> None:
    curve = fidelity.model_curve()
    counts = np.zeros(33)
    counts[1], counts[8] = 3, 1
    measured = {1: curve.exec_seconds(1) + 0.002, 8: curve.exec_seconds(8) + 0.006}
    assert fidelity.mean_overhead_s(curve, measured, counts) == pytest.approx((3 * 0.002 + 0.006) / 4)


def test_calibrated_curve_adds_the_backend_cost_per_execution_and_reports_its_misfit() -> None:
    curve = fidelity.model_curve()
    calibrated = fidelity.with_backend_overhead(curve, 32, (0.010, 0.001))
    assert calibrated.exec_seconds(1) == pytest.approx(curve.exec_seconds(1) + 0.011)
    assert calibrated.exec_seconds(32) == pytest.approx(curve.exec_seconds(32) + 0.042)
    counts = np.zeros(33)
    counts[[1, 16]] = [4, 4]
    faster = {b: calibrated.exec_seconds(b) - 0.002 for b in (1, 16)}  # this run: 2 ms under the calibration
    assert fidelity.mean_overhead_s(calibrated, faster, counts, floor=None) == pytest.approx(-0.002)
    assert fidelity.mean_overhead_s(calibrated, faster, counts) == 0.0


def test_published_case_queue_rises_steeply_towards_capacity() -> None:
    q200 = published.mean_queue(8, 365.0, 200, 20.0)
    q300 = published.mean_queue(8, 365.0, 300, 20.0)
    q400 = published.mean_queue(8, 365.0, 400, 20.0)
    assert q200 < q300 < q400 and q300 > 5 * q200 and q400 > 0.3  # overload: seconds of queue after 20 s


def test_sim_bench_peer_agrees_with_the_fast_simulator() -> None:
    peer = sim.run_peer(1.0, 500.0, 5)
    assert peer["identical_latencies_on_slice"] and peer["slice_requests"] > 300


def test_measured_curve_fits_instance_time_per_execution() -> None:
    curve = fidelity.model_curve()
    counts = np.zeros(33)
    counts[[1, 8, 32]] = [10, 5, 2]
    measured = {1: 0.060, 8: 0.130, 32: 0.370}  # 0.05 s + 10 ms per request
    fitted = fidelity.measured_curve(curve, measured, counts, 32)
    assert fitted.exec_seconds(1) == pytest.approx(0.060, abs=1e-3)
    assert fitted.exec_seconds(32) == pytest.approx(0.370, abs=1e-3)
    one_size = fidelity.measured_curve(curve, {4: curve.exec_seconds(4) + 0.005}, counts + np.eye(33)[4], 32)
    assert one_size.exec_seconds(4) == pytest.approx(curve.exec_seconds(4) + 0.005)
