"""perf_analyzer profiles: capacity at the SLO, and clear errors for bad files."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.autoscaler.capacity import capacity_at_slo, load_capacity, parse_profile
from tidescale.contracts.errors import UsageError
from tidescale.sim.servicecurve import ServiceCurve, curve_capacity

# The column layout perf_analyzer -f writes (latencies in µs).
PROFILE = """Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,\
Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency
1,58.2,20,300,40,30,17000,20,5,17200,17900,18100,45000,17300
8,210.5,20,300,900,30,37000,20,5,38000,60000,70000,88000,39000
16,320.1,20,300,5000,30,48000,20,5,50000,90000,110000,132000,51000
32,380.4,20,300,40000,30,84000,20,5,120000,170000,190000,210000,125000
64,381.0,20,300,90000,30,84000,20,5,170000,260000,300000,350000,175000
"""


# perf_analyzer --request-rate-range (open loop, Poisson or constant arrivals): the load column is the
# rate offered (report_writer.cc writes "Request Rate" where it writes "Concurrency" in closed loop).
RATE_PROFILE = """Request Rate,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,\
Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,\
p99 latency,Avg latency
100,99.8,20,300,900,30,17000,20,5,18000,24000,27000,41000,19000
200,199.6,20,300,4000,30,30000,20,5,34000,52000,61000,97000,36000
300,298.1,20,300,30000,30,52000,20,5,80000,150000,190000,260000,90000
400,352.0,20,300,900000,30,84000,20,5,900000,1500000,1700000,2100000,950000
"""


def test_a_request_rate_profile_is_read_as_a_concurrency_one() -> None:
    rows = parse_profile(RATE_PROFILE, "rate.csv")
    assert [r.load for r in rows] == [100.0, 200.0, 300.0, 400.0]
    assert capacity_at_slo(rows, 0.5) == pytest.approx(298.1)  # 400 req/s: the queue grows past the SLO
    assert capacity_at_slo(rows, 0.1) == pytest.approx(199.6)
    for slo in (0.0, math.nan, math.inf):  # inf would take the fastest row, whatever its P99
        with pytest.raises(UsageError, match="SLO P99 must be a finite number > 0"):
            capacity_at_slo(rows, slo)
    with pytest.raises(UsageError, match="missing column\\(s\\) Concurrency or Request Rate"):
        parse_profile("Requests,Inferences/Second,p99 latency\n1,2,3\n")


def test_highest_throughput_within_slo() -> None:
    rows = parse_profile(PROFILE)
    assert capacity_at_slo(rows, 0.5) == pytest.approx(381.0)
    assert capacity_at_slo(rows, 0.2) == pytest.approx(320.1)
    assert capacity_at_slo(rows, 0.1) == pytest.approx(210.5)


def test_load_capacity_from_file(tmp_path: Path) -> None:
    p = tmp_path / "profile.csv"
    p.write_text(PROFILE)
    assert load_capacity(p, 0.15) == pytest.approx(320.1)
    p.write_text("\ufeff" + PROFILE)  # saved by a spreadsheet
    assert load_capacity(p, 0.15) == pytest.approx(320.1)


def test_a_profile_through_the_service_is_divided_among_its_replicas(tmp_path: Path) -> None:
    """A load test through the Service on 4 replicas reads their throughput together: the capacity the
    recommender sizes with is one replica's share of it, and a count that is no fleet is an error."""
    p = tmp_path / "fleet.csv"
    p.write_text(PROFILE)
    assert load_capacity(p, 0.15, replicas=4) == pytest.approx(320.1 / 4)
    assert capacity_at_slo(parse_profile(PROFILE), 0.5, replicas=2) == pytest.approx(381.0 / 2)
    for bad in (0, -1, 1001):
        with pytest.raises(UsageError, match=f"fleet.csv: the replicas the profile was measured on .*got {bad}"):
            load_capacity(p, 0.15, replicas=bad)


@pytest.mark.parametrize(("text", "message"), [
    ("Concurrency,Inferences/Second\n1,2\n", "missing column\\(s\\) p99 latency"),
    ("", "missing column"),
    ("Concurrency,Inferences/Second,p99 latency\n", "no data rows"),
    ("Concurrency,Inferences/Second,p99 latency\n1,abc,5\n", ":2: .* must be numbers"),
    ("Concurrency,Inferences/Second,p99 latency\n1,-5,5\n", "finite and >= 0"),
])
def test_bad_profiles(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_profile(text)


def test_no_row_within_slo_and_zero_capacity() -> None:
    rows = parse_profile(PROFILE)
    with pytest.raises(UsageError, match="no row has P99 within"):
        capacity_at_slo(rows, 0.01)
    zero = parse_profile("Concurrency,Inferences/Second,p99 latency\n1,0,100\n")
    with pytest.raises(UsageError, match="zero"):
        capacity_at_slo(zero, 1.0)
    with pytest.raises(UsageError, match="> 0"):
        capacity_at_slo(rows, 0)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_capacity(tmp_path / "nope.csv", 0.5)


def test_curve_capacity_is_a_fraction_of_peak() -> None:
    curve = ServiceCurve.v100()
    assert curve_capacity(curve) == pytest.approx(0.85 * curve.max_throughput())


@given(st.text(max_size=400))
@settings(max_examples=150, deadline=None)
def test_parser_fuzz_only_raises_usage_errors(text: str) -> None:
    try:
        rows = parse_profile(text)
    except UsageError:
        return
    assert rows and all(r.throughput_rps >= 0 and r.p99_s >= 0 for r in rows)


@given(st.lists(st.tuples(st.integers(1, 512), st.floats(0.1, 1e4), st.floats(1, 1e7)), min_size=1, max_size=20),
       st.floats(1e-4, 20))
@settings(max_examples=150, deadline=None)
def test_capacity_is_the_best_row_within_slo(rows: list[tuple[int, float, float]], slo: float) -> None:
    text = "Concurrency,Inferences/Second,p99 latency\n" + "".join(f"{c},{t!r},{p!r}\n" for c, t, p in rows)
    ok = [t for _, t, p in rows if p / 1e6 <= slo]
    if not ok:
        with pytest.raises(UsageError):
            capacity_at_slo(parse_profile(text), slo)
    else:
        assert capacity_at_slo(parse_profile(text), slo) == pytest.approx(max(ok))


def test_each_target_is_sized_at_its_own_models_slo(tmp_path: Path) -> None:
    """A target's slo_latency_threshold_s (the chart fills it from the model's SLO group) picks its capacity from
    the same profile; a target without one takes the recommender's default SLO."""
    from tidescale.autoscaler.settings import RecommenderSettings

    p = tmp_path / "profile.csv"
    p.write_text(PROFILE)
    strict = {"deployment": "triton-ctr", "namespace": "ml", "model": "ctr", "slo_latency_threshold_s": 0.1}
    default = {"deployment": "triton-emb", "namespace": "ml", "model": "emb"}
    settings = RecommenderSettings.model_validate({"profile": p, "slo_latency_threshold_s": 0.5, "targets": [strict,
                                                                                                             default]})
    ctr, emb = settings.targets
    assert (settings.slo_for(ctr), settings.slo_for(emb)) == (0.1, 0.5)
    assert settings.capacity_for(ctr) == pytest.approx(210.5)
    assert settings.capacity_for(emb) == pytest.approx(381.0)
