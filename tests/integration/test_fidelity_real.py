"""One short fidelity point against a real Triton replica: real and simulated batching agree in kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidescale.benches import compare, fidelity

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def overload_point(tmp_path_factory: pytest.TempPathFactory) -> dict:
    pytest.importorskip("pytriton")
    workdir: Path = tmp_path_factory.mktemp("fidelity")
    return fidelity.run_point(1.2, 10.0, seed=3, real=True, workdir=workdir, log=lambda *a: None)


def test_real_and_sim_batch_above_one_and_agree_on_mean_batch(overload_point: dict) -> None:
    real, sim = overload_point["real"], overload_point["sim"]
    assert real["requests"] > 0.9 * overload_point["rps"] * overload_point["seconds"]
    assert sim["requests"] == real["requests"]  # the sim replays exactly the arrivals the server saw
    assert real["batches"]["mean_batch"] > 2 and sim["batches"]["mean_batch"] > 2
    assert max(real["batches"]["exec_share"]) >= 16 and max(sim["batches"]["exec_share"]) >= 16
    assert abs(overload_point["vs_sim"]["mean_batch_rel_diff"]) < 0.3


def test_real_and_sim_queue_time_evolve_alike(overload_point: dict) -> None:
    # On a loaded shared CPU the client may not deliver the full 120 %, so growth itself is checked
    # on the simulator below; here the two must tell the same story on the same arrivals.
    # The real replica also pays the Python backend's per-execution overhead, so its queue grows
    # somewhat faster; both must grow, at rates within a factor of two of each other.
    real, sim = overload_point["real_queue_growth"], overload_point["sim_queue_growth"]
    assert real["slope_s_per_s"] > 0.03 and sim["slope_s_per_s"] > 0.03, (real, sim)
    assert 0.5 < real["slope_s_per_s"] / sim["slope_s_per_s"] < 2.0, (real, sim)
    assert sim["last_third_ms"] == pytest.approx(real["last_third_ms"], rel=0.5)


def test_sim_queue_grows_at_120_percent_of_capacity() -> None:
    curve, cfg = fidelity.model_curve(), fidelity.batcher_config()
    arrivals = fidelity.poisson(1.2 * fidelity.capacity_rps(curve, cfg), 10.0, seed=3)
    g = compare.queue_growth(*_arrival_and_queue(fidelity.simulate(curve, cfg, arrivals, seed=3)))
    assert g["last_third_ms"] > 2 * g["first_third_ms"] and g["slope_s_per_s"] > 0.03


def _arrival_and_queue(side: fidelity.SideResult) -> tuple:
    return side.arrival, side.queue


def test_server_side_p99_is_close(overload_point: dict) -> None:
    # With the service times the replica really had (Python backend overhead included); loose bound
    # for a shared CI CPU, the benchmark records the exact figures.
    assert abs(overload_point["vs_sim_measured"]["p99_rel_diff"]) < 0.3
    assert overload_point["sim_measured"]["batches"]["dominant_batch"] == overload_point["real"]["batches"][
        "dominant_batch"]


@pytest.fixture(scope="module")
def overload_with_timeout(tmp_path_factory: pytest.TempPathFactory) -> dict:
    pytest.importorskip("pytriton")
    workdir: Path = tmp_path_factory.mktemp("fidelity-timeout")
    return fidelity.run_point(1.2, 8.0, seed=3, real=True, workdir=workdir, log=lambda *a: None,
                              queue_timeout_s=0.3)


def test_under_a_queue_timeout_real_and_sim_run_full_batches_and_reject_the_excess(overload_with_timeout: dict) -> None:
    """At 120 % load with a 0.3 s REJECT policy a real replica runs near-full batches (no payload is
    prefetched where the policy cannot reach it) and rejects what it cannot serve; the triton-2.51
    model with the replica's measured service times agrees (a model that prefetched payloads and
    rejected their expired requests at the start ran batches of 17 against the real 29)."""
    real, model = overload_with_timeout["real"], overload_with_timeout["sim_measured"]
    assert real["rejected"] > 0 and real["batches"]["mean_batch"] > 20, real
    assert abs(overload_with_timeout["vs_sim_measured"]["mean_batch_rel_diff"]) < 0.2
    # the share rejected is the capacity's mirror: loose on a shared CI CPU, the page records the figure
    assert abs(model["rejected_share"] - real["rejected_share"]) < 0.08
    assert model["requests"] + model["rejected"] == real["requests"] + real["rejected"]

